package distautograd_test

import (
	"context"
	"errors"
	"strings"
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

// TestLostGradientRefused: a call inside a context whose arguments carry
// no Var cannot bring the callee into the context; a result that needs
// gradients then comes back as an error naming the remedy, not as a leaf
// whose gradient would be lost without a word.
func TestLostGradientRefused(t *testing.T) {
	w := autograd.Param(tensor.Randn(tensor.NewRNG(3), 5, 2))
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
	defer distautograd.Release(ctx, id)
	_, err = lookup.Call(ctx, a, "worker1", []int64{4, 0})
	if err == nil || !strings.Contains(err.Error(), "Wrap") {
		t.Fatalf("a gradient that could not flow back: %v", err)
	}
	// A refusal, not bytes that did not decode.
	if !errors.Is(err, rpc.ErrRefused) || errors.Is(err, rpc.ErrMalformed) || strings.Contains(err.Error(), "malformed") {
		t.Fatalf("the refusal is labelled %v", err)
	}
	// Outside a context the same call is fine: nothing is recorded.
	if _, err := lookup.Call(testCtx(t), a, "worker1", []int64{4, 0}); err != nil {
		t.Fatal(err)
	}
}
