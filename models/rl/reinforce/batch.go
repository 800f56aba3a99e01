package reinforce

import (
	"fmt"
	"slices"
	"sync"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/models/rl/cartpole"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

// Selector is the part of an Actor that RunSteps needs: observers of the
// batch tutorial keep their rewards and return them at the end.
type Selector interface {
	// SelectAction returns the action to take in observation obs. It does
	// not keep obs.
	SelectAction(observer int, obs []float64) (int, error)
}

var (
	_ Selector = (*Agent)(nil)
	_ Selector = (*BatchAgent)(nil)
)

// Steps is what RunSteps returns: an observer's part of one round of the
// batch tutorial. It is plain data, to travel back to the agent.
type Steps struct {
	// Returns holds each step's discounted return Gₜ = rₜ + γ·Gₜ₊₁ within
	// the step's own episode; the episode that the round cuts short is
	// discounted as if it ended there.
	Returns []float64
	// Reward is the total reward of the round's first episode, or the
	// number of steps if no episode ended (the tutorial's ep_reward).
	Reward float64
	// Episodes counts the episodes that ended within the round.
	Episodes int
}

// RunSteps is the batch tutorial's run_episode: it resets the environment
// and takes exactly n steps, asking s for each action and resetting the
// environment whenever an episode ends, so that every observer asks for
// the same number of actions (which lets the agent batch them). It
// returns the steps' discounted returns, computed here with gamma, or the
// first error of s.
func (o *Observer) RunSteps(s Selector, n int, gamma float64) (Steps, error) {
	obs := o.env.Reset()
	rewards := make([]float64, 0, n)
	res := Steps{Returns: make([]float64, 0, n), Reward: float64(n)}
	start := 0 // the current episode's first step
	for step := range n {
		action, err := s.SelectAction(o.id, obs[:])
		if err != nil {
			return res, fmt.Errorf("observer %d step %d: %w", o.id, step+1, err)
		}
		if !cartpole.ValidAction(action) {
			return res, fmt.Errorf("observer %d step %d: the agent chose action %d, not %d or %d",
				o.id, step+1, action, cartpole.Left, cartpole.Right)
		}
		var reward float64
		var terminated, truncated bool
		obs, reward, terminated, truncated = o.env.Step(action)
		rewards = append(rewards, reward)
		if terminated || truncated {
			if res.Episodes == 0 {
				res.Reward = sum(rewards[start:])
			}
			res.Episodes++
			res.Returns = append(res.Returns, Returns(rewards[start:], gamma)...)
			start = step + 1
			obs = o.env.Reset()
		}
	}
	res.Returns = append(res.Returns, Returns(rewards[start:], gamma)...)
	return res, nil
}

func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

// BatchAgent is the agent of PyTorch's "Implementing Batch RPC Processing
// Using Asynchronous Executions" tutorial. Each round every observer takes
// the same number of steps (Observer.RunSteps); the agent picks actions
// one at a time (SelectAction) or for all observers at once with one
// forward pass (SelectActions), recording each action's log-probability,
// and Finish takes one Adam step on
//
//	-Σ_observers Σₜ log π(aₜ|sₜ) · Gₜ / (number of observers)
//
// with the observers' own returns G, not normalised, as the tutorial.
//
// A BatchAgent is safe for concurrent use and serialises the calls.
// Actions are drawn from one seeded stream in the order of the calls, a
// batch's rows in the order given.
type BatchAgent struct {
	opt Options

	mu struct {
		sync.Mutex
		rng     *tensor.RNG
		policy  *Policy
		optim   *optim.Adam
		running float64
		passes  []pass      // this round's forward passes
		counts  map[int]int // actions per observer this round
	}
}

// pass is one forward pass: row i chose actions[i] for observers[i].
type pass struct {
	logp      *autograd.Var // len(observers)×NumActions, on the graph
	observers []int
	actions   []int
}

// NewBatchAgent returns a batch agent with a freshly initialised policy
// (drawn as NewAgent draws it) and a running reward of 0.
func NewBatchAgent(opt Options) *BatchAgent {
	opt = opt.withDefaults()
	a := &BatchAgent{opt: opt}
	a.mu.rng = tensor.NewRNG(opt.Seed)
	a.mu.policy = NewPolicy(a.mu.rng)
	a.mu.optim = optim.NewAdam(nn.Parameters(a.mu.policy), optim.AdamOptions{LR: opt.LR})
	a.mu.counts = map[int]int{}
	return a
}

// Policy returns the agent's policy network; use it only while no other
// call is in progress.
func (a *BatchAgent) Policy() *Policy {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.policy
}

// RunningReward returns the running reward after the last Finish (0
// before the first).
func (a *BatchAgent) RunningReward() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.running
}

