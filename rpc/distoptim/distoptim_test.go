package distoptim_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/rpc/distoptim"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

type params struct{ x, w1, w2 *autograd.Var }

func newParams() *params {
	rng := tensor.NewRNG(7)
	return &params{autograd.Param(tensor.Randn(rng, 2, 3)), autograd.Param(tensor.Randn(rng, 3, 3)), autograd.Param(tensor.Randn(rng, 3, 3))}
}

func TestStepMatchesLocal(t *testing.T) {
	distoptim.RegisterConstructor("sgd", func(ps []*autograd.Var) optim.Optimizer {
		return optim.NewSGD(ps, optim.SGDOptions{LR: 0.1, Momentum: 0.9})
	})
	forward := func(p *params, x *autograd.Var, mid func(*autograd.Var) *autograd.Var) *autograd.Var {
		return autograd.SumAll(autograd.Square(mid(x)))
	}
	// Local: three steps of SGD on one process.
	lp := newParams()
	lopt := optim.NewSGD([]*autograd.Var{lp.x, lp.w1, lp.w2}, optim.SGDOptions{LR: 0.1, Momentum: 0.9})
	for range 3 {
		lopt.ZeroGrad(true)
		loss := forward(lp, lp.x, func(x *autograd.Var) *autograd.Var {
			return autograd.MatMul(autograd.Tanh(autograd.MatMul(x, lp.w1)), lp.w2)
		})
		if err := loss.Backward(nil); err != nil {
			t.Fatal(err)
		}
		lopt.Step()
	}

	// Distributed: x on worker0, w1 on worker1, w2 on worker2.
	dp := newParams()
	byName := map[string]*autograd.Var{"w1": dp.w1, "w2": dp.w2}
	var layer2, layer1 rpc.Fn[*distautograd.Var, *distautograd.Var]
	var param rpc.Fn[string, *autograd.Var]
	m := transport.NewInProc(3, transport.Faults{})
	agents := make([]*rpc.Agent, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		reg := rpc.NewRegistry()
		if err := distoptim.Register(reg); err != nil {
			t.Fatal(err)
		}
		param, _ = rpc.Register(reg, "param", func(_ context.Context, n string) (*autograd.Var, error) { return byName[n], nil })
		layer2, _ = rpc.Register(reg, "layer2", func(_ context.Context, h *distautograd.Var) (*distautograd.Var, error) {
			return distautograd.Wrap(autograd.MatMul(h.Var, dp.w2)), nil
		})
		layer1, _ = rpc.Register(reg, "layer1", func(ctx context.Context, x *distautograd.Var) (*distautograd.Var, error) {
			a, _ := rpc.AgentFrom(ctx)
			return layer2.Call(ctx, a, "worker2", distautograd.Wrap(autograd.Tanh(autograd.MatMul(x.Var, dp.w1))))
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			a, err := rpc.Init(ctx, "", rpc.Options{Group: dist.FromEndpoint(m.Endpoints[r], nil, "inproc", 10*time.Second), Functions: reg})
			if err != nil {
				t.Error(err)
			}
			agents[r] = a
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, a := range agents {
			if a != nil {
				a.Shutdown(context.Background(), false)
			}
		}
		m.Close()
	})
	if t.Failed() {
		t.FailNow()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := agents[0]
	r1, err := param.Remote(ctx, a, "worker1", "w1")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := param.Remote(ctx, a, "worker2", "w2")
	if err != nil {
		t.Fatal(err)
	}
	opt, err := distoptim.New(ctx, a, "sgd", []*rpc.RRef[*autograd.Var]{rpc.NewRRef(a, dp.x), r1, r2})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Release()
	for range 3 {
		cctx, id, err := distautograd.NewContext(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		loss := forward(dp, dp.x, func(x *autograd.Var) *autograd.Var {
			y, err := layer1.Call(cctx, a, "worker1", distautograd.Wrap(x))
			if err != nil {
				t.Fatal(err)
			}
			return y.Var
		})
		if err := distautograd.Backward(cctx, id, loss); err != nil {
			t.Fatal(err)
		}
		if err := opt.Step(cctx, id); err != nil {
			t.Fatal(err)
		}
		distautograd.Release(cctx, id)
	}
	for n, pair := range map[string][2]*autograd.Var{"x": {lp.x, dp.x}, "w1": {lp.w1, dp.w1}, "w2": {lp.w2, dp.w2}} {
		if !tensor.Equal(pair[0].Value(), pair[1].Value()) {
			t.Errorf("%s after 3 steps: distributed %v, local %v", n, pair[1].Value(), pair[0].Value())
		}
		if pair[1].Grad() != nil {
			t.Errorf("%s: the distributed step left a Grad", n)
		}
	}
	if err := opt.Step(ctx, 12345); err == nil {
		t.Error("a step with an unknown context did not fail")
	}
}
