// Package optim provides optimizers (SGD, Adam, AdamW) with PyTorch's
// update rules and state dicts, and learning-rate schedulers (StepLR,
// WarmupCosine).
//
//	opt := optim.NewSGD(nn.Parameters(model), optim.SGDOptions{LR: 0.01, Momentum: 0.9})
//	for ... {
//		opt.ZeroGrad(true)
//		loss := ...
//		loss.Backward(nil)
//		opt.Step()
//	}
//
// An optimizer holds its parameters in groups, each with its own
// hyper-parameters; the constructors that take a plain parameter list make
// one group, NewAdamWGroups and NewSGDGroups make several (DecayGroups
// splits a model's parameters into those with and without weight decay,
// as GPT training does), and AddParamGroup (GroupAdder) appends one to a
// made optimizer, as PyTorch's add_param_group:
//
//	groups := optim.DecayGroups(nn.NamedParameters(model), 0.1, nil)
//	opt := optim.NewAdamWGroups(groups, optim.AdamOptions{LR: 6e-4, Beta2: 0.95})
//	sched := optim.NewWarmupCosine(opt, 100, 5000, 0.1)
//	for ... {
//		...
//		nn.ClipGradNorm(opt.Params(), 1.0)
//		opt.Step()
//		sched.Step()
//	}
//
// Parameters whose gradient is nil are skipped, as in PyTorch. Step runs
// outside any recorded graph.
package optim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
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
	// LR returns the learning rate (the first group's); SetLR sets every
	// group's. Schedulers use Groups where the optimizer has it.
	LR() float64
	SetLR(lr float64)
	// StateDict returns the per-parameter state under PyTorch-like names
	// ("state.0.momentum_buffer", "state.3.exp_avg") and the
	// hyper-parameters of each group G ("param_groups.G.lr") as 0-d
	// float64 tensors. State is indexed by the parameter's position in
	// Params. The state tensors are the optimizer's own.
	StateDict() map[string]*tensor.Tensor
	// LoadStateDict restores a state dict made by StateDict for the same
	// parameters in the same groups.
	LoadStateDict(sd map[string]*tensor.Tensor) error
	// Params returns the parameters being optimized.
	Params() []*autograd.Var
}

// ContextStepper is implemented by optimizers whose step is a collective
// that can fail (zero.ZeRO's broadcasts can meet a dead peer):
// StepContext bounds the step by ctx and returns its error, which
// Optimizer's Step, returning nothing, can only keep.
type ContextStepper interface {
	StepContext(ctx context.Context) error
}

// Step steps opt and returns the step's error: through StepContext when
// opt is a ContextStepper, else with opt.Step(), which cannot fail. A
// training loop written against Optimizer calls it rather than opt.Step(),
// so that a distributed optimizer's failed step is not lost.
func Step(ctx context.Context, opt Optimizer) error {
	if s, ok := opt.(ContextStepper); ok {
		return s.StepContext(ctx)
	}
	opt.Step()
	return nil
}

// Groups is implemented by optimizers whose parameters are split into
// groups, each with its own hyper-parameters (every optimizer in this
// package has it; those made without groups have one). Schedulers use it
// to scale each group's learning rate from that group's own base rate, as
// PyTorch's do; Optimizer.SetLR instead gives every group the same rate.
type Groups interface {
	// NumGroups returns the number of parameter groups (at least 1).
	NumGroups() int
	// GroupLR and SetGroupLR read and change group g's learning rate;
	// they panic if g is out of range.
	GroupLR(g int) float64
	SetGroupLR(g int, lr float64)
}

// GroupAdder is implemented by optimizers that take a parameter group
// after they are made, as torch.optim.Optimizer.add_param_group (every
// optimizer in this package has it, and zero.ZeRO).
type GroupAdder interface {
	// AddParamGroup appends pg as the last group: its parameters are
	// numbered after every existing one, in pg's order, and take the
	// constructor's hyper-parameters except the weight decay, which is
	// always pg.WeightDecay, and the learning rate where pg.LR is set (as
	// NewAdamWGroups' groups do). The optimizer keeps pg.Params' elements,
	// not the slice. A parameter already in a group is refused with an
	// error wrapping ErrParamInTwoGroups, and nothing changes.
	// Schedulers made before the call do not scale the new group.
	AddParamGroup(pg ParamGroup) error
}

// ErrParamInTwoGroups is what AddParamGroup's error wraps when a
// parameter it is given is already in one of the optimizer's groups
// (the constructors panic instead: a programmer error there).
var ErrParamInTwoGroups = errors.New("optim: a parameter is in two parameter groups")