// Solved reports whether the running reward is above the reward
// threshold.
func (a *BatchAgent) Solved() bool { return a.RunningReward() > a.opt.RewardThreshold }

// SelectAction runs the policy on one observation, samples an action and
// records its log-probability for observer (the tutorial's select_action).
// It fails with ErrObservation if obs is not ObsSize finite numbers.
func (a *BatchAgent) SelectAction(observer int, obs []float64) (int, error) {
	actions, err := a.SelectActions([]int{observer}, [][]float64{obs})
	if err != nil {
		return 0, err
	}
	return actions[0], nil
}

// SelectActions runs the policy once on the len(observers)×ObsSize batch
// of observations obs[i] of observers[i], samples one action per row and
// records each row's log-probability for its observer (the tutorial's
// select_action_batch). It does not keep obs. It fails with
// ErrObservation if an observation is not ObsSize finite numbers or the
// lengths differ, and with ErrOrder if an observer appears twice; then
// nothing is recorded.
func (a *BatchAgent) SelectActions(observers []int, obs [][]float64) ([]int, error) {
	n := len(observers)
	if len(obs) != n || n == 0 {
		return nil, fmt.Errorf("%w: %d observers, %d observations", ErrObservation, n, len(obs))
	}
	x := make([]float32, n*ObsSize)
	for i, o := range obs {
		if err := putObs(x[i*ObsSize:(i+1)*ObsSize], observers[i], o); err != nil {
			return nil, err
		}
		if slices.Contains(observers[:i], observers[i]) {
			return nil, fmt.Errorf("%w: observer %d asked twice in one batch", ErrOrder, observers[i])
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	logp := a.mu.policy.LogProbs(autograd.Const(tensor.FromFloat32(x, n, ObsSize)))
	p := pass{logp: logp, observers: slices.Clone(observers), actions: make([]int, n)}
	for i, id := range observers {
		p.actions[i] = sampleRow(a.mu.rng, logp.Value(), i)
		a.mu.counts[id]++
	}
	a.mu.passes = append(a.mu.passes, p)
	return slices.Clone(p.actions), nil
}

// Finish ends the round: steps holds each observer's Steps, whose Returns
// must have one return per action selected for it this round. It takes one
// Adam step on the loss above, and updates the running reward to
// 0.5·(mean Steps.Reward) + 0.5·(the running reward before), the batch
// tutorial's weights. Episode.Reward is that mean.
//
// It fails with ErrNoSteps if no action was selected, and with ErrOrder if
// the observers in steps, or their numbers of returns, do not match the
// actions selected; either way the round's records are dropped and
// neither the policy nor the running reward changes.
func (a *BatchAgent) Finish(steps map[int]Steps) (Episode, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	passes, counts := a.mu.passes, a.mu.counts
	a.mu.passes, a.mu.counts = nil, map[int]int{}

	if len(passes) == 0 {
		return Episode{}, fmt.Errorf("%w: no observer selected an action since the last Finish", ErrNoSteps)
	}
	ids := make([]int, 0, len(steps))
	for id := range steps {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	total, reward := 0, 0.0
	for _, id := range ids {
		if got, want := len(steps[id].Returns), counts[id]; got != want {
			return Episode{}, fmt.Errorf("%w: observer %d returned %d returns for %d actions", ErrOrder, id, got, want)
		}
		total += counts[id]
		reward += steps[id].Reward
	}
	for id := range counts {
		if _, ok := steps[id]; !ok {
			return Episode{}, fmt.Errorf("%w: observer %d took %d actions but returned no steps", ErrOrder, id, counts[id])
		}
	}

	// loss = -Σ rows Σₐ [a = aᵢ]·Gᵢ/N·log π(a|sᵢ), rows in the order taken.
	scale := 1 / float64(len(ids))
	next := map[int]int{} // each observer's next return
	g := make([]float32, total*NumActions)
	logps := make([]*autograd.Var, len(passes))
	row := 0
	for i, p := range passes {
		logps[i] = p.logp
		for j, id := range p.observers {
			g[row*NumActions+p.actions[j]] = float32(steps[id].Returns[next[id]] * scale)
			next[id]++
			row++
		}
	}
	lp := autograd.Cat(0, logps...)
	loss := autograd.Neg(autograd.SumAll(autograd.Mul(lp, autograd.Const(tensor.FromFloat32(g, total, NumActions)))))
	a.mu.optim.ZeroGrad(true)
	if err := loss.Backward(nil); err != nil {
		return Episode{}, fmt.Errorf("reinforce: backward of the policy loss: %w", err)
	}
	a.mu.optim.Step()

	reward /= float64(len(ids))
	a.mu.running = 0.5*reward + 0.5*a.mu.running
	return Episode{
		Reward:    reward,
		Running:   a.mu.running,
		Observers: len(ids),
		Steps:     total,
		Loss:      loss.Value().Item(),
	}, nil
}
