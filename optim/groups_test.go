package optim

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// groupParams are four parameters of unlike shapes, the same for a seed.
func groupParams(seed uint64) []*autograd.Var {
	rng := tensor.NewRNG(seed)
	return []*autograd.Var{
		autograd.Param(tensor.Randn(rng, 3, 4)), autograd.Param(tensor.Randn(rng, 4)),
		autograd.Param(tensor.Randn(rng, 5)), autograd.Param(tensor.Randn(rng, 2, 3)),
	}
}

// setGroupGrads gives ps step's gradients; parameter 2 has none at step 1.
func setGroupGrads(ps []*autograd.Var, step int) {
	rng := tensor.NewRNG(uint64(50 + step))
	for i, p := range ps {
		p.SetGrad(tensor.Randn(rng, p.Shape()...))
		if i == 2 && step == 1 {
			p.ZeroGrad(true)
		}
	}
}

func sameValues(what string, got, want []*autograd.Var) error {
	for i := range want {
		if !slices.Equal(got[i].Value().Values(), want[i].Value().Values()) {
			return fmt.Errorf("%s: parameter %d is %v, want %v", what, i, got[i].Value().Values(), want[i].Value().Values())
		}
	}
	return nil
}

// TestSGDGroups: SGD over two groups (their own learning rate and weight
// decay, momentum and the rest shared) steps each parameter bit for bit
// as a one-group SGD with that group's options steps it alone.
func TestSGDGroups(t *testing.T) {
	opt := SGDOptions{LR: 0.1, Momentum: 0.9, Dampening: 0.1}
	ps, a, b := groupParams(1), groupParams(1), groupParams(1)
	grouped := NewSGDGroups([]ParamGroup{{Params: ps[:2], WeightDecay: 0.05}, {Params: ps[2:], LR: 0.3}}, opt)
	wd := opt
	wd.WeightDecay = 0.05
	fast := opt
	fast.LR = 0.3
	alone := []*SGD{NewSGD(a[:2], wd), NewSGD(b[2:], fast)}
	for s := range 4 {
		setGroupGrads(ps, s)
		setGroupGrads(a, s)
		setGroupGrads(b, s)
		grouped.Step()
		alone[0].Step()
		alone[1].Step()
	}
	if err := sameValues("group 0", ps[:2], a[:2]); err != nil {
		t.Error(err)
	}
	if err := sameValues("group 1", ps[2:], b[2:]); err != nil {
		t.Error(err)
	}
	sd := grouped.StateDict()
	for k, want := range map[string]float64{
		"param_groups.0.lr": 0.1, "param_groups.0.weight_decay": 0.05, "param_groups.1.lr": 0.3,
		"param_groups.1.weight_decay": 0, "param_groups.1.momentum": 0.9, "param_groups.1.dampening": 0.1,
	} {
		if sd[k] == nil || sd[k].Item() != want {
			t.Errorf("%s = %v, want %v", k, sd[k], want)
		}
	}
	for name, f := range map[string]func(){
		"no groups":  func() { NewSGDGroups(nil, SGDOptions{LR: 1}) },
		"default wd": func() { NewSGDGroups([]ParamGroup{{Params: ps[:1]}}, SGDOptions{LR: 1, WeightDecay: 0.1}) },
		"shared":     func() { NewSGDGroups([]ParamGroup{{Params: ps[:2]}, {Params: ps[1:]}}, SGDOptions{LR: 1}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewSGDGroups, %s: accepted", name)
				}
			}()
			f()
		}()
	}
}

// TestAddParamGroup: an SGD or AdamW given its second group by
// AddParamGroup after some steps takes the same steps, state dict and
// hyper-parameters as one made with both groups (whose second group got
// no gradients until then), bit for bit; a scheduler-style SetGroupLR on
// the first group still reaches it after the groups grew; and a
// parameter already in a group is refused with ErrParamInTwoGroups,
// changing nothing.
func TestAddParamGroup(t *testing.T) {
	type maker struct {
		name   string
		make   func(groups []ParamGroup) Optimizer
		single func(ps []*autograd.Var) Optimizer
	}
	for _, m := range []maker{
		{"sgd", func(gs []ParamGroup) Optimizer { return NewSGDGroups(gs, SGDOptions{LR: 0.1, Momentum: 0.9}) },
			func(ps []*autograd.Var) Optimizer {
				return NewSGD(ps, SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: 0.05})
			}},
		{"adamw", func(gs []ParamGroup) Optimizer { return NewAdamWGroups(gs, AdamOptions{LR: 0.01, Beta2: 0.95}) },
			func(ps []*autograd.Var) Optimizer {
				return NewAdamW(ps, AdamOptions{LR: 0.01, Beta2: 0.95, WeightDecay: 0.05})
			}},
	} {
		t.Run(m.name, func(t *testing.T) {
			second := ParamGroup{WeightDecay: 0.2, LR: 0.05}
			ref := groupParams(2)
			refOpt := m.make([]ParamGroup{{Params: ref[:2], WeightDecay: 0.05}, {Params: ref[2:], WeightDecay: second.WeightDecay, LR: second.LR}})
			ps := groupParams(2)
			opt := m.single(ps[:2])
			for s := range 5 {
				if s == 2 {
					second.Params = ps[2:]
					if err := opt.(GroupAdder).AddParamGroup(second); err != nil {
						t.Fatal(err)
					}
				}
				setGroupGrads(ref, s)
				setGroupGrads(ps, s)
				if s < 2 {
					for _, p := range ref[2:] {
						p.ZeroGrad(true)
					}
				}
				opt.Step()
				refOpt.Step()
			}
			if err := sameValues("after AddParamGroup", ps, ref); err != nil {
				t.Fatal(err)
			}
			got, want := opt.StateDict(), refOpt.StateDict()
			if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
				t.Fatalf("state dict keys %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
			}
			for k, w := range want {
				if !slices.Equal(got[k].Values(), w.Values()) {
					t.Errorf("%s = %v, want %v", k, got[k].Values(), w.Values())
				}
			}
			gs := opt.(Groups)
			gs.SetGroupLR(0, 0.5)
			if gs.GroupLR(0) != 0.5 || gs.GroupLR(1) != second.LR || opt.StateDict()["param_groups.0.lr"].Item() != 0.5 {
				t.Errorf("after SetGroupLR(0, 0.5): rates %v %v", gs.GroupLR(0), gs.GroupLR(1))
			}
			err := opt.(GroupAdder).AddParamGroup(ParamGroup{Params: []*autograd.Var{autograd.Param(tensor.Zeros(2)), ps[1]}})
			if !errors.Is(err, ErrParamInTwoGroups) {
				t.Errorf("AddParamGroup of a parameter in group 0: %v, want ErrParamInTwoGroups", err)
			}
			if gs.NumGroups() != 2 || len(opt.Params()) != len(ps) {
				t.Errorf("a refused group changed the optimizer: %d groups, %d parameters", gs.NumGroups(), len(opt.Params()))
			}
		})
	}
}