var (
	_ Groups     = (*SGD)(nil)
	_ Groups     = (*Adam)(nil)
	_ GroupAdder = (*SGD)(nil)
	_ GroupAdder = (*Adam)(nil)
)

// group is one parameter group: params[lo:hi] of its base, and its
// hyper-parameters by PyTorch name.
type group struct {
	lo, hi int
	hyper  map[string]*float64
}

// base carries what every optimizer shares: the parameters (all groups'
// in group order, so that a parameter's index is PyTorch's state-dict
// index), the groups, and per-parameter state tensors.
type base struct {
	params []*autograd.Var
	groups []group
	state  []map[string]*tensor.Tensor
}

func newBase(params []*autograd.Var, hyper map[string]*float64) base {
	return newGroupedBase([][]*autograd.Var{params}, []map[string]*float64{hyper})
}

// newGroupedBase makes a base of len(params) groups; params[g] and
// hypers[g] are group g's. A parameter in two groups is a programmer
// error (PyTorch raises too); one listed twice in a group is kept twice,
// as before groups existed (PyTorch warns).
func newGroupedBase(params [][]*autograd.Var, hypers []map[string]*float64) base {
	var b base
	for g, ps := range params {
		if err := b.addGroup(ps, hypers[g]); err != nil {
			panic(err.Error())
		}
	}
	return b
}

// addGroup appends a group of params with hyper-parameters hyper, or
// returns an error wrapping ErrParamInTwoGroups, changing nothing, if one
// of params is in an existing group.
func (b *base) addGroup(params []*autograd.Var, hyper map[string]*float64) error {
	g := len(b.groups)
	if len(params) > 0 {
		in := map[*autograd.Var]int{}
		for h, gr := range b.groups {
			for _, p := range b.params[gr.lo:gr.hi] {
				in[p] = h
			}
		}
		for i, p := range params {
			if h, ok := in[p]; ok {
				return fmt.Errorf("%w: parameter %d of group %d is in group %d already", ErrParamInTwoGroups, i, g, h)
			}
		}
	}
	lo := len(b.params)
	b.params = append(b.params, params...)
	b.groups = append(b.groups, group{lo: lo, hi: len(b.params), hyper: hyper})
	for range params {
		b.state = append(b.state, map[string]*tensor.Tensor{})
	}
	return nil
}

func (b *base) Params() []*autograd.Var { return b.params }

// LR returns the first group's learning rate.
func (b *base) LR() float64 { return *b.groups[0].hyper["lr"] }

// SetLR sets every group's learning rate to lr.
func (b *base) SetLR(lr float64) {
	for _, g := range b.groups {
		*g.hyper["lr"] = lr
	}
}

func (b *base) NumGroups() int               { return len(b.groups) }
func (b *base) GroupLR(g int) float64        { return *b.groups[g].hyper["lr"] }
func (b *base) SetGroupLR(g int, lr float64) { *b.groups[g].hyper["lr"] = lr }

// GroupParams returns group g's parameters (a slice of Params; do not
// append to it).
func (b *base) GroupParams(g int) []*autograd.Var {
	gr := b.groups[g]
	return b.params[gr.lo:gr.hi:gr.hi]
}

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

// StateDict: see Optimizer. An optimizer of more than one group also
// stores each group's members as "param_groups.G.params", an int64 vector
// of parameter indices (PyTorch's param_groups[G]["params"]); with one
// group the key is left out, so the dict is what it was before groups
// existed.
func (b *base) StateDict() map[string]*tensor.Tensor {
	sd := map[string]*tensor.Tensor{}
	for i, st := range b.state {
		for k, t := range st {
			sd[fmt.Sprintf("state.%d.%s", i, k)] = t
		}
	}
	for g, gr := range b.groups {
		prefix := fmt.Sprintf("param_groups.%d.", g)
		for k, v := range gr.hyper {
			sd[prefix+k] = tensor.FromFloat64([]float64{*v}).Reshape()
		}
		if len(b.groups) > 1 {
			idx := tensor.New(tensor.Int64, gr.hi-gr.lo)
			for j := range idx.Int64s() {
				idx.Int64s()[j] = int64(gr.lo + j)
			}
			sd[prefix+"params"] = idx
		}
	}
	return sd
}

