package optim

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

func TestSkipsParametersWithoutGradient(t *testing.T) {
	a := autograd.Param(tensor.FromFloat32([]float32{1, 2}))
	b := autograd.Param(tensor.FromFloat32([]float32{3}))
	a.SetGrad(tensor.FromFloat32([]float32{1, 1}))
	for _, opt := range []Optimizer{
		NewSGD([]*autograd.Var{a, b}, SGDOptions{LR: 0.5, Momentum: 0.9}),
		NewAdam([]*autograd.Var{a, b}, AdamOptions{LR: 0.5}),
	} {
		opt.Step()
		if b.Value().At(0) != 3 {
			t.Fatalf("%T changed a parameter that has no gradient", opt)
		}
		if _, ok := opt.StateDict()["state.1.exp_avg"]; ok {
			t.Fatalf("%T made state for a parameter that has no gradient", opt)
		}
	}
	if a.Value().At(0) >= 1 {
		t.Fatal("parameter with a gradient did not move")
	}
}

func TestStateDictKeysAndErrors(t *testing.T) {
	p := autograd.Param(tensor.Zeros(3))
	p.SetGrad(tensor.FromFloat32([]float32{1, 2, 3}))
	opt := NewAdamW([]*autograd.Var{p}, AdamOptions{LR: 0.1, WeightDecay: 0.01})
	opt.Step()
	sd := opt.StateDict()
	for _, k := range []string{"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq", "param_groups.0.lr", "param_groups.0.weight_decay"} {
		if sd[k] == nil {
			t.Fatalf("state dict lacks %s", k)
		}
	}
	if sd["state.0.step"].Item() != 1 || sd["param_groups.0.lr"].Item() != 0.1 {
		t.Fatalf("step %v lr %v", sd["state.0.step"], sd["param_groups.0.lr"])
	}
	other := NewAdamW([]*autograd.Var{p}, AdamOptions{LR: 1})
	if err := other.LoadStateDict(sd); err != nil || other.LR() != 0.1 {
		t.Fatalf("load: %v, lr %v", err, other.LR())
	}
	bad := map[string]*tensor.Tensor{"state.0.exp_avg": tensor.Zeros(2)}
	if err := other.LoadStateDict(bad); err == nil || !strings.Contains(err.Error(), "shape") {
		t.Fatalf("wrong shape accepted: %v", err)
	}
	bad = map[string]*tensor.Tensor{"state.7.exp_avg": tensor.Zeros(3)}
	if err := other.LoadStateDict(bad); err == nil {
		t.Fatal("state for a missing parameter accepted")
	}
}

func TestNesterovNeedsMomentum(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Nesterov without momentum accepted")
		}
	}()
	NewSGD(nil, SGDOptions{LR: 1, Nesterov: true})
}

// named returns parameters of the given shapes named n0, n1, ...
func named(shapes ...[]int) []nn.Named[*autograd.Var] {
	var out []nn.Named[*autograd.Var]
	for i, s := range shapes {
		out = append(out, nn.Named[*autograd.Var]{Name: "n" + strconv.Itoa(i), Value: autograd.Param(tensor.Zeros(s...))})
	}
	return out
}

func TestDecayGroups(t *testing.T) {
	ps := named([]int{3, 2}, []int{2}, []int{}, []int{4, 3}, []int{2, 2, 2}, []int{5})
	groups := DecayGroups(ps, 0.1, func(name string) bool { return name == "n3" })
	if len(groups) != 2 || groups[0].WeightDecay != 0.1 || groups[1].WeightDecay != 0 || groups[0].LR != 0 || groups[1].LR != 0 {
		t.Fatalf("groups %+v", groups)
	}
	want := [][]int{{0, 4}, {1, 2, 3, 5}}
	for g, idx := range want {
		if len(groups[g].Params) != len(idx) {
			t.Fatalf("group %d has %d parameters, want %v", g, len(groups[g].Params), idx)
		}
		for j, i := range idx {
			if groups[g].Params[j] != ps[i].Value {
				t.Fatalf("group %d parameter %d is not n%d", g, j, i)
			}
		}
	}
	if g := DecayGroups(ps, 0.1, nil); len(g[0].Params) != 3 {
		t.Fatalf("without a predicate the decay group has %d parameters, want 3", len(g[0].Params))
	}
}

