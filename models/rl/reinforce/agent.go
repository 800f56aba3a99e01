package reinforce

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/models/rl/cartpole"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

// Float32Eps is float32's machine epsilon (numpy's finfo(float32).eps),
// which the tutorial adds to the returns' standard deviation.
const Float32Eps = 0x1p-23

// Options are the agent's hyper-parameters. Zero values mean the
// tutorial's.
type Options struct {
	// Seed seeds the policy's initial weights, its dropout masks and the
	// action sampling (one stream, in that order of use).
	Seed uint64
	// Gamma is the discount factor (0.99).
	Gamma float64
	// LR is Adam's learning rate (1e-2).
	LR float64
	// RewardThreshold is the running reward above which Solved reports
	// true (475, CartPole-v1's reward_threshold).
	RewardThreshold float64
}

func (o Options) withDefaults() Options {
	if o.Gamma == 0 {
		o.Gamma = 0.99
	}
	if o.LR == 0 {
		o.LR = 1e-2
	}
	if o.RewardThreshold == 0 {
		o.RewardThreshold = cartpole.RewardThreshold
	}
	return o
}

// Errors returned by the Agent. They are wrapped with the observer and the
// call that failed.
var (
	// ErrObservation: SelectAction got an observation that is not ObsSize
	// finite numbers.
	ErrObservation = errors.New("reinforce: bad observation")
	// ErrOrder: an observer reported a reward without an action selected
	// for it, or finished an episode with actions whose rewards it did not
	// report.
	ErrOrder = errors.New("reinforce: calls out of order")
	// ErrNoSteps: FinishEpisode was called with no step recorded.
	ErrNoSteps = errors.New("reinforce: episode has no steps")
)

// Episode is what FinishEpisode reports about the episode it finished.
type Episode struct {
	// Reward is the smallest total reward among the observers, which the
	// tutorial takes as the episode's reward.
	Reward float64
	// Running is the running reward after this episode:
	// 0.05·Reward + 0.95·(the running reward before).
	Running float64
	// Observers and Steps count the observers that took part and the steps
	// they took in all.
	Observers, Steps int
	// Loss is the policy loss, -Σₜ log π(aₜ|sₜ)·Ĝₜ over all steps (see
	// FinishEpisode).
	Loss float64
}

// Agent is the tutorial's agent: it owns the policy and its optimizer,
// picks actions for observers and records, per observer, the
// log-probability of each action on the autograd graph and the reward that
// followed; FinishEpisode turns them into one REINFORCE update.
//
// Observers run elsewhere (another goroutine, or another worker over RPC);
// an Agent is safe for concurrent use and serialises the calls, so a
// forward pass, the sampling and the update never overlap. Actions are
// drawn from one seeded stream in the order the calls arrive: with
// observers run one after another the run is reproducible; with observers
// running concurrently it is as reproducible as their interleaving.
type Agent struct {
	opt Options

	mu struct {
		sync.Mutex
		rng     *tensor.RNG
		policy  *Policy
		optim   *optim.Adam
		running float64
		traces  map[int]*trace // per observer, this episode
	}
}

// trace is one observer's episode so far.
type trace struct {
	logProbs []*autograd.Var // log π(·|sₜ), each 1×NumActions, on the graph
	actions  []int           // aₜ
	rewards  []float64
}

// NewAgent returns an agent with a freshly initialised policy and a
// running reward of 0.
func NewAgent(opt Options) *Agent {
	opt = opt.withDefaults()
	a := &Agent{opt: opt}
	a.mu.rng = tensor.NewRNG(opt.Seed)
	a.mu.policy = NewPolicy(a.mu.rng)
	a.mu.optim = optim.NewAdam(nn.Parameters(a.mu.policy), optim.AdamOptions{LR: opt.LR})
	a.mu.traces = map[int]*trace{}
	return a
}

// Policy returns the agent's policy network. It is the agent's own: use it
// (to save it, or to evaluate it) only while no other call is in progress.
func (a *Agent) Policy() *Policy {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.policy
}

// RunningReward returns the running reward after the last FinishEpisode
// (0 before the first).
func (a *Agent) RunningReward() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.running
}

// Solved reports whether the running reward is above the reward
// threshold.
func (a *Agent) Solved() bool { return a.RunningReward() > a.opt.RewardThreshold }

// SelectAction runs the policy on obs, samples an action from the
// resulting categorical distribution and records its log-probability for
// observer. It does not keep obs. An observer that sees its first call in
// an episode joins that episode.
//
// It fails with ErrObservation if obs is not ObsSize finite numbers, and
// with ErrOrder if observer has an action whose reward it has not yet
// reported.
func (a *Agent) SelectAction(observer int, obs []float64) (int, error) {
	x := make([]float32, ObsSize)
	if err := putObs(x, observer, obs); err != nil {
		return 0, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	tr := a.traceLocked(observer)
	if len(tr.logProbs) != len(tr.rewards) {
		return 0, fmt.Errorf("%w: observer %d asked for an action before reporting the reward for its last one", ErrOrder, observer)
	}
	logp := a.mu.policy.LogProbs(autograd.Const(tensor.FromFloat32(x, 1, ObsSize)))
	action := sample(a.mu.rng, logp.Value())
	// The loss picks log π(aₜ|sₜ) out of the row: one Cat and one Mul
	// over the episode instead of a Select per step.
	tr.logProbs = append(tr.logProbs, logp)
	tr.actions = append(tr.actions, action)
	return action, nil
}

// putObs checks that obs is ObsSize finite numbers and writes them into
// dst (ObsSize long) as float32.
func putObs(dst []float32, observer int, obs []float64) error {
	if len(obs) != ObsSize {
		return fmt.Errorf("%w from observer %d: %d numbers, want %d", ErrObservation, observer, len(obs), ObsSize)
	}
	for i, v := range obs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w from observer %d: %v", ErrObservation, observer, obs)
		}
		dst[i] = float32(v)
	}
	return nil
}