// LoadStateDict: see Optimizer. Hyper-parameters absent from sd keep their
// values. A "param_groups.G.params" entry must list exactly group G's
// parameter indices; its absence (a dict from a one-group optimizer, or
// one saved before groups existed) is accepted. On error nothing changes.
func (b *base) LoadStateDict(sd map[string]*tensor.Tensor) error {
	state := make([]map[string]*tensor.Tensor, len(b.params))
	for i := range state {
		state[i] = map[string]*tensor.Tensor{}
	}
	type key struct {
		g    int
		name string
	}
	hyper := map[key]float64{}
	for _, k := range slices.Sorted(maps.Keys(sd)) { // the same error every time
		t := sd[k]
		switch {
		case strings.HasPrefix(k, "param_groups."):
			idx, name, ok := strings.Cut(strings.TrimPrefix(k, "param_groups."), ".")
			g, err := strconv.Atoi(idx)
			if !ok || err != nil || g < 0 {
				return fmt.Errorf("optim: load state dict: bad key %q", k)
			}
			if g >= len(b.groups) {
				return fmt.Errorf("optim: load state dict: %q is for parameter group %d, the optimizer has %d groups", k, g, len(b.groups))
			}
			gr := b.groups[g]
			if name == "params" {
				if err := checkGroupParams(t, gr.lo, gr.hi); err != nil {
					return fmt.Errorf("optim: load state dict: %s: %v", k, err)
				}
				continue
			}
			if _, ok := gr.hyper[name]; !ok {
				return fmt.Errorf("optim: load state dict: unknown hyper-parameter %q", name)
			}
			hyper[key{g, name}] = t.Item()
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
		*b.groups[k.g].hyper[k.name] = v
	}
	b.state = state
	return nil
}

// checkGroupParams reports whether t lists the indices lo..hi-1.
func checkGroupParams(t *tensor.Tensor, lo, hi int) error {
	v := t.Values()
	ok := t.Dim() == 1 && len(v) == hi-lo
	for j := 0; ok && j < len(v); j++ {
		ok = v[j] == float64(lo+j)
	}
	if !ok {
		mine := make([]int, hi-lo)
		for j := range mine {
			mine[j] = lo + j
		}
		return fmt.Errorf("the saved group holds parameters %v, this optimizer's holds %v (groups made differently?)", v, mine)
	}
	return nil
}

// SGDOptions are torch.optim.SGD's hyper-parameters.
type SGDOptions struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov                             bool
}

// SGD is stochastic gradient descent with optional momentum, dampening,
// Nesterov momentum and weight decay, with PyTorch's update rule: the first
// step's momentum buffer is the gradient itself. Its parameters are in one
// group or, made by NewSGDGroups or grown by AddParamGroup, in several,
// each with its own learning rate and weight decay.
type SGD struct {
	base
	// opts[g] are group g's hyper-parameters (base.groups[g].hyper points
	// into them); defaults are the constructor's, for AddParamGroup.
	opts     []*SGDOptions
	defaults SGDOptions
}

// NewSGD returns an SGD optimizer over params.
func NewSGD(params []*autograd.Var, opt SGDOptions) *SGD {
	s := newSGD(opt)
	s.base = newBase(params, s.hyper(opt))
	return s
}

// NewSGDGroups returns an SGD optimizer over parameter groups, as
// torch.optim.SGD(param_groups, ...): each group takes its
// hyper-parameters from opt, except its weight decay, which is always the
// group's own (ParamGroup.WeightDecay), and its learning rate where
// ParamGroup.LR is set. opt.WeightDecay must be zero, so that a group
// meant to have no decay cannot silently get one. The parameters are
// numbered in group order for the state dict.
//
// It panics, as for other programmer errors, if there are no groups, if
// opt.WeightDecay is not zero, or if a parameter is in two groups.
func NewSGDGroups(groups []ParamGroup, opt SGDOptions) *SGD {
	if len(groups) == 0 {
		panic("optim: NewSGDGroups without parameter groups")
	}
	if opt.WeightDecay != 0 {
		panic(fmt.Sprintf("optim: NewSGDGroups with SGDOptions.WeightDecay %g: set each ParamGroup's WeightDecay instead", opt.WeightDecay))
	}
	s := newSGD(opt)
	params := make([][]*autograd.Var, len(groups))
	hypers := make([]map[string]*float64, len(groups))
	for g, pg := range groups {
		params[g] = pg.Params
		hypers[g] = s.hyper(s.groupOptions(pg))
	}
	s.base = newGroupedBase(params, hypers)
	return s
}