func TestAdamWGroupsHyperParameters(t *testing.T) {
	ps := named([]int{2, 2}, []int{2}, []int{3})
	opt := NewAdamWGroups([]ParamGroup{
		{Params: []*autograd.Var{ps[0].Value}, WeightDecay: 0.1},
		{Params: []*autograd.Var{ps[1].Value, ps[2].Value}, LR: 0.5},
	}, AdamOptions{LR: 0.01, Beta2: 0.95})
	if opt.NumGroups() != 2 || opt.GroupLR(0) != 0.01 || opt.GroupLR(1) != 0.5 || opt.LR() != 0.01 {
		t.Fatalf("groups %d, lrs %v %v, LR %v", opt.NumGroups(), opt.GroupLR(0), opt.GroupLR(1), opt.LR())
	}
	if len(opt.Params()) != 3 || opt.Params()[2] != ps[2].Value || len(opt.GroupParams(1)) != 2 {
		t.Fatal("parameters not numbered in group order")
	}
	sd := opt.StateDict()
	for k, want := range map[string]float64{
		"param_groups.0.weight_decay": 0.1, "param_groups.1.weight_decay": 0,
		"param_groups.0.beta2": 0.95, "param_groups.1.beta2": 0.95, "param_groups.1.eps": 1e-8,
	} {
		if sd[k] == nil || sd[k].Item() != want {
			t.Fatalf("%s = %v, want %v", k, sd[k], want)
		}
	}
	opt.SetLR(0.2)
	if opt.GroupLR(0) != 0.2 || opt.GroupLR(1) != 0.2 {
		t.Fatal("SetLR did not set every group's rate")
	}
	// A group without weight decay leaves a zero gradient's parameter
	// alone; the other shrinks it.
	for _, p := range ps {
		p.Value.Value().Fill(1)
		p.Value.SetGrad(tensor.Zeros(p.Value.Value().Shape()...))
	}
	opt.Step()
	if ps[0].Value.Value().At(0, 0) != float64(float32(1-0.2*0.1)) || ps[1].Value.Value().At(0) != 1 {
		t.Fatalf("after a step with zero gradients: %v %v", ps[0].Value.Value(), ps[1].Value.Value())
	}
}

func TestAdamWGroupsMisuse(t *testing.T) {
	p := autograd.Param(tensor.Zeros(2))
	for name, f := range map[string]func(){
		"no groups": func() { NewAdamWGroups(nil, AdamOptions{LR: 1}) },
		"default wd": func() {
			NewAdamWGroups([]ParamGroup{{Params: []*autograd.Var{p}}}, AdamOptions{LR: 1, WeightDecay: 0.01})
		},
		"shared param": func() {
			NewAdamWGroups([]ParamGroup{{Params: []*autograd.Var{p}}, {Params: []*autograd.Var{p}}}, AdamOptions{})
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s accepted", name)
				}
			}()
			f()
		}()
	}
}

// TestGroupsStateDictRoundTrip: a grouped AdamW saved after some steps and
// loaded into a fresh one continues exactly as the original; loading into
// differently made groups is refused; a one-group dict is what it was
// before groups existed.
func TestGroupsStateDictRoundTrip(t *testing.T) {
	build := func(split int, lr float64) ([]*autograd.Var, *Adam) {
		ps := []*autograd.Var{
			autograd.Param(tensor.FromFloat32([]float32{1, 2, 3, 4}).Reshape(2, 2)),
			autograd.Param(tensor.FromFloat32([]float32{5, 6})),
			autograd.Param(tensor.FromFloat32([]float32{7, 8})),
		}
		return ps, NewAdamWGroups([]ParamGroup{{Params: ps[:split], WeightDecay: 0.1}, {Params: ps[split:], LR: 2 * lr}}, AdamOptions{LR: lr})
	}
	step := func(ps []*autograd.Var, opt Optimizer, k int) {
		for i, p := range ps {
			g := tensor.Zeros(p.Value().Shape()...)
			g.Fill(float64(i+k) - 1.5)
			p.SetGrad(g)
		}
		opt.Step()
	}
	ps, opt := build(1, 0.1)
	step(ps, opt, 0)
	step(ps, opt, 1)
	sd := opt.StateDict()
	if v := sd["param_groups.1.params"]; v == nil || v.DType() != tensor.Int64 || v.Values()[0] != 1 || v.Values()[1] != 2 {
		t.Fatalf("param_groups.1.params = %v", v)
	}
	ps2, opt2 := build(1, 3)
	if err := opt2.LoadStateDict(sd); err != nil {
		t.Fatal(err)
	}
	if opt2.GroupLR(0) != 0.1 || opt2.GroupLR(1) != 0.2 {
		t.Fatalf("loaded rates %v %v", opt2.GroupLR(0), opt2.GroupLR(1))
	}
	for i := range ps {
		ps2[i].Value().Copy(ps[i].Value())
	}
	step(ps, opt, 2)
	step(ps2, opt2, 2)
	for i := range ps {
		if relErrT(ps[i].Value(), ps2[i].Value()) != 0 {
			t.Fatalf("parameter %d after resuming: %v, uninterrupted %v", i, ps2[i].Value(), ps[i].Value())
		}
	}
	_, other := build(2, 0.1)
	if err := other.LoadStateDict(sd); err == nil || !strings.Contains(err.Error(), "groups made differently") {
		t.Fatalf("groups made differently: %v", err)
	}
	single := NewAdamW(ps[:1], AdamOptions{LR: 0.1})
	if err := single.LoadStateDict(sd); err == nil || !strings.Contains(err.Error(), "group 1") {
		t.Fatalf("two groups into one: %v", err)
	}
	for k := range single.StateDict() {
		if strings.HasSuffix(k, ".params") {
			t.Fatalf("one-group state dict has %s", k)
		}
	}
}

