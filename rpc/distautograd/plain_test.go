package distautograd_test

import (
	"context"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/tensor"
)

// TestPlainArgumentJoins: a call in a context whose only argument needs
// no gradient (the parameter-server tutorial's input batch) still brings
// the callee into the context: its result, computed from its own
// parameter, is recorded, and backward reaches that parameter with the
// gradient local autograd gives.
func TestPlainArgumentJoins(t *testing.T) {
	rng := tensor.NewRNG(5)
	xv := tensor.Randn(rng, 3, 4)
	w := autograd.Param(tensor.Randn(rng, 4, 2))
	var layer rpc.Fn[*distautograd.Var, *distautograd.Var]
	c := startCluster(t, 2, func(r int, reg *rpc.Registry) {
		layer, _ = rpc.Register(reg, "layer", func(_ context.Context, x *distautograd.Var) (*distautograd.Var, error) {
			if x.RequiresGrad() {
				t.Error("the plain argument arrived needing gradients")
			}
			return distautograd.Wrap(autograd.Tanh(autograd.MatMul(x.Var, w))), nil
		})
	})
	// Local reference.
	lw := autograd.Param(w.Value().Clone())
	if err := autograd.SumAll(autograd.Square(autograd.Tanh(autograd.MatMul(autograd.Const(xv), lw)))).Backward(nil); err != nil {
		t.Fatal(err)
	}

	a := c.agents[0]
	ctx, id, err := distautograd.NewContext(testCtx(t), a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := layer.Call(ctx, a, "worker1", distautograd.Wrap(autograd.Const(xv)))
	if err != nil {
		t.Fatal(err)
	}
	if !y.RequiresGrad() {
		t.Fatal("the result of worker1's parameter came back as a constant")
	}
	if err := distautograd.Backward(ctx, id, autograd.SumAll(autograd.Square(y.Var))); err != nil {
		t.Fatal(err)
	}
	grads, err := distautograd.GetGradients(distautograd.WithAgent(ctx, c.agents[1]), id)
	if err != nil {
		t.Fatal(err)
	}
	if g := grads[w]; g == nil || !tensor.Equal(g, lw.Grad()) {
		t.Errorf("worker1's gradient %v, local %v", grads[w], lw.Grad())
	}
	if w.Grad() != nil {
		t.Error("backward wrote Var.Grad")
	}
	distautograd.Release(ctx, id)
	waitNoContexts(t, c)
}