func newSGD(opt SGDOptions) *SGD {
	if opt.Nesterov && (opt.Momentum <= 0 || opt.Dampening != 0) {
		panic("optim: Nesterov momentum requires a momentum and zero dampening")
	}
	return &SGD{defaults: opt}
}

// groupOptions returns the options of a group pg: the constructor's, with
// pg's weight decay and, if set, its learning rate.
func (s *SGD) groupOptions(pg ParamGroup) SGDOptions {
	o := s.defaults
	o.WeightDecay = pg.WeightDecay
	if pg.LR != 0 {
		o.LR = pg.LR
	}
	return o
}

// hyper keeps o as the options of the next group and returns its
// hyper-parameters by PyTorch name.
func (s *SGD) hyper(o SGDOptions) map[string]*float64 {
	p := &o
	s.opts = append(s.opts, p)
	return map[string]*float64{"lr": &p.LR, "momentum": &p.Momentum, "dampening": &p.Dampening, "weight_decay": &p.WeightDecay}
}

// AddParamGroup is GroupAdder's: pg gets the constructor's options, its
// own weight decay and, if set, its own learning rate.
func (s *SGD) AddParamGroup(pg ParamGroup) error {
	o := s.groupOptions(pg)
	if err := s.addGroup(pg.Params, nil); err != nil {
		return err
	}
	s.groups[len(s.groups)-1].hyper = s.hyper(o)
	return nil
}

// Step applies one SGD update to every group, each with its own
// hyper-parameters.
func (s *SGD) Step() {
	for g, gr := range s.groups {
		o := *s.opts[g]
		for i := gr.lo; i < gr.hi; i++ {
			s.update(i, o)
		}
	}
}

