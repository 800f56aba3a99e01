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

func TestReturns(t *testing.T) {
	// G2 = 1, G1 = 2 + 0.5·1 = 2.5, G0 = 1 + 0.5·2.5 = 2.25
	got := Returns([]float64{1, 2, 1}, 0.5)
	if want := []float64{2.25, 2.5, 1}; !slices.Equal(got, want) {
		t.Errorf("Returns = %v, want %v", got, want)
	}
	if got := Returns(nil, 0.99); len(got) != 0 {
		t.Errorf("Returns(nil) = %v", got)
	}
	// 500 rewards of 1: G0 = (1 - 0.99^500) / 0.01.
	g := Returns(slices.Repeat([]float64{1}, 500), 0.99)
	if want := (1 - math.Pow(0.99, 500)) / 0.01; math.Abs(g[0]-want) > 1e-9 {
		t.Errorf("G0 of 500 ones = %v, want %v", g[0], want)
	}
}

func TestNormalize(t *testing.T) {
	// mean 2.5, Bessel std √(5/3)
	xs := []float64{1, 2, 3, 4}
	Normalize(xs, 0)
	s := math.Sqrt(5.0 / 3)
	for i, want := range []float64{-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s} {
		if math.Abs(xs[i]-want) > 1e-15 {
			t.Fatalf("Normalize = %v", xs)
		}
	}
	one := []float64{7}
	Normalize(one, Float32Eps)
	if one[0] != 0 {
		t.Errorf("Normalize of one number = %v, want 0", one[0])
	}
	same := []float64{3, 3, 3}
	Normalize(same, Float32Eps)
	if !slices.Equal(same, []float64{0, 0, 0}) {
		t.Errorf("Normalize of equal numbers = %v", same)
	}
	Normalize(nil, Float32Eps)
	if Float32Eps != float64(math.Nextafter32(1, 2)-1) {
		t.Errorf("Float32Eps = %v", Float32Eps)
	}
}

func TestPolicy(t *testing.T) {
	p := NewPolicy(tensor.NewRNG(1))
	var names []string
	for _, np := range nn.NamedParameters(p) {
		names = append(names, np.Name)
	}
	if want := []string{"affine1.weight", "affine1.bias", "affine2.weight", "affine2.bias"}; !slices.Equal(names, want) {
		t.Errorf("parameters %v, want %v", names, want)
	}
	if n := nn.NumParameters(p); n != 4*128+128+128*2+2 {
		t.Errorf("%d parameters", n)
	}
	x := autograd.Const(tensor.FromFloat32([]float32{0.01, -0.02, 0.03, 0.04, 1, 2, -1, 0.5, 0, 0, 0, 0}, 3, ObsSize))
	nn.Eval(p)
	probs, logp := p.Forward(x).Value(), p.LogProbs(x).Value()
	if s := probs.Shape(); !slices.Equal(s, []int{3, NumActions}) {
		t.Fatalf("Forward shape %v", s)
	}
	for i := range 3 {
		sum := 0.0
		for a := range NumActions {
			pr := probs.At(i, a)
			sum += pr
			if math.Abs(math.Log(pr)-logp.At(i, a)) > 1e-6 {
				t.Errorf("row %d action %d: log(Forward) %v, LogProbs %v", i, a, math.Log(pr), logp.At(i, a))
			}
		}
		if math.Abs(sum-1) > 1e-6 {
			t.Errorf("row %d: probabilities sum to %v", i, sum)
		}
	}
	// Training mode drops units: the same input gives different outputs.
	nn.Train(p)
	a, b := p.Forward(x).Value(), p.Forward(x).Value()
	if tensor.Equal(a, b) {
		t.Error("two forward passes in training mode agree: is dropout on?")
	}
}

func TestSample(t *testing.T) {
	rng := tensor.NewRNG(3)
	logp := tensor.FromFloat64([]float64{math.Log(0.3), math.Log(0.7)}, 1, 2)
	const n = 20000
	zeros := 0
	for range n {
		if sample(rng, logp) == 0 {
			zeros++
		}
	}
	// Standard error √(0.3·0.7/n) ≈ 0.0032.
	if f := float64(zeros) / n; math.Abs(f-0.3) > 0.015 {
		t.Errorf("action 0 drawn with frequency %v, want 0.3", f)
	}
	sure := tensor.FromFloat64([]float64{0, math.Inf(-1)}, 1, 2)
	for range 100 {
		if sample(rng, sure) != 0 {
			t.Fatal("drew an action of probability 0")
		}
	}
}

