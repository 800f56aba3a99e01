package optim

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// GradScaler is PyTorch's loss scaling for float16 training
// (torch.cuda.amp.GradScaler): the loss is multiplied by a scale before
// backward, so that gradients that float16 would flush to zero keep
// their bits; the gradients are divided by it again before the step; a
// step whose gradients overflowed (an infinity or a NaN) is skipped and
// the scale halved, and after GrowthInterval steps without one the scale
// doubles.
//
//	scaler := optim.NewGradScaler(optim.GradScalerOptions{})
//	for ... {
//		opt.ZeroGrad(true)
//		var loss *autograd.Var
//		autograd.Autocast(tensor.Float16, func() { loss = lossOf(model(x)) })
//		scaler.Scale(loss).Backward(nil)
//		scaler.Unscale(ctx, opt) // only to clip: the gradients are the true ones now
//		nn.ClipGradNorm(opt.Params(), 1.0)
//		stepped, err := scaler.Step(ctx, opt) // false: skipped, an overflow
//		...
//		scaler.Update()
//	}
//
// Under DDP every rank's gradients are the same all-reduced values, so
// every rank skips the same steps. Where each rank holds only a shard of
// the gradients (FSDP), GradScalerOptions.AgreeFoundInf must combine the
// ranks' findings, as PyTorch's ShardedGradScaler does.
//
// The arithmetic is PyTorch's: the scale is a float32, the gradients are
// multiplied by its reciprocal rounded to float32, and the scale grows
// only while the grown scale is finite.
type GradScaler struct {
	opt     GradScalerOptions
	scale   float32
	tracker int // steps without an overflow since the scale last changed
	// per optimizer since the last Update: unscaled, stepped, found inf.
	state map[Optimizer]*scalerState
}

// scalerState is what a GradScaler knows of one optimizer in the current
// iteration.
type scalerState struct {
	unscaled, stepped, foundInf bool
}

// GradScalerOptions configure a GradScaler; zero values take PyTorch's
// defaults.
type GradScalerOptions struct {
	// InitScale is the first scale (65,536: 2^16).
	InitScale float64
	// GrowthFactor multiplies the scale after GrowthInterval steps
	// without an overflow (2); BackoffFactor multiplies it after a step
	// with one (0.5).
	GrowthFactor, BackoffFactor float64
	// GrowthInterval is the steps without an overflow before the scale
	// grows (2,000).
	GrowthInterval int
	// Disabled makes every method a pass-through (PyTorch's
	// enabled=False): Scale returns the loss, Step steps, Update does
	// nothing. For one training loop run with and without float16.
	Disabled bool
	// AgreeFoundInf, when set, is called by Unscale with whether this
	// rank's gradients held an infinity or a NaN, and returns whether any
	// rank's did (an all-reduce of a max, say): where each rank holds a
	// shard of the gradients, every rank must skip the same steps.
	AgreeFoundInf func(ctx context.Context, found bool) (bool, error)
}

// NewGradScaler returns a GradScaler with opt's settings. It panics on
// settings PyTorch refuses: a growth factor of at most 1, a backoff
// factor outside (0, 1), a negative interval or initial scale.
func NewGradScaler(opt GradScalerOptions) *GradScaler {
	if opt.InitScale == 0 {
		opt.InitScale = 65536
	}
	if opt.GrowthFactor == 0 {
		opt.GrowthFactor = 2
	}
	if opt.BackoffFactor == 0 {
		opt.BackoffFactor = 0.5
	}
	if opt.GrowthInterval == 0 {
		opt.GrowthInterval = 2000
	}
	switch {
	case !(opt.InitScale > 0) || math.IsInf(opt.InitScale, 0):
		panic(fmt.Sprintf("optim: GradScaler's initial scale %v: want a positive finite number", opt.InitScale))
	case !(opt.GrowthFactor > 1):
		panic(fmt.Sprintf("optim: GradScaler's growth factor %v: want more than 1", opt.GrowthFactor))
	case !(opt.BackoffFactor > 0 && opt.BackoffFactor < 1):
		panic(fmt.Sprintf("optim: GradScaler's backoff factor %v: want between 0 and 1", opt.BackoffFactor))
	case opt.GrowthInterval < 0:
		panic(fmt.Sprintf("optim: GradScaler's growth interval %d: want a positive number of steps", opt.GrowthInterval))
	}
	return &GradScaler{opt: opt, scale: float32(opt.InitScale), state: map[Optimizer]*scalerState{}}
}

