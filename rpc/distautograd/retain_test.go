package distautograd_test

import (
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
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