// script has an observer take steps with the given rewards.
func script(t *testing.T, a *Agent, observer int, rewards ...float64) {
	t.Helper()
	obs := []float64{0.01, 0.02, -0.03, 0.04}
	for _, r := range rewards {
		if _, err := a.SelectAction(observer, obs); err != nil {
			t.Fatal(err)
		}
		if err := a.ReportReward(observer, r); err != nil {
			t.Fatal(err)
		}
		obs[2] += 0.01
	}
}

// TestFinishEpisode checks the loss and the running reward against a
// computation from the recorded log-probabilities: returns per observer,
// normalised together, observers in id order.
func TestFinishEpisode(t *testing.T) {
	a := NewAgent(Options{Seed: 5})
	running := 0.0
	for ep, rewards := range [][2][]float64{
		{{1, 1, 1}, {1, 1}},
		{{1, 1, 1, 1, 1}, {1, 1, 1, 1}},
	} {
		script(t, a, 9, rewards[1]...) // the higher id first: order of arrival must not matter
		script(t, a, 2, rewards[0]...)

		var want float64
		{
			a.mu.Lock()
			var logp []float64
			for _, id := range []int{2, 9} {
				tr := a.mu.traces[id]
				for i, v := range tr.logProbs {
					logp = append(logp, v.Value().At(0, tr.actions[i]))
				}
			}
			a.mu.Unlock()
			g := append(Returns(rewards[0], 0.99), Returns(rewards[1], 0.99)...)
			Normalize(g, Float32Eps)
			for i := range g {
				want -= logp[i] * g[i]
			}
		}
		before := a.Policy().Affine2.Weight.Value().Clone()

		e, err := a.FinishEpisode()
		if err != nil {
			t.Fatal(err)
		}
		minR := float64(min(len(rewards[0]), len(rewards[1])))
		running = 0.05*minR + 0.95*running
		if e.Reward != minR || e.Running != running || a.RunningReward() != running ||
			e.Observers != 2 || e.Steps != len(rewards[0])+len(rewards[1]) {
			t.Errorf("episode %d: %+v, want reward %v running %v", ep, e, minR, running)
		}
		if math.Abs(e.Loss-want) > 1e-5 {
			t.Errorf("episode %d: loss %v, want %v", ep, e.Loss, want)
		}
		if tensor.Equal(before, a.Policy().Affine2.Weight.Value()) {
			t.Errorf("episode %d: the update left affine2.weight as it was", ep)
		}
	}
	if a.Solved() {
		t.Error("solved after two short episodes")
	}
}

func TestAgentErrors(t *testing.T) {
	a := NewAgent(Options{Seed: 1})
	obs := []float64{0, 0, 0, 0}
	if _, err := a.SelectAction(1, obs[:3]); !errors.Is(err, ErrObservation) {
		t.Errorf("3 numbers: %v", err)
	}
	if _, err := a.SelectAction(1, []float64{0, math.NaN(), 0, 0}); !errors.Is(err, ErrObservation) {
		t.Errorf("NaN: %v", err)
	}
	if err := a.ReportReward(1, 1); !errors.Is(err, ErrOrder) {
		t.Errorf("reward before any action: %v", err)
	}
	if _, err := a.FinishEpisode(); !errors.Is(err, ErrNoSteps) {
		t.Errorf("finish with no steps: %v", err)
	}
	if _, err := a.SelectAction(1, obs); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SelectAction(1, obs); !errors.Is(err, ErrOrder) {
		t.Errorf("two actions without a reward: %v", err)
	}
	if err := a.ReportReward(1, 1); err != nil {
		t.Fatal(err)
	}
	if err := a.ReportReward(1, 1); !errors.Is(err, ErrOrder) {
		t.Errorf("two rewards for one action: %v", err)
	}
	script(t, a, 2, 1, 1)
	if _, err := a.SelectAction(2, obs); err != nil {
		t.Fatal(err)
	}
	// Observer 2 owes a reward: the episode is dropped whole.
	before := a.Policy().Affine1.Weight.Value().Clone()
	if _, err := a.FinishEpisode(); !errors.Is(err, ErrOrder) {
		t.Errorf("finish with a reward owed: %v", err)
	}
	if !tensor.Equal(before, a.Policy().Affine1.Weight.Value()) || a.RunningReward() != 0 {
		t.Error("a failed FinishEpisode changed the policy or the running reward")
	}
	if _, err := a.FinishEpisode(); !errors.Is(err, ErrNoSteps) {
		t.Errorf("after a dropped episode: %v", err)
	}
}