// Errors of a GradScaler used out of order; PyTorch raises the same.
var (
	// ErrUnscaledTwice: Unscale (or Step after it) was called twice for
	// one optimizer between two Updates.
	ErrUnscaledTwice = errors.New("optim: GradScaler.Unscale was already called for this optimizer since the last Update")
	// ErrSteppedTwice: Step was called twice for one optimizer, or
	// Unscale after Step, between two Updates.
	ErrSteppedTwice = errors.New("optim: GradScaler.Step was already called for this optimizer since the last Update")
	// ErrNoStep: Update was called without a Step since the last one.
	ErrNoStep = errors.New("optim: GradScaler.Update without a Step since the last Update: no inf checks were recorded")
	// ErrHalfGradients: the gradients to unscale are float16 themselves;
	// the parameters (the master weights) must be float32, with Autocast
	// running the products in float16.
	ErrHalfGradients = errors.New("optim: GradScaler cannot unscale float16 gradients: keep the parameters in float32 and run the products under autograd.Autocast(tensor.Float16, ...)")
)

// Enabled reports whether the scaler scales (GradScalerOptions.Disabled
// is false).
func (s *GradScaler) Enabled() bool { return !s.opt.Disabled }

// Scale returns the loss multiplied by the current scale, to run backward
// on; the loss itself when disabled.
func (s *GradScaler) Scale(loss *autograd.Var) *autograd.Var {
	if s.opt.Disabled {
		return loss
	}
	return autograd.MulScalar(loss, float64(s.scale))
}

// GetScale returns the current scale (1 when disabled), as PyTorch's
// get_scale.
func (s *GradScaler) GetScale() float64 {
	if s.opt.Disabled {
		return 1
	}
	return float64(s.scale)
}

// Unscale divides the gradients of opt's parameters by the scale, in
// place, and notes whether any is infinite or NaN (then Step skips opt's
// step). Call it before anything that reads the true gradients between
// backward and Step, such as clipping their norm; Step calls it when it
// was not. Once per optimizer between two Updates.
func (s *GradScaler) Unscale(ctx context.Context, opt Optimizer) error {
	if s.opt.Disabled {
		return nil
	}
	st := s.stateOf(opt)
	switch {
	case st.unscaled:
		return ErrUnscaledTwice
	case st.stepped:
		return ErrSteppedTwice
	}
	for _, p := range opt.Params() {
		if g := p.Grad(); g != nil && g.DType() == tensor.Float16 {
			return ErrHalfGradients // before any gradient is touched
		}
	}
	// PyTorch: the reciprocal in float64, rounded to float32.
	inv := float32(1 / float64(s.scale))
	found := false
	for _, p := range opt.Params() {
		g := p.Grad()
		if g == nil {
			continue
		}
		switch {
		case g.DType() == tensor.Float32 && g.IsContiguous():
			found = unscale32(g.Float32s(), inv) || found
		default:
			found = unscaleAny(g, float64(inv)) || found
		}
	}
	if s.opt.AgreeFoundInf != nil {
		var err error
		if found, err = s.opt.AgreeFoundInf(ctx, found); err != nil {
			// The gradients are unscaled, and the ranks did not agree:
			// a Step after this skips.
			st.unscaled, st.foundInf = true, true
			return fmt.Errorf("optim: GradScaler: agreeing on overflowed gradients: %w", err)
		}
	}
	st.unscaled, st.foundInf = true, found
	return nil
}

// unscale32 multiplies g by inv and reports whether any element was
// infinite or NaN (they stay so).
func unscale32(g []float32, inv float32) bool {
	found := false
	for i, v := range g {
		if v-v != 0 { // ±Inf and NaN: Inf-Inf and NaN-NaN are NaN
			found = true
		}
		g[i] = v * inv
	}
	return found
}

// unscaleAny is unscale32 for other gradients (bfloat16, float64, not
// contiguous), through Values.
func unscaleAny(g *tensor.Tensor, inv float64) bool {
	found := false
	for _, v := range g.Values() {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			found = true
			break
		}
	}
	g.Scale(inv)
	return found
}

// Step unscales opt's gradients if Unscale did not, and steps opt unless
// they held an infinity or a NaN. It reports whether opt stepped; an
// error is the step's (optim.Step: a distributed optimizer's collective)
// or the agreement's, or a call out of order. Once per optimizer between
// two Updates. Disabled, it steps.
func (s *GradScaler) Step(ctx context.Context, opt Optimizer) (bool, error) {
	if s.opt.Disabled {
		return true, Step(ctx, opt)
	}
	st := s.stateOf(opt)
	if st.stepped {
		return false, ErrSteppedTwice
	}
	if !st.unscaled {
		if err := s.Unscale(ctx, opt); err != nil {
			return false, err
		}
	}
	st.stepped = true
	if st.foundInf {
		return false, nil
	}
	return true, Step(ctx, opt)
}

