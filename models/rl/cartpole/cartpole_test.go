package cartpole

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

// ref is testdata/ref.json, written by testdata/make_ref.py.
type ref struct {
	Constants struct {
		Gravity         float64 `json:"gravity"`
		MassCart        float64 `json:"masscart"`
		MassPole        float64 `json:"masspole"`
		Length          float64 `json:"length"`
		ForceMag        float64 `json:"force_mag"`
		Tau             float64 `json:"tau"`
		ThetaThreshold  float64 `json:"theta_threshold_radians"`
		XThreshold      float64 `json:"x_threshold"`
		MaxEpisodeSteps int     `json:"max_episode_steps"`
	} `json:"constants"`
	Trajectories []struct {
		Name       string    `json:"name"`
		Initial    Obs       `json:"initial"`
		Actions    []int     `json:"actions"`
		States     []Obs     `json:"states"`
		Rewards    []float64 `json:"rewards"`
		Terminated []bool    `json:"terminated"`
		Truncated  []bool    `json:"truncated"`
	} `json:"trajectories"`
}

func loadRef(t *testing.T) ref {
	t.Helper()
	b, err := os.ReadFile("testdata/ref.json")
	if err != nil {
		t.Fatal(err)
	}
	var r ref
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Trajectories) == 0 {
		t.Fatal("testdata/ref.json has no trajectories")
	}
	return r
}

// tol is how far a Go state may be from the Python one. The arithmetic is
// the same; only math.Sin and math.Cos may differ from the C library's in
// the last place.
const tol = 1e-12

// startAt returns an environment in the middle of an episode at state s,
// after steps steps.
func startAt(s Obs, steps int) *Env {
	e := New(0)
	e.state, e.steps, e.reset = s, steps, true
	return e
}

func near(a, b Obs) bool {
	for i := range a {
		if math.Abs(a[i]-b[i]) > tol {
			return false
		}
	}
	return true
}

func TestConstantsMatchReference(t *testing.T) {
	c := loadRef(t).Constants
	for _, k := range []struct {
		name      string
		got, want float64
	}{
		{"gravity", Gravity, c.Gravity},
		{"masscart", MassCart, c.MassCart},
		{"masspole", MassPole, c.MassPole},
		{"length", Length, c.Length},
		{"force_mag", ForceMag, c.ForceMag},
		{"tau", Tau, c.Tau},
		{"theta_threshold_radians", ThetaThreshold, c.ThetaThreshold},
		{"x_threshold", XThreshold, c.XThreshold},
		{"max_episode_steps", MaxEpisodeSteps, float64(c.MaxEpisodeSteps)},
	} {
		if k.got != k.want {
			t.Errorf("%s = %.17g, reference %.17g", k.name, k.got, k.want)
		}
	}
	twelve, pi := 12.0, math.Pi // evaluated in float64, as gym does
	if got := twelve * 2 * pi / 360; ThetaThreshold != got {
		t.Errorf("ThetaThreshold = %.17g, 12*2*pi/360 in float64 = %.17g", ThetaThreshold, got)
	}
}

// TestStepsMatchReference checks every reference transition on its own,
// from the reference's state before it.
func TestStepsMatchReference(t *testing.T) {
	inexact, worst := 0, 0.0
	for _, tr := range loadRef(t).Trajectories {
		prev := tr.Initial
		for i, a := range tr.Actions {
			e := startAt(prev, i)
			obs, r, term, trunc := e.Step(a)
			want := tr.States[i]
			if !near(obs, want) {
				t.Fatalf("%s step %d (action %d) from %v: got %v, reference %v", tr.Name, i+1, a, prev, obs, want)
			}
			if obs != want {
				inexact++
				for k := range obs {
					worst = max(worst, math.Abs(obs[k]-want[k]))
				}
			}
			if r != tr.Rewards[i] || term != tr.Terminated[i] || trunc != tr.Truncated[i] {
				t.Fatalf("%s step %d: reward %v terminated %v truncated %v, reference %v %v %v",
					tr.Name, i+1, r, term, trunc, tr.Rewards[i], tr.Terminated[i], tr.Truncated[i])
			}
			if e.Done() != (term || trunc) {
				t.Fatalf("%s step %d: Done() = %v after terminated %v truncated %v", tr.Name, i+1, e.Done(), term, trunc)
			}
			prev = want
		}
	}
	t.Logf("%d transitions not bit-identical to Python's; largest difference %g", inexact, worst)
}

