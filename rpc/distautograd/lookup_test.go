package distautograd_test

import (
	"context"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/tensor"
)

// TestNoGradArgumentCarriesContext is the embedding lookup of PyTorch's
// model-parallel RNN: the caller sends indices, which need no gradient,
// and the callee's result depends on its own parameter. The indices'
// Var carries the context, so the callee records its result in it and
// its parameter gets the gradient local autograd gives it.
func TestNoGradArgumentCarriesContext(t *testing.T) {
	w := autograd.Param(tensor.Randn(tensor.NewRNG(3), 5, 2))
	idx := tensor.FromInt64([]int64{4, 0, 4, 1}, 4)
	lossOf := func(e *autograd.Var) *autograd.Var { return autograd.SumAll(autograd.Square(e)) }
	if err := lossOf(autograd.Embedding(idx, w)).Backward(nil); err != nil {
		t.Fatal(err)
	}
	want := w.Grad()

	var lookup rpc.Fn[*distautograd.Var, *distautograd.Var]
	c := startCluster(t, 2, func(_ int, reg *rpc.Registry) {
		var err error
		lookup, err = rpc.Register(reg, "lookup", func(_ context.Context, x *distautograd.Var) (*distautograd.Var, error) {
			return distautograd.Wrap(autograd.Embedding(x.Value(), w)), nil
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
	e, err := lookup.Call(ctx, a, "worker1", distautograd.Wrap(autograd.Const(idx)))
	if err != nil {
		t.Fatal(err)
	}
	if err := distautograd.Backward(ctx, id, lossOf(e.Var)); err != nil {
		t.Fatal(err)
	}
	got, err := distautograd.GetGradients(rpcCtx(ctx, c.agents[1]), id)
	if err != nil {
		t.Fatal(err)
	}
	if g := got[w]; g == nil || !tensor.Equal(g, want) {
		t.Errorf("worker1's parameter: distributed gradient %v, local %v", g, want)
	}
	mine, err := distautograd.GetGradients(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(mine) != 0 {
		t.Errorf("worker0 holds gradients of %d leaves, want none (the result came back as a leaf?)", len(mine))
	}
	if err := distautograd.Release(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitNoContexts(t, c)
}

// TestPlainArgumentsCarryContext: a call made in a context whose
// arguments hold no Var (plain indices) still brings the callee into the
// context, as PyTorch attaches the context to every RPC made in one: the
// result, computed from the callee's parameter, is recorded, and the
// parameter gets the gradient local autograd gives it. Outside a context
// the same call records nothing.
func TestPlainArgumentsCarryContext(t *testing.T) {
	w := autograd.Param(tensor.Randn(tensor.NewRNG(3), 5, 2))
	idx := []int64{4, 0, 4}
	lossOf := func(e *autograd.Var) *autograd.Var { return autograd.SumAll(autograd.Square(e)) }
	if err := lossOf(autograd.Embedding(tensor.FromInt64(idx, len(idx)), w)).Backward(nil); err != nil {
		t.Fatal(err)
	}
	want := w.Grad().Clone()
	var lookup rpc.Fn[[]int64, *distautograd.Var]
	c := startCluster(t, 2, func(_ int, reg *rpc.Registry) {
		var err error
		lookup, err = rpc.Register(reg, "lookupPlain", func(_ context.Context, idx []int64) (*distautograd.Var, error) {
			return distautograd.Wrap(autograd.Embedding(tensor.FromInt64(idx, len(idx)), w)), nil
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
	e, err := lookup.Call(ctx, a, "worker1", idx)
	if err != nil {
		t.Fatal(err)
	}
	if err := distautograd.Backward(ctx, id, lossOf(e.Var)); err != nil {
		t.Fatal(err)
	}
	got, err := distautograd.GetGradients(rpcCtx(ctx, c.agents[1]), id)
	if err != nil {
		t.Fatal(err)
	}
	if g := got[w]; g == nil || !tensor.Equal(g, want) {
		t.Errorf("worker1's parameter: distributed gradient %v, local %v", g, want)
	}
	if err := distautograd.Release(ctx, id); err != nil {
		t.Fatal(err)
	}
	// Outside a context the result is a plain leaf that needs gradients.
	e, err = lookup.Call(testCtx(t), a, "worker1", idx)
	if err != nil {
		t.Fatal(err)
	}
	if !e.RequiresGrad() || !e.IsLeaf() {
		t.Errorf("outside a context: requires grad %v, leaf %v; want a leaf that requires gradients", e.RequiresGrad(), e.IsLeaf())
	}
	waitNoContexts(t, c)
}