// sample draws an action from the distribution whose log-probabilities are
// the 1×NumActions logp, by inverting its cumulative distribution at one
// uniform number.
func sample(rng *tensor.RNG, logp *tensor.Tensor) int { return sampleRow(rng, logp, 0) }

// sampleRow is sample for row row of the n×NumActions logp.
func sampleRow(rng *tensor.RNG, logp *tensor.Tensor, row int) int {
	u := rng.Float64()
	n := logp.Size(1)
	c := 0.0
	for i := range n - 1 {
		c += math.Exp(logp.At(row, i))
		if u < c {
			return i
		}
	}
	return n - 1
}

func (a *Agent) traceLocked(observer int) *trace {
	tr := a.mu.traces[observer]
	if tr == nil {
		tr = &trace{}
		a.mu.traces[observer] = tr
	}
	return tr
}

// ReportReward records the reward that followed observer's last action. It
// fails with ErrOrder if that action's reward was already reported (or
// there is no action).
func (a *Agent) ReportReward(observer int, reward float64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	tr := a.mu.traces[observer]
	if tr == nil || len(tr.rewards) >= len(tr.logProbs) {
		return fmt.Errorf("%w: observer %d reported a reward with no action awaiting one", ErrOrder, observer)
	}
	tr.rewards = append(tr.rewards, reward)
	return nil
}

// FinishEpisode ends the episode of every observer that took part in it:
// it updates the running reward with the smallest observer's total reward,
// as the tutorial, and takes one Adam step on the REINFORCE loss
//
//	-Σₜ log π(aₜ|sₜ) · Ĝₜ
//
// where Gₜ = rₜ + γ·Gₜ₊₁ is the discounted return within the observer's
// own episode and Ĝ is G normalised over all the episode's steps by their
// mean and standard deviation (Bessel-corrected, as torch.std) plus
// Float32Eps. (The tutorial discounts over the observers' rewards laid end
// to end, so one observer's last returns borrow from the next observer's
// rewards; here each observer's returns stop at its own episode's end.)
// With one step in all, the standard deviation is taken as 0.
//
// It fails with ErrNoSteps if no observer took a step, and with ErrOrder
// if an observer has an action whose reward it has not reported; either
// way the episode's records are dropped and neither the policy nor the
// running reward changes.
func (a *Agent) FinishEpisode() (Episode, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	traces := a.mu.traces
	a.mu.traces = map[int]*trace{}

	ids := make([]int, 0, len(traces))
	for id := range traces {
		ids = append(ids, id)
	}
	slices.Sort(ids)

	var logProbs []*autograd.Var
	var actions []int
	var returns []float64
	minReward := math.Inf(1)
	for _, id := range ids {
		tr := traces[id]
		if len(tr.rewards) != len(tr.logProbs) {
			return Episode{}, fmt.Errorf("%w: observer %d finished the episode with %d actions but %d rewards",
				ErrOrder, id, len(tr.logProbs), len(tr.rewards))
		}
		total := 0.0
		for _, r := range tr.rewards {
			total += r
		}
		minReward = min(minReward, total)
		logProbs = append(logProbs, tr.logProbs...)
		actions = append(actions, tr.actions...)
		returns = append(returns, Returns(tr.rewards, a.opt.Gamma)...)
	}
	if len(logProbs) == 0 {
		return Episode{}, fmt.Errorf("%w: no observer selected an action since the last FinishEpisode", ErrNoSteps)
	}

	// loss = -Σₜ Σₐ [a = aₜ]·Ĝₜ·log π(a|sₜ)
	Normalize(returns, Float32Eps)
	g := make([]float32, len(returns)*NumActions)
	for t, r := range returns {
		g[t*NumActions+actions[t]] = float32(r)
	}
	lp := autograd.Cat(0, logProbs...)
	loss := autograd.Neg(autograd.SumAll(autograd.Mul(lp, autograd.Const(tensor.FromFloat32(g, len(returns), NumActions)))))
	a.mu.optim.ZeroGrad(true)
	if err := loss.Backward(nil); err != nil {
		return Episode{}, fmt.Errorf("reinforce: backward of the policy loss: %w", err)
	}
	a.mu.optim.Step()

	a.mu.running = 0.05*minReward + 0.95*a.mu.running
	return Episode{
		Reward:    minReward,
		Running:   a.mu.running,
		Observers: len(ids),
		Steps:     len(returns),
		Loss:      loss.Value().Item(),
	}, nil
}

// Returns returns the discounted returns of one episode's rewards:
// G[t] = rewards[t] + gamma·G[t+1], with G after the last step 0.
func Returns(rewards []float64, gamma float64) []float64 {
	g := make([]float64, len(rewards))
	r := 0.0
	for t := len(rewards) - 1; t >= 0; t-- {
		r = rewards[t] + gamma*r
		g[t] = r
	}
	return g
}

// Normalize rescales xs in place to (x - mean) / (std + eps), where std is
// the Bessel-corrected standard deviation (torch.Tensor.std's default),
// taken as 0 for fewer than two numbers.
func Normalize(xs []float64, eps float64) {
	n := float64(len(xs))
	if n == 0 {
		return
	}
	mean := 0.0
	for _, x := range xs {
		mean += x
	}
	mean /= n
	std := 0.0
	if len(xs) > 1 {
		ss := 0.0
		for _, x := range xs {
			ss += (x - mean) * (x - mean)
		}
		std = math.Sqrt(ss / (n - 1))
	}
	for i := range xs {
		xs[i] = (xs[i] - mean) / (std + eps)
	}
}