// TestTrajectoriesMatchReference replays each reference trajectory's
// actions from its initial state for up to replaySteps steps. The upright
// pole is unstable (errors grow about e^4 per simulated second), so the
// last-place differences of math.Sin and math.Cos from the C library's grow
// past tol after some 150 steps of the 500-step one; its later steps are
// checked one by one in TestStepsMatchReference.
func TestTrajectoriesMatchReference(t *testing.T) {
	const replaySteps = 100
	for _, tr := range loadRef(t).Trajectories {
		e := startAt(tr.Initial, 0)
		for i, a := range tr.Actions[:min(len(tr.Actions), replaySteps)] {
			obs, _, term, trunc := e.Step(a)
			if !near(obs, tr.States[i]) {
				t.Fatalf("%s: replay drifts at step %d: %v, reference %v", tr.Name, i+1, obs, tr.States[i])
			}
			if term != tr.Terminated[i] || trunc != tr.Truncated[i] {
				t.Fatalf("%s step %d: terminated %v truncated %v, reference %v %v", tr.Name, i+1, term, trunc, tr.Terminated[i], tr.Truncated[i])
			}
		}
	}
}

// The hand checks below do not need the reference file.

func TestOneStepByHand(t *testing.T) {
	// From rest with the pole upright, sin θ = 0 and cos θ = 1:
	//   temp = ±10/1.1
	//   θ̈ = -temp / (0.5·(4/3 - 0.1/1.1))
	//   ẍ = temp - 0.05·θ̈/1.1
	// and the Euler step moves only the velocities.
	for _, a := range []int{Left, Right} {
		f := -10.0
		if a == Right {
			f = 10
		}
		temp := f / 1.1
		thetaAcc := -temp / (0.5 * (4.0/3.0 - 0.1/1.1))
		xAcc := temp - 0.05*thetaAcc/1.1
		want := Obs{0, 0.02 * xAcc, 0, 0.02 * thetaAcc}
		obs, r, term, trunc := startAt(Obs{}, 0).Step(a)
		if !near(obs, want) || r != 1 || term || trunc {
			t.Errorf("action %d from rest: %v %v %v %v, want %v 1 false false", a, obs, r, term, trunc, want)
		}
		if (a == Right) != (obs[1] > 0) || (a == Right) != (obs[3] < 0) {
			t.Errorf("action %d pushes the cart to %v and the pole to %v", a, obs[1], obs[3])
		}
	}
}

func TestThresholds(t *testing.T) {
	for _, c := range []struct {
		s    Obs
		term bool
	}{
		{Obs{XThreshold, 0, 0, 0}, false},
		{Obs{up(XThreshold), 0, 0, 0}, true},
		{Obs{-XThreshold, 0, 0, 0}, false},
		{Obs{-up(XThreshold), 0, 0, 0}, true},
		{Obs{0, 0, ThetaThreshold, 0}, false},
		{Obs{0, 0, up(ThetaThreshold), 0}, true},
		{Obs{0, 0, -ThetaThreshold, 0}, false},
		{Obs{0, 0, -up(ThetaThreshold), 0}, true},
	} {
		// With zero velocities the first step leaves x and θ where they are.
		for _, a := range []int{Left, Right} {
			obs, r, term, _ := startAt(c.s, 0).Step(a)
			if obs[0] != c.s[0] || obs[2] != c.s[2] {
				t.Fatalf("from %v: x, θ moved to %v, %v", c.s, obs[0], obs[2])
			}
			if term != c.term || r != 1 {
				t.Errorf("from %v action %d: terminated %v reward %v, want %v 1", c.s, a, term, r, c.term)
			}
		}
	}
}

