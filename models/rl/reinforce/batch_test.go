package reinforce

import (
	"errors"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/models/rl/cartpole"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

func TestRunSteps(t *testing.T) {
	o := NewObserver(3, 1)
	f := &fakeActor{action: cartpole.Right}
	s, err := o.RunSteps(f, 200, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	// Always pushing right ends an episode every few dozen steps: the
	// round spans several, each discounted on its own.
	if f.calls != 200 || len(s.Returns) != 200 || s.Episodes < 3 || len(f.rewards) != 0 {
		t.Fatalf("%d calls, %d returns, %d episodes, %d rewards reported", f.calls, len(s.Returns), s.Episodes, len(f.rewards))
	}
	first := int(s.Reward)
	if first < 5 || first > 60 {
		t.Fatalf("first episode of %d steps", first)
	}
	// With gamma 0.5 and rewards of 1, an episode's last return is 1 and
	// the one before 1.5; the step after starts a new episode.
	if s.Returns[first-1] != 1 || s.Returns[first-2] != 1.5 || s.Returns[first] <= 1.5 {
		t.Errorf("returns around the first episode's end: %v", s.Returns[first-2:first+1])
	}
	// An episode cut by the round is discounted as if it ended there.
	if s.Returns[199] != 1 {
		t.Errorf("last return %v, want 1", s.Returns[199])
	}
	// No episode ends: the reward is the number of steps.
	s, err = o.RunSteps(&fakeActor{action: cartpole.Left}, 4, 0.99)
	if err != nil || s.Reward != 4 || s.Episodes != 0 || len(s.Returns) != 4 {
		t.Errorf("4 steps: %+v, %v", s, err)
	}
	boom := errors.New("boom")
	if _, err := o.RunSteps(&fakeActor{err: boom}, 10, 0.99); !errors.Is(err, boom) {
		t.Errorf("selector error: %v", err)
	}
	if _, err := o.RunSteps(&fakeActor{action: 5}, 10, 0.99); err == nil {
		t.Error("action 5 accepted")
	}
}

// TestSelectActions checks that one forward pass over a batch gives each
// row the probabilities a forward pass of that row alone gives (dropout
// off), and that the actions follow them.
func TestSelectActions(t *testing.T) {
	a := NewBatchAgent(Options{Seed: 3})
	nn.Eval(a.Policy())
	obs := [][]float64{{0.01, 0.02, -0.03, 0.04}, {1, -1, 0.2, 0.5}, {0, 0, 0, 0}}
	ids := []int{7, 2, 5}
	actions, err := a.SelectActions(ids, obs)
	if err != nil {
		t.Fatal(err)
	}
	if len(actions) != 3 {
		t.Fatalf("%d actions", len(actions))
	}
	p := a.mu.passes[0]
	if !slices.Equal(p.observers, ids) || !slices.Equal(p.actions, actions) {
		t.Errorf("recorded %v %v, want %v %v", p.observers, p.actions, ids, actions)
	}
	for i, o := range obs {
		x := make([]float32, ObsSize)
		for j, v := range o {
			x[j] = float32(v)
		}
		one := a.Policy().LogProbs(autograd.Const(tensor.FromFloat32(x, 1, ObsSize))).Value()
		for k := range NumActions {
			if math.Abs(one.At(0, k)-p.logp.Value().At(i, k)) > 1e-6 {
				t.Errorf("row %d: batched log π %v, alone %v", i, p.logp.Value().At(i, k), one.At(0, k))
			}
		}
		if !cartpole.ValidAction(actions[i]) {
			t.Errorf("action %d", actions[i])
		}
	}
	// A heavily skewed policy: the sampled actions follow it.
	counts := [NumActions]int{}
	for range 200 {
		acts, err := a.SelectActions([]int{1, 2}, [][]float64{obs[1], obs[1]})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range acts {
			counts[x]++
		}
	}
	pr := math.Exp(p.logp.Value().At(1, 0))
	if got := float64(counts[0]) / 400; math.Abs(got-pr) > 0.1 {
		t.Errorf("action 0 drawn %.2f of the time, probability %.2f", got, pr)
	}
}

func TestBatchAgentErrors(t *testing.T) {
	a := NewBatchAgent(Options{Seed: 1})
	obs := []float64{0, 0, 0, 0}
	if _, err := a.SelectActions([]int{1, 2}, [][]float64{obs}); !errors.Is(err, ErrObservation) {
		t.Errorf("lengths differ: %v", err)
	}
	if _, err := a.SelectActions([]int{1, 2}, [][]float64{obs, {0, math.Inf(1), 0, 0}}); !errors.Is(err, ErrObservation) {
		t.Errorf("Inf: %v", err)
	}
	if _, err := a.SelectActions([]int{1, 1}, [][]float64{obs, obs}); !errors.Is(err, ErrOrder) {
		t.Errorf("one observer twice: %v", err)
	}
	if _, err := a.Finish(nil); !errors.Is(err, ErrNoSteps) {
		t.Errorf("finish with no steps (the failed calls recorded none): %v", err)
	}
	before := a.Policy().Affine1.Weight.Value().Clone()
	for _, steps := range []map[int]Steps{
		{1: {Returns: []float64{1}}},                                                         // observer 2 missing
		{1: {Returns: []float64{1}}, 2: {Returns: []float64{1, 1}}},                          // too many returns
		{1: {Returns: []float64{1}}, 2: {Returns: []float64{1}}, 3: {Returns: []float64{1}}}, // 3 took no action
	} {
		if _, err := a.SelectActions([]int{1, 2}, [][]float64{obs, obs}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Finish(steps); !errors.Is(err, ErrOrder) {
			t.Errorf("Finish(%v): %v", steps, err)
		}
	}
	if !tensor.Equal(before, a.Policy().Affine1.Weight.Value()) || a.RunningReward() != 0 {
		t.Error("a failed Finish changed the policy or the running reward")
	}
}

// TestBatchFinish checks Finish's loss against one computed from the
// recorded log-probabilities, with one pass batched and one not.
func TestBatchFinish(t *testing.T) {
	a := NewBatchAgent(Options{Seed: 4})
	obs := []float64{0.01, 0.02, -0.03, 0.04}
	if _, err := a.SelectActions([]int{2, 1}, [][]float64{obs, obs}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SelectAction(1, obs); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SelectAction(2, obs); err != nil {
		t.Fatal(err)
	}
	steps := map[int]Steps{1: {Returns: []float64{3, 2}, Reward: 10}, 2: {Returns: []float64{5, 0.5}, Reward: 20}}
	lp := func(pass, row int) float64 {
		p := a.mu.passes[pass]
		return p.logp.Value().At(row, p.actions[row])
	}
	// Observer 2: rows (0,0), (2,0); observer 1: rows (0,1), (1,0).
	want := -(5*lp(0, 0) + 3*lp(0, 1) + 2*lp(1, 0) + 0.5*lp(2, 0)) / 2
	before := a.Policy().Affine2.Weight.Value().Clone()
	e, err := a.Finish(steps)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(e.Loss-want) > 1e-5 {
		t.Errorf("loss %v, want %v", e.Loss, want)
	}
	if e.Reward != 15 || e.Running != 7.5 || a.RunningReward() != 7.5 || e.Observers != 2 || e.Steps != 4 {
		t.Errorf("%+v", e)
	}
	if tensor.Equal(before, a.Policy().Affine2.Weight.Value()) {
		t.Error("the update left affine2.weight as it was")
	}
	if a.Solved() {
		t.Error("solved at 7.5")
	}
}

// TestBatchRounds runs observers on goroutines, batching their requests
// as the RPC example does, and unbatched: both take the same steps, and
// training changes the running reward.
func TestBatchRounds(t *testing.T) {
	for _, batched := range []bool{false, true} {
		a := NewBatchAgent(Options{Seed: 6})
		const n, steps = 3, 50
		var s Selector = a
		if batched {
			s = newLockstep(a, n)
		}
		for round := range 3 {
			res := make(map[int]Steps)
			var mu sync.Mutex
			var wg sync.WaitGroup
			for id := range n {
				o := NewObserver(id, uint64(id))
				wg.Go(func() {
					st, err := o.RunSteps(s, steps, 0.99)
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					res[id] = st
					mu.Unlock()
				})
			}
			wg.Wait()
			e, err := a.Finish(res)
			if err != nil {
				t.Fatal(err)
			}
			if e.Steps != n*steps || e.Observers != n {
				t.Errorf("batched %v round %d: %+v", batched, round, e)
			}
		}
		if batched {
			// Each forward pass served every observer.
			if calls := s.(*lockstep).passes; calls != 3*steps {
				t.Errorf("%d batched forward passes, want %d", calls, 3*steps)
			}
		}
		if a.RunningReward() == 0 {
			t.Errorf("batched %v: running reward still 0", batched)
		}
	}
}

// lockstep gathers n observers' requests and answers them with one
// SelectActions, as the RPC example's batcher (with channels in place of
// futures).
type lockstep struct {
	a       *BatchAgent
	n       int
	mu      sync.Mutex
	ids     []int
	obs     [][]float64
	replies []chan int
	passes  int
}

func newLockstep(a *BatchAgent, n int) *lockstep { return &lockstep{a: a, n: n} }

func (l *lockstep) SelectAction(observer int, obs []float64) (int, error) {
	reply := make(chan int, 1)
	l.mu.Lock()
	l.ids = append(l.ids, observer)
	l.obs = append(l.obs, slices.Clone(obs))
	l.replies = append(l.replies, reply)
	if len(l.ids) == l.n {
		actions, err := l.a.SelectActions(l.ids, l.obs)
		if err != nil {
			l.mu.Unlock()
			return 0, err
		}
		for i, r := range l.replies {
			r <- actions[i]
		}
		l.ids, l.obs, l.replies = nil, nil, nil
		l.passes++
	}
	l.mu.Unlock()
	return <-reply, nil
}