func relErrT(a, b *tensor.Tensor) float64 {
	var d float64
	for i, v := range a.Values() {
		d = math.Max(d, math.Abs(v-b.Values()[i]))
	}
	return d
}

func TestSchedulersScaleEachGroup(t *testing.T) {
	ps := named([]int{2}, []int{2})
	newOpt := func() *Adam {
		return NewAdamWGroups([]ParamGroup{{Params: []*autograd.Var{ps[0].Value}}, {Params: []*autograd.Var{ps[1].Value}, LR: 3}}, AdamOptions{LR: 1})
	}
	opt := newOpt()
	s := NewStepLR(opt, 1, 0.5)
	s.Step()
	if opt.GroupLR(0) != 0.5 || opt.GroupLR(1) != 1.5 {
		t.Fatalf("StepLR rates %v %v", opt.GroupLR(0), opt.GroupLR(1))
	}
	opt = newOpt()
	w := NewWarmupCosine(opt, 4, 8, 0.1)
	if opt.GroupLR(0) != 0 || opt.GroupLR(1) != 0 {
		t.Fatal("warm-up does not start at rate 0")
	}
	w.Step()
	if opt.GroupLR(0) != 0.25 || opt.GroupLR(1) != 0.75 {
		t.Fatalf("after one warm-up step: %v %v", opt.GroupLR(0), opt.GroupLR(1))
	}
	w.SetEpoch(4)
	if opt.GroupLR(0) != 1 || opt.GroupLR(1) != 3 || w.Epoch() != 4 {
		t.Fatalf("at the end of warm-up: %v %v", opt.GroupLR(0), opt.GroupLR(1))
	}
	w.SetEpoch(6)
	if math.Abs(opt.GroupLR(0)-0.55) > 1e-15 {
		t.Fatalf("half-way down: %v, want 0.55", opt.GroupLR(0))
	}
	for _, n := range []int{8, 9, 100} {
		w.SetEpoch(n)
		if math.Abs(opt.GroupLR(0)-0.1) > 1e-15 || math.Abs(opt.GroupLR(1)-0.3) > 1e-15 {
			t.Fatalf("after %d steps: %v %v, want the floor", n, opt.GroupLR(0), opt.GroupLR(1))
		}
	}
}

func TestWarmupCosineEdges(t *testing.T) {
	opt := NewSGD(nil, SGDOptions{LR: 2})
	w := NewWarmupCosine(opt, 3, 3, 0) // all warm-up, then the floor
	if opt.LR() != 0 {
		t.Fatalf("rate %v at step 0", opt.LR())
	}
	for n, want := range []float64{0, 1.0 / 3, 2.0 / 3, 1, 0, 0} {
		if got := w.Factor(n); math.Abs(got-want) > 1e-15 {
			t.Fatalf("Factor(%d) = %v, want %v", n, got, want)
		}
	}
	if got := NewWarmupCosine(opt, 0, 0, 0.5).Factor(0); got != 1 {
		t.Fatalf("Factor(0) without warm-up or decay = %v", got)
	}
	for _, bad := range [][3]float64{{-1, 5, 0}, {6, 5, 0}, {0, 5, -0.1}, {0, 5, 1.5}, {0, 5, math.NaN()}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewWarmupCosine(%v) accepted", bad)
				}
			}()
			NewWarmupCosine(opt, int(bad[0]), int(bad[1]), bad[2])
		}()
	}
}
