package optim_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

// scalerCase is one parameter w = [1, 2] under SGD lr 1, whose gradient
// each step is set by hand.
type scalerCase struct {
	w   *autograd.Var
	opt *optim.SGD
}

func newScalerCase() scalerCase {
	w := autograd.Param(tensor.FromFloat32([]float32{1, 2}))
	return scalerCase{w, optim.NewSGD([]*autograd.Var{w}, optim.SGDOptions{LR: 1})}
}

func (c scalerCase) setGrad(g ...float32) {
	c.w.ZeroGrad(true)
	c.w.SetGrad(tensor.FromFloat32(g))
}

// TestGradScalerSchedule checks the scale's saw-tooth: halved and the
// step skipped at every overflow (Inf or NaN), doubled after the growth
// interval's steps without one, gradients divided by the scale before
// the step, and the counting restarted by an overflow.
func TestGradScalerSchedule(t *testing.T) {
	ctx := context.Background()
	c := newScalerCase()
	s := optim.NewGradScaler(optim.GradScalerOptions{InitScale: 8, GrowthInterval: 3})
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	steps := []struct {
		grad      []float32 // scaled, as backward leaves them
		scale     float64   // the scale during the step
		skip      bool
		w         []float64 // after the step
		nextScale float64
	}{
		{[]float32{8, 16}, 8, false, []float64{0, 0}, 8},
		{[]float32{inf, 0}, 8, true, []float64{0, 0}, 4},
		{[]float32{0, nan}, 4, true, []float64{0, 0}, 2},
		{[]float32{2, 2}, 2, false, []float64{-1, -1}, 2},
		{[]float32{2, 2}, 2, false, []float64{-2, -2}, 2},
		{[]float32{-4, 2}, 2, false, []float64{0, -3}, 4}, // the third in a row: grows
		{[]float32{4, 4}, 4, false, []float64{-1, -4}, 4},
		{[]float32{4, -inf}, 4, true, []float64{-1, -4}, 2}, // the count restarts
		{[]float32{2, 2}, 2, false, []float64{-2, -5}, 2},
		{[]float32{2, 2}, 2, false, []float64{-3, -6}, 2},
		{[]float32{2, 2}, 2, false, []float64{-4, -7}, 4},
	}
	for i, st := range steps {
		if got := s.GetScale(); got != st.scale {
			t.Fatalf("step %d: scale %v, want %v", i, got, st.scale)
		}
		c.setGrad(st.grad...)
		stepped, err := s.Step(ctx, c.opt)
		if err != nil || stepped == st.skip {
			t.Fatalf("step %d: stepped %v, %v; want skipped %v", i, stepped, err, st.skip)
		}
		if err := s.Update(); err != nil {
			t.Fatal(err)
		}
		for j, v := range c.w.Value().Values() {
			if v != st.w[j] {
				t.Fatalf("step %d: w %v, want %v", i, c.w.Value().Values(), st.w)
			}
		}
		if got := s.GetScale(); got != st.nextScale {
			t.Fatalf("after step %d: scale %v, want %v", i, got, st.nextScale)
		}
	}
}

// TestGradScalerGrowthStaysFinite: a scale whose growth would overflow
// float32 keeps its value, as PyTorch's.
func TestGradScalerGrowthStaysFinite(t *testing.T) {
	c := newScalerCase()
	top := math.Ldexp(1, 127)
	s := optim.NewGradScaler(optim.GradScalerOptions{InitScale: top, GrowthInterval: 1})
	c.setGrad(0, 0)
	if _, err := s.Step(context.Background(), c.opt); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(); err != nil {
		t.Fatal(err)
	}
	if got := s.GetScale(); got != top {
		t.Fatalf("scale %v after a growth past float32's range, want it kept at %v", got, top)
	}
}

// TestGradScalerUnscaleThenClip: Unscale leaves the true gradients for
// clipping, and Step does not divide them again.
func TestGradScalerUnscaleThenClip(t *testing.T) {
	ctx := context.Background()
	c := newScalerCase()
	s := optim.NewGradScaler(optim.GradScalerOptions{InitScale: 1024})
	c.setGrad(3*1024, 4*1024)
	if err := s.Unscale(ctx, c.opt); err != nil {
		t.Fatal(err)
	}
	g := c.w.Grad().Values()
	if g[0] != 3 || g[1] != 4 {
		t.Fatalf("unscaled gradient %v, want [3 4]", g)
	}
	c.w.Grad().Scale(0.2) // a clip to norm 1
	if stepped, err := s.Step(ctx, c.opt); err != nil || !stepped {
		t.Fatalf("Step: %v, %v", stepped, err)
	}
	if w := c.w.Value().Values(); math.Abs(w[0]-0.4) > 1e-6 || math.Abs(w[1]-1.2) > 1e-6 {
		t.Fatalf("w %v, want [0.4 1.2]: the clipped gradient, divided once", w)
	}
}