// fakeActor answers with a fixed action and records what it was told.
type fakeActor struct {
	action  int
	err     error
	calls   int
	rewards []float64
}

func (f *fakeActor) SelectAction(observer int, obs []float64) (int, error) {
	f.calls++
	return f.action, f.err
}

func (f *fakeActor) ReportReward(observer int, r float64) error {
	f.rewards = append(f.rewards, r)
	return nil
}

func TestObserver(t *testing.T) {
	o := NewObserver(4, 1)
	if o.ID() != 4 {
		t.Errorf("ID %d", o.ID())
	}
	f := &fakeActor{action: cartpole.Right}
	total, err := o.RunEpisode(f, 5000)
	if err != nil {
		t.Fatal(err)
	}
	// Always pushing right tips the pole over in a few dozen steps.
	if total < 5 || total > 60 || f.calls != int(total) || len(f.rewards) != f.calls || !o.env.Done() {
		t.Errorf("episode of %v reward, %d calls, %d rewards, done %v", total, f.calls, len(f.rewards), o.env.Done())
	}
	// maxSteps cuts an episode short; the next one starts afresh.
	f = &fakeActor{action: cartpole.Left}
	if total, err := o.RunEpisode(f, 3); err != nil || total != 3 || f.calls != 3 {
		t.Errorf("3-step episode: reward %v, %d calls, %v", total, f.calls, err)
	}
	if _, err := o.RunEpisode(f, 10); err != nil {
		t.Errorf("episode after a cut one: %v", err)
	}
	boom := errors.New("boom")
	if _, err := o.RunEpisode(&fakeActor{err: boom}, 10); !errors.Is(err, boom) {
		t.Errorf("actor error: %v", err)
	}
	if _, err := o.RunEpisode(&fakeActor{action: 7}, 10); err == nil {
		t.Error("action 7 accepted")
	}
}

// TestConcurrentObservers runs two observers on goroutines against one
// agent, as the RPC example's handlers do.
func TestConcurrentObservers(t *testing.T) {
	a := NewAgent(Options{Seed: 2})
	for range 2 {
		var wg sync.WaitGroup
		totals := make([]float64, 2)
		for i := range 2 {
			o := NewObserver(i, uint64(i))
			wg.Go(func() {
				r, err := o.RunEpisode(a, 2500)
				if err != nil {
					t.Error(err)
				}
				totals[i] = r
			})
		}
		wg.Wait()
		e, err := a.FinishEpisode()
		if err != nil {
			t.Fatal(err)
		}
		if e.Observers != 2 || e.Steps != int(totals[0]+totals[1]) || e.Reward != min(totals[0], totals[1]) {
			t.Errorf("%+v after episodes of %v", e, totals)
		}
	}
}

func TestDeterministic(t *testing.T) {
	run := func() []Episode {
		a := NewAgent(Options{Seed: 11})
		obs := []*Observer{NewObserver(1, 1), NewObserver(2, 2)}
		var eps []Episode
		for range 5 {
			for _, o := range obs {
				if _, err := o.RunEpisode(a, 2500); err != nil {
					t.Fatal(err)
				}
			}
			e, err := a.FinishEpisode()
			if err != nil {
				t.Fatal(err)
			}
			eps = append(eps, e)
		}
		return eps
	}
	if a, b := run(), run(); !slices.Equal(a, b) {
		t.Errorf("same seeds, different runs:\n%v\n%v", a, b)
	}
}
