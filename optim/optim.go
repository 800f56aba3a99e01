// Package optim provides optimizers (SGD, Adam, AdamW) with PyTorch's
// update rules and state dicts, and a step learning-rate scheduler.
//
//	opt := optim.NewSGD(nn.Parameters(model), optim.SGDOptions{LR: 0.01, Momentum: 0.9})
//	for ... {
//		opt.ZeroGrad(true)
//		loss := ...
//		loss.Backward(nil)
//		opt.Step()
//	}
//
// An optimizer holds one group of parameters with one set of
// hyper-parameters. Parameters whose gradient is nil are skipped, as in
// PyTorch. Step runs outside any recorded graph.
package optim

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/internal/simd"
	"github.com/godist/godist/tensor"
)

// Optimizer updates parameters from their gradients.
type Optimizer interface {
	// Step applies one update to every parameter that has a gradient.
	Step()
	// ZeroGrad clears the gradients (see autograd.Var.ZeroGrad).
	ZeroGrad(setToNone bool)
	// LR and SetLR read and change the learning rate (schedulers use them).
	LR() float64
	SetLR(lr float64)
	// StateDict returns the per-parameter state under PyTorch-like names
	// ("state.0.momentum_buffer", "state.3.exp_avg") and the
	// hyper-parameters ("param_groups.0.lr") as 0-d float64 tensors. The
	// state tensors are the optimizer's own.
	StateDict() map[string]*tensor.Tensor
	// LoadStateDict restores a state dict made by StateDict for the same
	// parameters.
	LoadStateDict(sd map[string]*tensor.Tensor) error
	// Params returns the parameters being optimized.
	Params() []*autograd.Var
}

// base carries what every optimizer shares: the parameters, the
// hyper-parameters by PyTorch name, and per-parameter state tensors.
type base struct {
	params []*autograd.Var
	hyper  map[string]*float64
	state  []map[string]*tensor.Tensor
}

func newBase(params []*autograd.Var, hyper map[string]*float64) base {
	st := make([]map[string]*tensor.Tensor, len(params))
	for i := range st {
		st[i] = map[string]*tensor.Tensor{}
	}
	return base{params: params, hyper: hyper, state: st}
}

func (b *base) Params() []*autograd.Var { return b.params }
func (b *base) LR() float64             { return *b.hyper["lr"] }
func (b *base) SetLR(lr float64)        { *b.hyper["lr"] = lr }

func (b *base) ZeroGrad(setToNone bool) {
	for _, p := range b.params {
		p.ZeroGrad(setToNone)
	}
}

// stateOf returns the named state tensor of parameter i, creating it with
// init when absent.
func (b *base) stateOf(i int, name string, init func() *tensor.Tensor) *tensor.Tensor {
	t, ok := b.state[i][name]
	if !ok {
		t = init()
		b.state[i][name] = t
	}
	return t
}

func (b *base) StateDict() map[string]*tensor.Tensor {
	sd := map[string]*tensor.Tensor{}
	for i, st := range b.state {
		for k, t := range st {
			sd[fmt.Sprintf("state.%d.%s", i, k)] = t
		}
	}
	for k, v := range b.hyper {
		sd["param_groups.0."+k] = tensor.FromFloat64([]float64{*v}).Reshape()
	}
	return sd
}

func (b *base) LoadStateDict(sd map[string]*tensor.Tensor) error {
	state := make([]map[string]*tensor.Tensor, len(b.params))
	for i := range state {
		state[i] = map[string]*tensor.Tensor{}
	}
	hyper := map[string]float64{}
	for k, t := range sd {
		switch {
		case strings.HasPrefix(k, "param_groups.0."):
			name := strings.TrimPrefix(k, "param_groups.0.")
			if _, ok := b.hyper[name]; !ok {
				return fmt.Errorf("optim: load state dict: unknown hyper-parameter %q", name)
			}
			hyper[name] = t.Item()
		case strings.HasPrefix(k, "state."):
			rest := strings.TrimPrefix(k, "state.")
			idx, name, ok := strings.Cut(rest, ".")
			i, err := strconv.Atoi(idx)
			if !ok || err != nil || i < 0 || i >= len(b.params) {
				return fmt.Errorf("optim: load state dict: bad key %q for %d parameters", k, len(b.params))
			}
			if name != "step" && !tensor.SameShape(t, b.params[i].Value()) {
				return fmt.Errorf("optim: load state dict: %s has shape %v, parameter %d has %v", k, t.Shape(), i, b.params[i].Value().Shape())
			}
			state[i][name] = t.Clone()
		default:
			return fmt.Errorf("optim: load state dict: unexpected key %q", k)
		}
	}
	for k, v := range hyper {
		*b.hyper[k] = v
	}
	b.state = state
	return nil
}

