package distautograd_test

import (
	"context"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/tensor"
)

// TestToHereRecorded is PyTorch's RPC pipeline tutorial in miniature: the
// master holds the input in an RRef; shard 1 is made to compute its
// activation with Remote (fetching the input with ToHere) and keeps it
// in an RRef; shard 2 is called with that RRef and fetches the
// activation with ToHere inside its handler. No call's arguments hold a
// Var: the context rides on every call, and ToHere records the value it
// fetches, so backward reaches both shards' parameters with the
// gradients local autograd gives the same composite model.
func TestToHereRecorded(t *testing.T) {
	rng := tensor.NewRNG(5)
	x := tensor.Randn(rng, 3, 4)
	w1 := autograd.Param(tensor.Randn(rng, 4, 4))
	w2 := autograd.Param(tensor.Randn(rng, 4, 2))
	shard1 := func(x *autograd.Var) *autograd.Var { return autograd.Tanh(autograd.MatMul(x, w1)) }
	shard2 := func(y *autograd.Var) *autograd.Var { return autograd.MatMul(y, w2) }
	lossOf := func(z *autograd.Var) *autograd.Var { return autograd.SumAll(autograd.Square(z)) }

	if err := lossOf(shard2(shard1(autograd.Const(x)))).Backward(nil); err != nil {
		t.Fatal(err)
	}
	want1, want2 := w1.Grad().Clone(), w2.Grad().Clone()
	w1.ZeroGrad(true)
	w2.ZeroGrad(true)

	var fwd1, fwd2 rpc.Fn[*rpc.RRef[*distautograd.Var], *distautograd.Var]
	c := startCluster(t, 3, func(_ int, reg *rpc.Registry) {
		var err error
		fwd1, err = rpc.Register(reg, "shard1.forward", func(ctx context.Context, in *rpc.RRef[*distautograd.Var]) (*distautograd.Var, error) {
			x, err := in.ToHere(ctx)
			if err != nil {
				return nil, err
			}
			return distautograd.Wrap(shard1(x.Var)), nil
		})
		if err != nil {
			panic(err)
		}
		fwd2, err = rpc.Register(reg, "shard2.forward", func(ctx context.Context, in *rpc.RRef[*distautograd.Var]) (*distautograd.Var, error) {
			y, err := in.ToHere(ctx)
			if err != nil {
				return nil, err
			}
			return distautograd.Wrap(shard2(y.Var)), nil
		})
		if err != nil {
			panic(err)
		}
	})
	a := c.agents[0]
	ctx, id, err := distautograd.NewContext(testCtx(t), a)
	if err != nil {
		t.Fatal(err)
	}
	xRef := rpc.NewRRef(a, distautograd.Wrap(autograd.Const(x)))
	yRef, err := fwd1.Remote(ctx, a, "worker1", xRef)
	if err != nil {
		t.Fatal(err)
	}
	z, err := fwd2.Call(ctx, a, "worker2", yRef)
	if err != nil {
		t.Fatal(err)
	}
	if err := distautograd.Backward(ctx, id, lossOf(z.Var)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		name string
		rank int
		w    *autograd.Var
		want *tensor.Tensor
	}{{"shard 1's weight", 1, w1, want1}, {"shard 2's weight", 2, w2, want2}} {
		got, err := distautograd.GetGradients(rpcCtx(ctx, c.agents[p.rank]), id)
		if err != nil {
			t.Fatal(err)
		}
		if g := got[p.w]; g == nil || !tensor.Equal(g, p.want) {
			t.Errorf("%s: distributed gradient %v, local %v", p.name, g, p.want)
		}
		if p.w.Grad() != nil {
			t.Errorf("%s: Grad set by a distributed pass (the gradients belong to the context)", p.name)
		}
	}
	yRef.Release()
	xRef.Release()
	if err := distautograd.Release(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitNoContexts(t, c)
}

// TestLeafHooksFire: a distributed pass accumulates a leaf's gradient as
// ordinary backward does, hooks included: the leaf's tensor hooks change
// the gradient on its way into the context, and its grad-ready hooks
// fire once, told the context's store, where the gradient is (not in
// Grad). DDP's reducer depends on the second.
func TestLeafHooksFire(t *testing.T) {
	rng := tensor.NewRNG(9)
	w := autograd.Param(tensor.Randn(rng, 4, 3))
	x := tensor.Randn(rng, 2, 4)
	lossOf := func(y *autograd.Var) *autograd.Var { return autograd.SumAll(autograd.Square(y)) }
	if err := lossOf(autograd.MatMul(autograd.Const(x), w)).Backward(nil); err != nil {
		t.Fatal(err)
	}
	want := new(tensor.Tensor).Add(w.Grad(), w.Grad()) // the tensor hook doubles it
	w.ZeroGrad(true)
	w.RegisterHook(func(g *tensor.Tensor) *tensor.Tensor { return new(tensor.Tensor).Add(g, g) })
	var fired int
	var seen *tensor.Tensor
	w.RegisterGradReadyHookIn(func(v *autograd.Var, s autograd.GradStore) {
		fired++
		seen = s.Grad(v).Clone()
	})
	var fwd rpc.Fn[*distautograd.Var, *distautograd.Var]
	c := startCluster(t, 2, func(_ int, reg *rpc.Registry) {
		var err error
		fwd, err = rpc.Register(reg, "fwd", func(_ context.Context, x *distautograd.Var) (*distautograd.Var, error) {
			return distautograd.Wrap(autograd.MatMul(x.Var, w)), nil
		})
		if err != nil {
			panic(err)
		}
	})
	a := c.agents[0]
	ctx, id, err := distautograd.NewContext(testCtx(t), a)
	if err != nil {
		t.Fatal(err)
	}
	defer distautograd.Release(ctx, id)
	y, err := fwd.Call(ctx, a, "worker1", distautograd.Wrap(autograd.Const(x)))
	if err != nil {
		t.Fatal(err)
	}
	if err := distautograd.Backward(ctx, id, lossOf(y.Var)); err != nil {
		t.Fatal(err)
	}
	got, err := distautograd.GetGradients(rpcCtx(ctx, c.agents[1]), id)
	if err != nil {
		t.Fatal(err)
	}
	if g := got[w]; g == nil || !tensor.Equal(g, want) {
		t.Errorf("the context's gradient %v, want the hooked local one %v", g, want)
	}
	if fired != 1 || seen == nil || !tensor.Equal(seen, want) {
		t.Errorf("grad-ready hook fired %d times, saw %v in its store; want once, seeing %v", fired, seen, want)
	}
	if w.Grad() != nil {
		t.Errorf("Grad set by a distributed pass")
	}
}
