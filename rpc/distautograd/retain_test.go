package distautograd_test

import (
	"context"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/tensor"
)

// TestRetainGraph: passes through one context with RetainGraph add up
// in it, as local backward's passes add up in Grad: after two passes
// (the first retaining the graph) every worker's gradients equal two
// local passes' over the same composite model, bit for bit. A third pass,
// after a second that did not retain the graph, is refused with an error
// naming the option.
func TestRetainGraph(t *testing.T) {
	m := newModel()
	z := m.layer1(m.x1, m.layer2)
	loss := autograd.SumAll(autograd.Square(z))
	if err := loss.BackwardWith(nil, autograd.BackwardOptions{RetainGraph: true}); err != nil {
		t.Fatal(err)
	}
	if err := loss.Backward(nil); err != nil {
		t.Fatal(err)
	}
	want := map[*autograd.Var]*tensor.Tensor{m.x1: m.x1.Grad().Clone(), m.w1: m.w1.Grad().Clone(), m.w2: m.w2.Grad().Clone()}
	owner := map[*autograd.Var]int{m.x1: 0, m.w1: 1, m.w2: 2}
	for v := range want {
		v.ZeroGrad(true)
	}

	reg, f := registerModel(m)
	c := startCluster(t, 3, reg)
	a := c.agents[0]
	ctx, id, err := distautograd.NewContext(testCtx(t), a)
	if err != nil {
		t.Fatal(err)
	}
	zd, err := f.layer1.Call(ctx, a, "worker1", distautograd.Wrap(m.x1))
	if err != nil {
		t.Fatal(err)
	}
	dloss := autograd.SumAll(autograd.Square(zd.Var))
	if err := distautograd.BackwardWith(ctx, id, distautograd.Options{RetainGraph: true}, dloss); err != nil {
		t.Fatal(err)
	}
	if err := distautograd.Backward(ctx, id, dloss); err != nil {
		t.Fatalf("a second pass after one that retained the graph: %v", err)
	}
	for v, w := range want {
		got, err := distautograd.GetGradients(rpcCtx(ctx, c.agents[owner[v]]), id)
		if err != nil {
			t.Fatal(err)
		}
		if g := got[v]; g == nil || !tensor.Equal(g, w) {
			t.Errorf("worker%d: gradient after two passes %v, two local passes give %v", owner[v], g, w)
		}
	}
	err = distautograd.Backward(ctx, id, dloss)
	if err == nil || !strings.Contains(err.Error(), "RetainGraph") {
		t.Fatalf("a third pass after one that freed the graph: %v, want an error naming RetainGraph", err)
	}
	waitNoContexts(t, c)
}

// TestBackwardRRef: a loss computed by Remote lives on its owner;
// BackwardRRef from the context's creator starts the distributed pass
// there (PyTorch's RRef.backward(context_id)), reaching the owner's
// weight and, through the Remote call's argument, the creator's input,
// with local autograd's gradients. With no context it is ordinary
// backward on the owner, refused elsewhere.
func TestBackwardRRef(t *testing.T) {
	rng := tensor.NewRNG(11)
	x := autograd.Param(tensor.Randn(rng, 2, 3))
	w := autograd.Param(tensor.Randn(rng, 3, 3))
	lossOf := func(x *autograd.Var) *autograd.Var { return autograd.SumAll(autograd.Square(autograd.MatMul(x, w))) }
	if err := lossOf(x).Backward(nil); err != nil {
		t.Fatal(err)
	}
	wantX, wantW := x.Grad().Clone(), w.Grad().Clone()
	x.ZeroGrad(true)
	w.ZeroGrad(true)

	var loss rpc.Fn[*distautograd.Var, *distautograd.Var]
	c := startCluster(t, 2, func(_ int, reg *rpc.Registry) {
		var err error
		loss, err = rpc.Register(reg, "loss", func(_ context.Context, x *distautograd.Var) (*distautograd.Var, error) {
			return distautograd.Wrap(lossOf(x.Var)), nil
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
	lossRef, err := loss.Remote(ctx, a, "worker1", distautograd.Wrap(x))
	if err != nil {
		t.Fatal(err)
	}
	if err := distautograd.BackwardRRef(ctx, 0, lossRef, distautograd.Options{}); err == nil || !strings.Contains(err.Error(), "does not own") {
		t.Errorf("a local backward of a remote RRef: %v, want a refusal", err)
	}
	if err := distautograd.BackwardRRef(ctx, id, lossRef, distautograd.Options{}); err != nil {
		t.Fatal(err)
	}
	mine, err := distautograd.GetGradients(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := distautograd.GetGradients(rpcCtx(ctx, c.agents[1]), id)
	if err != nil {
		t.Fatal(err)
	}
	if g := mine[x]; g == nil || !tensor.Equal(g, wantX) {
		t.Errorf("the creator's input: %v, local %v", g, wantX)
	}
	if g := theirs[w]; g == nil || !tensor.Equal(g, wantW) {
		t.Errorf("the owner's weight: %v, local %v", g, wantW)
	}
	lossRef.Release()
	distautograd.Release(ctx, id)

	// No context: ordinary backward on the owner.
	local := rpc.NewRRef(a, distautograd.Wrap(lossOf(x)))
	if err := distautograd.BackwardRRef(testCtx(t), 0, local, distautograd.Options{}); err != nil {
		t.Fatal(err)
	}
	if g := x.Grad(); g == nil || !tensor.Equal(g, wantX) {
		t.Errorf("a local RRef's backward: Grad %v, want %v", g, wantX)
	}
	local.Release()
	waitNoContexts(t, c)
}