// TestGradScalerOrder: the calls out of order fail as PyTorch's raise,
// and float16 gradients are refused.
func TestGradScalerOrder(t *testing.T) {
	ctx := context.Background()
	c := newScalerCase()
	s := optim.NewGradScaler(optim.GradScalerOptions{})
	if err := s.Update(); !errors.Is(err, optim.ErrNoStep) {
		t.Fatalf("Update before a step: %v, want ErrNoStep", err)
	}
	c.setGrad(1, 1)
	if err := s.Unscale(ctx, c.opt); err != nil {
		t.Fatal(err)
	}
	if err := s.Unscale(ctx, c.opt); !errors.Is(err, optim.ErrUnscaledTwice) {
		t.Fatalf("second Unscale: %v, want ErrUnscaledTwice", err)
	}
	if _, err := s.Step(ctx, c.opt); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Step(ctx, c.opt); !errors.Is(err, optim.ErrSteppedTwice) {
		t.Fatalf("second Step: %v, want ErrSteppedTwice", err)
	}
	if err := s.Unscale(ctx, c.opt); !errors.Is(err, optim.ErrUnscaledTwice) && !errors.Is(err, optim.ErrSteppedTwice) {
		t.Fatalf("Unscale after Step: %v", err)
	}
	if err := s.Update(); err != nil {
		t.Fatal(err)
	}
	// After Update, a new iteration.
	c.setGrad(1, 1)
	if stepped, err := s.Step(ctx, c.opt); err != nil || !stepped {
		t.Fatalf("Step after Update: %v, %v", stepped, err)
	}
	s.Update()

	h := autograd.Param(tensor.FromFloat32([]float32{1}).To(tensor.Float16))
	h.SetGrad(tensor.FromFloat32([]float32{1}).To(tensor.Float16))
	if _, err := s.Step(ctx, optim.NewSGD([]*autograd.Var{h}, optim.SGDOptions{LR: 1})); !errors.Is(err, optim.ErrHalfGradients) {
		t.Fatalf("float16 gradients: %v, want ErrHalfGradients", err)
	}
}

// TestGradScalerAgreeFoundInf: with a shard's gradients finite but
// another rank's not, AgreeFoundInf makes this rank skip too; an error
// of the agreement is Step's, naming it.
func TestGradScalerAgreeFoundInf(t *testing.T) {
	ctx := context.Background()
	c := newScalerCase()
	var asked []bool
	other := true
	var fail error
	s := optim.NewGradScaler(optim.GradScalerOptions{InitScale: 4, AgreeFoundInf: func(_ context.Context, found bool) (bool, error) {
		asked = append(asked, found)
		return found || other, fail
	}})
	c.setGrad(4, 4)
	if stepped, err := s.Step(ctx, c.opt); err != nil || stepped {
		t.Fatalf("Step: stepped %v, %v; want skipped for the other rank's overflow", stepped, err)
	}
	s.Update()
	if len(asked) != 1 || asked[0] {
		t.Fatalf("AgreeFoundInf asked %v, want [false]", asked)
	}
	if s.GetScale() != 2 {
		t.Fatalf("scale %v, want 2", s.GetScale())
	}
	fail = errors.New("rank 3 is gone")
	c.setGrad(2, 2)
	if _, err := s.Step(ctx, c.opt); err == nil || !errors.Is(err, fail) {
		t.Fatalf("Step with a failed agreement: %v", err)
	}
}

// TestGradScalerDisabled: a disabled scaler passes everything through.
func TestGradScalerDisabled(t *testing.T) {
	c := newScalerCase()
	s := optim.NewGradScaler(optim.GradScalerOptions{Disabled: true})
	loss := autograd.SumAll(c.w)
	if s.Scale(loss) != loss || s.GetScale() != 1 || s.Enabled() {
		t.Fatal("a disabled scaler scales")
	}
	c.setGrad(1, 1)
	if stepped, err := s.Step(context.Background(), c.opt); err != nil || !stepped {
		t.Fatalf("Step: %v, %v", stepped, err)
	}
	if err := s.Update(); err != nil {
		t.Fatal(err)
	}
	if len(s.StateDict()) != 0 {
		t.Fatal("a disabled scaler's state is not empty")
	}
}

// TestGradScalerStateDict: the state goes round, and malformed states are
// refused without changing the scaler.
func TestGradScalerStateDict(t *testing.T) {
	ctx := context.Background()
	c := newScalerCase()
	s := optim.NewGradScaler(optim.GradScalerOptions{InitScale: 64, GrowthInterval: 5})
	for range 3 {
		c.setGrad(1, 1)
		s.Step(ctx, c.opt)
		s.Update()
	}
	sd := s.StateDict()
	if sd["scale"].Item() != 64 || sd["_growth_tracker"].Item() != 3 || sd["growth_interval"].Item() != 5 {
		t.Fatalf("state %v", sd)
	}
	r := optim.NewGradScaler(optim.GradScalerOptions{})
	if err := r.LoadStateDict(sd); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the restored tracker: two more steps grow it
		c.setGrad(1, 1)
		r.Step(ctx, c.opt)
		r.Update()
	}
	if r.GetScale() != 128 {
		t.Fatalf("restored scaler's scale %v after two steps, want 128", r.GetScale())
	}
	scalar := func(v float64) *tensor.Tensor { return tensor.FromFloat64([]float64{v}).Reshape() }
	for name, v := range map[string]float64{"scale": math.Inf(1), "growth_factor": 1, "backoff_factor": 1, "growth_interval": 0, "_growth_tracker": 5} {
		bad := s.StateDict()
		bad[name] = scalar(v)
		if err := r.LoadStateDict(bad); err == nil {
			t.Errorf("%s = %v accepted", name, v)
		}
	}
	bad := s.StateDict()
	delete(bad, "scale")
	if err := r.LoadStateDict(bad); err == nil {
		t.Error("a state without a scale accepted")
	}
	if err := r.LoadStateDict(map[string]*tensor.Tensor{}); err == nil {
		t.Error("an empty state accepted")
	}
	if r.GetScale() != 128 {
		t.Fatalf("refused states changed the scale to %v", r.GetScale())
	}
}