// balance is a linear controller that keeps the pole up for 500 steps.
func balance(o Obs) int {
	if o[2]+0.5*o[3]+0.05*o[0]+0.1*o[1] > 0 {
		return Right
	}
	return Left
}

func TestTimeLimit(t *testing.T) {
	e := New(7)
	for ep := range 3 {
		obs := e.Reset()
		total := 0.0
		for {
			var r float64
			var term, trunc bool
			obs, r, term, trunc = e.Step(balance(obs))
			total += r
			if term {
				t.Fatalf("episode %d: pole fell at step %d", ep, e.Steps())
			}
			if trunc {
				break
			}
		}
		if e.Steps() != MaxEpisodeSteps || total != MaxEpisodeSteps || !e.Done() {
			t.Fatalf("episode %d: truncated after %d steps with reward %v (Done %v), want %d",
				ep, e.Steps(), total, e.Done(), MaxEpisodeSteps)
		}
	}
	// Step 500 may both terminate and truncate.
	_, _, term, trunc := startAt(Obs{up(XThreshold), 0, 0, 0}, MaxEpisodeSteps-1).Step(Right)
	if !term || !trunc {
		t.Errorf("step %d outside the track: terminated %v truncated %v, want both", MaxEpisodeSteps, term, trunc)
	}
}

func up(v float64) float64 { return math.Nextafter(v, math.Inf(1)) }

func TestReset(t *testing.T) {
	a, b, c := New(1), New(1), New(2)
	const n = 20000
	var sum, sumSq [4]float64
	differ := false
	for range n {
		sa, sb, sc := a.Reset(), b.Reset(), c.Reset()
		if sa != sb {
			t.Fatalf("two environments seeded 1 reset to %v and %v", sa, sb)
		}
		if sa != sc {
			differ = true
		}
		if a.State() != sa || a.Steps() != 0 || a.Done() {
			t.Fatalf("after Reset: State %v Steps %d Done %v", a.State(), a.Steps(), a.Done())
		}
		for i, v := range sa {
			if v < -ResetBound || v >= ResetBound {
				t.Fatalf("reset state %v outside [-%v, %v)", sa, ResetBound, ResetBound)
			}
			sum[i] += v
			sumSq[i] += v * v
		}
	}
	if !differ {
		t.Error("seeds 1 and 2 give the same resets")
	}
	// Uniform on [-0.05, 0.05): mean 0, variance 0.1²/12. With 20000
	// draws the sample mean's standard error is about 2e-4.
	for i := range sum {
		mean, variance := sum[i]/n, sumSq[i]/n
		if math.Abs(mean) > 1.5e-3 || math.Abs(variance-0.01/12)/(0.01/12) > 0.05 {
			t.Errorf("state variable %d: mean %v variance %v, want 0 and %v", i, mean, variance, 0.01/12)
		}
	}
}

func TestStepMisuse(t *testing.T) {
	mustPanic := func(name, want string, f func()) {
		t.Helper()
		defer func() {
			r := recover()
			if s, _ := r.(string); !strings.Contains(s, want) {
				t.Errorf("%s: panic %v, want one mentioning %q", name, r, want)
			}
		}()
		f()
	}
	mustPanic("before Reset", "before Reset", func() { New(1).Step(Left) })
	e := New(1)
	e.Reset()
	mustPanic("bad action", "action 2", func() { e.Step(2) })
	mustPanic("negative action", "action -1", func() { e.Step(-1) })
	for !e.Done() {
		e.Step(Right)
	}
	mustPanic("after the end", "call Reset", func() { e.Step(Left) })
	e.Reset()
	if _, _, term, _ := e.Step(Left); term {
		t.Error("the first step after Reset terminated")
	}
	if ValidAction(2) || !ValidAction(Left) || !ValidAction(Right) {
		t.Error("ValidAction")
	}
}
