package distoptim_test

import (
	"context"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/rpc/distoptim"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// TestParameterRRefs: the RRefs ParameterRRefs hands out are the module's
// parameters, in order, owned here, and a distributed optimizer built
// from them steps the module as optim.SGD steps a copy of it; a step
// waits for a reader inside ReadParams.
func TestParameterRRefs(t *testing.T) {
	distoptim.RegisterConstructor("params-test-sgd", func(ps []*autograd.Var) optim.Optimizer {
		return optim.NewSGD(ps, optim.SGDOptions{LR: 0.5})
	})
	build := func() *nn.Linear { return nn.NewLinear(tensor.NewRNG(4), 3, 2, true) }
	x := tensor.Randn(tensor.NewRNG(5), 4, 3)
	lossOf := func(m *nn.Linear) *autograd.Var {
		return autograd.SumAll(autograd.Square(nn.Call(m, autograd.Const(x))))
	}

	ref := build()
	if err := lossOf(ref).Backward(nil); err != nil {
		t.Fatal(err)
	}
	refOpt := optim.NewSGD(nn.Parameters(ref), optim.SGDOptions{LR: 0.5})
	refOpt.Step()
	refOpt.ZeroGrad(true)

	m := transport.NewInProc(1, transport.Faults{})
	defer m.Close()
	reg := rpc.NewRegistry()
	if err := distoptim.Register(reg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := rpc.Init(ctx, "", rpc.Options{Group: dist.FromEndpoint(m.Endpoints[0], nil, "inproc", 10*time.Second), Functions: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(context.Background(), false)

	mod := build()
	refs := distoptim.ParameterRRefs(a, mod)
	ps := nn.Parameters(mod)
	if len(refs) != len(ps) {
		t.Fatalf("%d RRefs for %d parameters", len(refs), len(ps))
	}
	for i, r := range refs {
		v, err := r.LocalValue(ctx)
		if err != nil || !r.IsOwner() || v != ps[i] {
			t.Fatalf("RRef %d: owner %v, value %p (%v), want parameter %d (%p)", i, r.IsOwner(), v, err, i, ps[i])
		}
	}
	opt, err := distoptim.New(ctx, a, "params-test-sgd", refs)
	if err != nil {
		t.Fatal(err)
	}
	cctx, id, err := distautograd.NewContext(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := distautograd.Backward(cctx, id, lossOf(mod)); err != nil {
		t.Fatal(err)
	}
	if err := opt.Step(cctx, id); err != nil {
		t.Fatal(err)
	}
	distautograd.Release(cctx, id)
	// A step waits for a reader of the parameters (ReadParams).
	cctx, id, err = distautograd.NewContext(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := distautograd.Backward(cctx, id, lossOf(mod)); err != nil {
		t.Fatal(err)
	}
	before := ps[0].Value().Clone()
	stepped := make(chan error, 1)
	distoptim.ReadParams(func() {
		go func() { stepped <- opt.Step(cctx, id) }()
		select {
		case err := <-stepped:
			t.Errorf("a step ran while ReadParams's fn held the parameters (%v)", err)
		case <-time.After(50 * time.Millisecond):
		}
		if !tensor.Equal(ps[0].Value(), before) {
			t.Errorf("a parameter changed inside ReadParams")
		}
	})
	if err := <-stepped; err != nil {
		t.Fatal(err)
	}
	distautograd.Release(cctx, id)
	if tensor.Equal(ps[0].Value(), before) {
		t.Fatal("the step after ReadParams changed nothing")
	}
	// The reference steps twice too.
	if err := lossOf(ref).Backward(nil); err != nil {
		t.Fatal(err)
	}
	refOpt.Step()
	for i, p := range nn.Parameters(ref) {
		if !tensor.Equal(ps[i].Value(), p.Value()) {
			t.Errorf("parameter %d after a step: %v, optim.SGD gives %v", i, ps[i].Value(), p.Value())
		}
	}
	opt.Release()
	for _, r := range refs {
		r.Release()
	}
}