// update applies one SGD update with hyper-parameters o to parameter i.
func (s *SGD) update(i int, o SGDOptions) {
	p := s.params[i]
	g := p.Grad()
	if g == nil {
		return
	}
	w := p.Value()
	buf, hasBuf := s.state[i]["momentum_buffer"]
	if hasBuf && w.DType() == tensor.Float32 && g.IsContiguous() && w.IsContiguous() {
		// One pass over parameter, gradient and momentum buffer.
		sgd32(w.Float32s(), g.Float32s(), buf.Float32s(), float32(o.LR), float32(o.Momentum),
			float32(1-o.Dampening), float32(o.WeightDecay), o.Nesterov)
		return
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

// AdamOptions are torch.optim.Adam's hyper-parameters. Zero values of
// Beta1, Beta2 and Eps mean PyTorch's defaults 0.9, 0.999 and 1e-8.
type AdamOptions struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	AMSGrad                            bool
}

// Adam is the Adam optimizer; with decoupled weight decay it is AdamW.
// Its parameters are in one group or, made by NewAdamWGroups, in several,
// each with its own hyper-parameters.
type Adam struct {
	base
	// opts[g] are group g's hyper-parameters (base.groups[g].hyper points
	// into them); defaults are the constructor's, for AddParamGroup.
	opts      []*AdamOptions
	defaults  AdamOptions
	decoupled bool
}

// NewAdam returns an Adam optimizer (L2 weight decay added to the
// gradient).
func NewAdam(params []*autograd.Var, opt AdamOptions) *Adam {
	return newAdam(opt, false, []ParamGroup{{Params: params, WeightDecay: opt.WeightDecay}})
}

// NewAdamW returns an AdamW optimizer (weight decay applied to the
// parameters directly). PyTorch's default WeightDecay for AdamW is 0.01;
// pass it explicitly.
func NewAdamW(params []*autograd.Var, opt AdamOptions) *Adam {
	return newAdam(opt, true, []ParamGroup{{Params: params, WeightDecay: opt.WeightDecay}})
}

// NewAdamWGroups returns an AdamW optimizer over parameter groups, as
// torch.optim.AdamW(param_groups, ...): each group takes its
// hyper-parameters from opt, except its weight decay, which is always the
// group's own (ParamGroup.WeightDecay), and its learning rate where
// ParamGroup.LR is set. opt.WeightDecay must be zero, so that a group
// meant to have no decay cannot silently get one. The parameters are
// numbered in group order for the state dict.
//
// It panics, as for other programmer errors, if there are no groups, if
// opt.WeightDecay is not zero, or if a parameter is in two groups.
//
//	groups := optim.DecayGroups(nn.NamedParameters(model), 0.1, nil)
//	opt := optim.NewAdamWGroups(groups, optim.AdamOptions{LR: 6e-4, Beta2: 0.95})
func NewAdamWGroups(groups []ParamGroup, opt AdamOptions) *Adam {
	if len(groups) == 0 {
		panic("optim: NewAdamWGroups without parameter groups")
	}
	if opt.WeightDecay != 0 {
		panic(fmt.Sprintf("optim: NewAdamWGroups with AdamOptions.WeightDecay %g: set each ParamGroup's WeightDecay instead", opt.WeightDecay))
	}
	return newAdam(opt, true, groups)
}

// newAdam makes an Adam over groups whose options are opt's, with each
// group's weight decay and, where set, learning rate.
func newAdam(opt AdamOptions, decoupled bool, groups []ParamGroup) *Adam {
	if opt.Beta1 == 0 {
		opt.Beta1 = 0.9
	}
	if opt.Beta2 == 0 {
		opt.Beta2 = 0.999
	}
	if opt.Eps == 0 {
		opt.Eps = 1e-8
	}
	a := &Adam{defaults: opt, decoupled: decoupled}
	params := make([][]*autograd.Var, len(groups))
	hypers := make([]map[string]*float64, len(groups))
	for g, pg := range groups {
		params[g] = pg.Params
		hypers[g] = a.hyper(pg)
	}
	a.base = newGroupedBase(params, hypers)
	return a
}

// hyper keeps the options of a next group pg (the defaults, pg's weight
// decay and, if set, its learning rate) and returns its hyper-parameters
// by PyTorch name.
func (a *Adam) hyper(pg ParamGroup) map[string]*float64 {
	o := a.defaults
	o.WeightDecay = pg.WeightDecay
	if pg.LR != 0 {
		o.LR = pg.LR
	}
	a.opts = append(a.opts, &o)
	return map[string]*float64{"lr": &o.LR, "beta1": &o.Beta1, "beta2": &o.Beta2, "eps": &o.Eps, "weight_decay": &o.WeightDecay}
}

// AddParamGroup is GroupAdder's: pg gets the constructor's options, its
// own weight decay and, if set, its own learning rate.
func (a *Adam) AddParamGroup(pg ParamGroup) error {
	if err := a.addGroup(pg.Params, nil); err != nil {
		return err
	}
	a.groups[len(a.groups)-1].hyper = a.hyper(pg)
	return nil
}

// Step applies one Adam update to every group, each with its own
// hyper-parameters.
func (a *Adam) Step() {
	for g, gr := range a.groups {
		for i := gr.lo; i < gr.hi; i++ {
			a.update(i, *a.opts[g])
		}
	}
}

// update applies one Adam update with hyper-parameters o to parameter i.
func (a *Adam) update(i int, o AdamOptions) {
	p := a.params[i]
	g := p.Grad()
	if g == nil {
		return
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
	if a.decoupled && o.WeightDecay != 0 {
		w.Scale(1 - o.LR*o.WeightDecay)
	}
	// The scalar coefficients in float64, as PyTorch computes them from
	// its Python floats, each rounded to the tensor's precision only when
	// it is used (1-β₂ rounded from float64, never 1 minus a float32 β₂).
	t := step.Item()
	bc1 := 1 - math.Pow(o.Beta1, t)
	bc2sqrt := math.Sqrt(1 - math.Pow(o.Beta2, t))
	stepSize := o.LR / bc1
	if w.DType() == tensor.Float32 && g.IsContiguous() && w.IsContiguous() {
		var mx []float32
		if vmax != nil {
			mx = vmax.Float32s()
		}
		c := simd.Adam{
			Beta1: float32(o.Beta1), OneMinusBeta1: float32(1 - o.Beta1),
			Beta2: float32(o.Beta2), OneMinusBeta2: float32(1 - o.Beta2),
			Eps: float32(o.Eps), BC2Sqrt: float32(bc2sqrt), StepSize: float32(stepSize),
		}
		if !a.decoupled {
			c.WeightDecay = float32(o.WeightDecay)
		}
		simd.AdamF32(w.Float32s(), g.Float32s(), m.Float32s(), v.Float32s(), mx, c)
		return
	}
	if !a.decoupled && o.WeightDecay != 0 {
		g = new(tensor.Tensor).AddScaled(g, o.WeightDecay, w)
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

// StateBytes returns the bytes of o's per-parameter state (the "state."
// entries of its state dict: momentum buffers, Adam's moments and steps),
// for memory accounting.
func StateBytes(o Optimizer) int {
	n := 0
	for k, t := range o.StateDict() {
		if strings.HasPrefix(k, "state.") {
			n += t.Numel() * t.DType().Size()
		}
	}
	return n
}