// SGDOptions are torch.optim.SGD's hyper-parameters.
type SGDOptions struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov                             bool
}

// SGD is stochastic gradient descent with optional momentum, dampening,
// Nesterov momentum and weight decay, with PyTorch's update rule: the first
// step's momentum buffer is the gradient itself.
type SGD struct {
	base
	opt SGDOptions
}

// NewSGD returns an SGD optimizer over params.
func NewSGD(params []*autograd.Var, opt SGDOptions) *SGD {
	if opt.Nesterov && (opt.Momentum <= 0 || opt.Dampening != 0) {
		panic("optim: Nesterov momentum requires a momentum and zero dampening")
	}
	s := &SGD{opt: opt}
	s.base = newBase(params, map[string]*float64{
		"lr": &s.opt.LR, "momentum": &s.opt.Momentum, "dampening": &s.opt.Dampening, "weight_decay": &s.opt.WeightDecay,
	})
	return s
}

// Step applies one SGD update.
func (s *SGD) Step() {
	o := s.opt
	for i, p := range s.params {
		g := p.Grad()
		if g == nil {
			continue
		}
		w := p.Value()
		buf, hasBuf := s.state[i]["momentum_buffer"]
		if hasBuf && w.DType() == tensor.Float32 && g.IsContiguous() && w.IsContiguous() {
			// One pass over parameter, gradient and momentum buffer.
			sgd32(w.Float32s(), g.Float32s(), buf.Float32s(), float32(o.LR), float32(o.Momentum),
				float32(1-o.Dampening), float32(o.WeightDecay), o.Nesterov)
			continue
		}
		d := g
		if o.WeightDecay != 0 {
			d = new(tensor.Tensor).AddScaled(g, o.WeightDecay, w)
		}
		if o.Momentum != 0 {
			if !hasBuf {
				buf = d.Clone()
				s.state[i]["momentum_buffer"] = buf
			} else {
				buf.Scale(o.Momentum).AddScaled(buf, 1-o.Dampening, d)
			}
			if o.Nesterov {
				d = new(tensor.Tensor).AddScaled(d, o.Momentum, buf)
			} else {
				d = buf
			}
		}
		w.AddScaled(w, -o.LR, d)
	}
}

// AdamOptions are torch.optim.Adam's hyper-parameters. Zero values of
// Beta1, Beta2 and Eps mean PyTorch's defaults 0.9, 0.999 and 1e-8.
type AdamOptions struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	AMSGrad                            bool
}

// Adam is the Adam optimizer; with decoupled weight decay it is AdamW.
type Adam struct {
	base
	opt       AdamOptions
	decoupled bool
}

// NewAdam returns an Adam optimizer (L2 weight decay added to the
// gradient).
func NewAdam(params []*autograd.Var, opt AdamOptions) *Adam { return newAdam(params, opt, false) }

// NewAdamW returns an AdamW optimizer (weight decay applied to the
// parameters directly). PyTorch's default WeightDecay for AdamW is 0.01;
// pass it explicitly.
func NewAdamW(params []*autograd.Var, opt AdamOptions) *Adam { return newAdam(params, opt, true) }

func newAdam(params []*autograd.Var, opt AdamOptions, decoupled bool) *Adam {
	if opt.Beta1 == 0 {
		opt.Beta1 = 0.9
	}
	if opt.Beta2 == 0 {
		opt.Beta2 = 0.999
	}
	if opt.Eps == 0 {
		opt.Eps = 1e-8
	}
	a := &Adam{opt: opt, decoupled: decoupled}
	a.base = newBase(params, map[string]*float64{
		"lr": &a.opt.LR, "beta1": &a.opt.Beta1, "beta2": &a.opt.Beta2, "eps": &a.opt.Eps, "weight_decay": &a.opt.WeightDecay,
	})
	return a
}

