package distautograd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/tensor"
)

// stall is an identity whose backward signals started and then waits for
// release: a worker busy in backward.
type stall struct{ started, release chan struct{} }

func (s *stall) Forward(in []*tensor.Tensor) *tensor.Tensor { return in[0] }
func (s *stall) Backward(g *tensor.Tensor) []*tensor.Tensor {
	close(s.started)
	<-s.release
	return []*tensor.Tensor{g}
}

// TestWorkerDiesDuringBackward: worker2 dies while it runs its part of
// backward; Backward on worker0 fails within 2 s naming it, and the
// living workers hold no context afterwards.
func TestWorkerDiesDuringBackward(t *testing.T) {
	st := &stall{started: make(chan struct{}), release: make(chan struct{})}
	defer close(st.release)
	var hop1, hop2 rpc.Fn[*distautograd.Var, *distautograd.Var]
	c := startCluster(t, 3, func(r int, reg *rpc.Registry) {
		hop2, _ = rpc.Register(reg, "hop2", func(_ context.Context, x *distautograd.Var) (*distautograd.Var, error) {
			return distautograd.Wrap(autograd.Apply(st, autograd.Tanh(x.Var))), nil
		})
		hop1, _ = rpc.Register(reg, "hop1", func(ctx context.Context, x *distautograd.Var) (*distautograd.Var, error) {
			a, _ := rpc.AgentFrom(ctx)
			return hop2.Call(ctx, a, "worker2", distautograd.Wrap(autograd.Square(x.Var)))
		})
	})
	a := c.agents[0]
	ctx, id, err := distautograd.NewContext(testCtx(t), a)
	if err != nil {
		t.Fatal(err)
	}
	x := autograd.Param(tensor.Randn(tensor.NewRNG(3), 2, 2))
	y, err := hop1.Call(ctx, a, "worker1", distautograd.Wrap(x))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- distautograd.Backward(ctx, id, autograd.SumAll(y.Var)) }()
	select {
	case <-st.started:
	case err := <-done:
		t.Fatalf("backward ended before worker2 ran: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("worker2 never started its part of backward")
	}
	begin := time.Now()
	c.mesh.Kill(2)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "worker2") {
			t.Fatalf("Backward after worker2 died: %v (want an error naming worker2)", err)
		}
		if d := time.Since(begin); d > 2*time.Second {
			t.Fatalf("Backward failed after %v", d)
		}
		t.Logf("after %v: %v", time.Since(begin), err)
	case <-time.After(2 * time.Second):
		t.Fatal("Backward did not fail within 2 s of worker2's death")
	}
	if _, err := distautograd.GetGradients(ctx, id); err == nil {
		t.Error("GetGradients of a failed context succeeded")
	}
	waitNoContexts(t, c, 2)
}
