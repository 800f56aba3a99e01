package optim

import (
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
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