// Step applies one Adam update.
func (a *Adam) Step() {
	o := a.opt
	for i, p := range a.params {
		g := p.Grad()
		if g == nil {
			continue
		}
		w := p.Value()
		zeros := func() *tensor.Tensor { return tensor.New(w.DType(), w.Shape()...) }
		step := a.stateOf(i, "step", func() *tensor.Tensor { return tensor.New(tensor.Float32) })
		step.Set(step.Item() + 1)
		m := a.stateOf(i, "exp_avg", zeros)
		v := a.stateOf(i, "exp_avg_sq", zeros)
		var vmax *tensor.Tensor
		if o.AMSGrad {
			vmax = a.stateOf(i, "max_exp_avg_sq", zeros)
		}
		if a.decoupled {
			w.Scale(1 - o.LR*o.WeightDecay)
		} else if o.WeightDecay != 0 {
			g = new(tensor.Tensor).AddScaled(g, o.WeightDecay, w)
		}
		t := step.Item()
		bc1 := 1 - math.Pow(o.Beta1, t)
		bc2sqrt := math.Sqrt(1 - math.Pow(o.Beta2, t))
		stepSize := o.LR / bc1
		if w.DType() == tensor.Float32 && g.IsContiguous() {
			var mx []float32
			if vmax != nil {
				mx = vmax.Float32s()
			}
			adam32(w.Float32s(), g.Float32s(), m.Float32s(), v.Float32s(), mx,
				float32(o.Beta1), float32(o.Beta2), float32(o.Eps), float32(bc2sqrt), float32(stepSize))
			continue
		}
		m.Scale(o.Beta1).AddScaled(m, 1-o.Beta1, g)
		gg := new(tensor.Tensor).Mul(g, g)
		v.Scale(o.Beta2).AddScaled(v, 1-o.Beta2, gg)
		src := v
		if vmax != nil {
			vmax.Maximum(vmax, v)
			src = vmax
		}
		denom := new(tensor.Tensor).Sqrt(src)
		denom.Scale(1/bc2sqrt).AddScalar(denom, o.Eps)
		w.AddScaled(w, -stepSize, new(tensor.Tensor).Div(m, denom))
	}
}

func sgd32(w, g, buf []float32, lr, momentum, keep, wd float32, nesterov bool) {
	g, buf = g[:len(w)], buf[:len(w)]
	if wd == 0 && keep == 1 && !nesterov {
		// The common case (plain momentum): a vector kernel that rounds
		// as this loop's general form does.
		simd.SGDMomentumF32(w, g, buf, lr, momentum)
		return
	}
	for i := range w {
		d := g[i] + wd*w[i]
		b := momentum*buf[i] + keep*d
		buf[i] = b
		if nesterov {
			b = d + momentum*b
		}
		w[i] -= lr * b
	}
}

func adam32(w, g, m, v, vmax []float32, b1, b2, eps, bc2sqrt, stepSize float32) {
	g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
	for i := range w {
		gi := g[i]
		m[i] = m[i]*b1 + (1-b1)*gi
		v[i] = v[i]*b2 + (1-b2)*gi*gi
		s := v[i]
		if vmax != nil {
			vmax[i] = max(vmax[i], s)
			s = vmax[i]
		}
		denom := float32(math.Sqrt(float64(s)))/bc2sqrt + eps
		w[i] -= stepSize * m[i] / denom
	}
}

// StepLR multiplies the learning rate by Gamma every StepSize calls of
// Step (epochs), as torch.optim.lr_scheduler.StepLR.
type StepLR struct {
	opt      Optimizer
	base     float64
	StepSize int
	Gamma    float64
	epoch    int
}

// NewStepLR returns a scheduler for opt starting from its current rate.
func NewStepLR(opt Optimizer, stepSize int, gamma float64) *StepLR {
	if stepSize <= 0 {
		panic(fmt.Sprintf("optim: StepLR step size %d", stepSize))
	}
	return &StepLR{opt: opt, base: opt.LR(), StepSize: stepSize, Gamma: gamma}
}

// Step advances one epoch and sets the learning rate.
func (s *StepLR) Step() {
	s.epoch++
	s.opt.SetLR(s.base * math.Pow(s.Gamma, float64(s.epoch/s.StepSize)))
}

// Epoch returns the number of Step calls so far.
func (s *StepLR) Epoch() int { return s.epoch }