// Update sets the scale for the next iteration from this one's steps: a
// step that met an overflow multiplies it by the backoff factor; the
// GrowthInterval-th step in a row without one multiplies it by the growth
// factor (unless that would make it infinite). It forgets this
// iteration's unscales and steps. It returns ErrNoStep when no Step was
// made since the last Update (the scale is left alone).
func (s *GradScaler) Update() error {
	if s.opt.Disabled {
		return nil
	}
	found, any := false, false
	for _, st := range s.state {
		if st.stepped {
			any = true
			found = found || st.foundInf
		}
	}
	clear(s.state)
	if !any {
		return ErrNoStep
	}
	if found {
		s.scale = float32(float64(s.scale) * s.opt.BackoffFactor)
		s.tracker = 0
		return nil
	}
	s.tracker++
	if s.tracker == s.opt.GrowthInterval {
		if grown := float32(float64(s.scale) * s.opt.GrowthFactor); !math.IsInf(float64(grown), 0) {
			s.scale = grown
		}
		s.tracker = 0
	}
	return nil
}

// SetScale sets the scale for the next iteration, as PyTorch's
// update(new_scale), forgetting this iteration's unscales and steps.
func (s *GradScaler) SetScale(scale float64) {
	if !(scale > 0) || math.IsInf(scale, 0) {
		panic(fmt.Sprintf("optim: GradScaler.SetScale(%v): want a positive finite scale", scale))
	}
	s.scale = float32(scale)
	clear(s.state)
}

func (s *GradScaler) stateOf(opt Optimizer) *scalerState {
	st := s.state[opt]
	if st == nil {
		st = &scalerState{}
		s.state[opt] = st
	}
	return st
}

// StateDict returns the scaler's state under PyTorch's names ("scale",
// "growth_factor", "backoff_factor", "growth_interval",
// "_growth_tracker"), each a 0-d float64 tensor; empty when disabled, as
// PyTorch's.
func (s *GradScaler) StateDict() map[string]*tensor.Tensor {
	if s.opt.Disabled {
		return map[string]*tensor.Tensor{}
	}
	scalar := func(v float64) *tensor.Tensor { return tensor.FromFloat64([]float64{v}).Reshape() }
	return map[string]*tensor.Tensor{
		"scale":           scalar(float64(s.scale)),
		"growth_factor":   scalar(s.opt.GrowthFactor),
		"backoff_factor":  scalar(s.opt.BackoffFactor),
		"growth_interval": scalar(float64(s.opt.GrowthInterval)),
		"_growth_tracker": scalar(float64(s.tracker)),
	}
}

// LoadStateDict restores a state made by StateDict. An empty one (a
// disabled scaler's) is refused, as PyTorch refuses it.
func (s *GradScaler) LoadStateDict(sd map[string]*tensor.Tensor) error {
	if len(sd) == 0 {
		return errors.New("optim: GradScaler.LoadStateDict: the state is empty: it was saved by a disabled scaler")
	}
	get := func(name string) (float64, error) {
		t, ok := sd[name]
		if !ok || t.Numel() != 1 {
			return 0, fmt.Errorf("optim: GradScaler.LoadStateDict: no scalar %q", name)
		}
		return t.Values()[0], nil
	}
	vals := map[string]float64{}
	for _, name := range []string{"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"} {
		v, err := get(name)
		if err != nil {
			return err
		}
		vals[name] = v
	}
	interval, tracker := vals["growth_interval"], vals["_growth_tracker"]
	switch {
	case !(vals["scale"] > 0) || math.IsInf(vals["scale"], 0):
		return fmt.Errorf("optim: GradScaler.LoadStateDict: scale %v", vals["scale"])
	case !(vals["growth_factor"] > 1), !(vals["backoff_factor"] > 0 && vals["backoff_factor"] < 1):
		return fmt.Errorf("optim: GradScaler.LoadStateDict: factors %v and %v", vals["growth_factor"], vals["backoff_factor"])
	case interval != math.Trunc(interval) || interval < 1 || interval > math.MaxInt32,
		tracker != math.Trunc(tracker) || tracker < 0 || tracker >= interval:
		return fmt.Errorf("optim: GradScaler.LoadStateDict: growth interval %v, tracker %v", interval, tracker)
	}
	s.scale = float32(vals["scale"])
	s.opt.GrowthFactor, s.opt.BackoffFactor = vals["growth_factor"], vals["backoff_factor"]
	s.opt.GrowthInterval, s.tracker = int(interval), int(tracker)
	clear(s.state)
	return nil
}
