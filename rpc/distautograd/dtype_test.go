package distautograd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/tensor"
)

// gradMsg has the structure of the package's gradient message, so that a
// test can forge one as a faulty peer would.
type gradMsg struct {
	Ctx    int64
	Pass   int
	Retain bool
	Msg    uint64
	Grad   *tensor.Tensor
}

// TestGradientDTypeRefused: a gradient of the right shape but another
// dtype than the Var it is for is refused with an error naming both
// dtypes, not a panic inside backward; the context stays usable (its lock
// is free), and the right gradient is still taken.
func TestGradientDTypeRefused(t *testing.T) {
	var keep rpc.Fn[*distautograd.Var, struct{}]
	c := startCluster(t, 2, func(_ int, reg *rpc.Registry) {
		keep, _ = rpc.Register(reg, "keep", func(context.Context, *distautograd.Var) (struct{}, error) { return struct{}{}, nil })
	})
	a := c.agents[0]
	ctx, id, err := distautograd.NewContext(testCtx(t), a)
	if err != nil {
		t.Fatal(err)
	}
	x := autograd.Param(tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3))
	if _, err := keep.Call(ctx, a, "worker1", distautograd.Wrap(autograd.Tanh(x))); err != nil {
		t.Fatal(err)
	}
	// Worker0's first Var sent is its message 1.
	grad := rpc.Func[gradMsg, struct{}]("distautograd.grad")
	_, err = grad.Call(testCtx(t), c.agents[1], "worker0", gradMsg{Ctx: int64(id), Pass: 1, Msg: 1, Grad: tensor.Full(tensor.Float64, 1, 2, 3)})
	var re *rpc.RemoteError
	if !errors.As(err, &re) || re.Panic || !strings.Contains(err.Error(), "dtype float64") || !strings.Contains(err.Error(), "float32") {
		t.Errorf("a float64 gradient for a float32 Var: %v", err)
	}
	// The context's lock is free (a goroutine, since a held lock would
	// block for ever).
	got := make(chan error, 1)
	go func() { _, err := distautograd.GetGradients(ctx, id); got <- err }()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the context's lock is still held after the refused gradient")
	}
	if t.Failed() {
		return
	}
	if _, err := grad.Call(testCtx(t), c.agents[1], "worker0", gradMsg{Ctx: int64(id), Pass: 1, Msg: 1, Grad: tensor.Full(tensor.Float32, 1, 2, 3)}); err != nil {
		t.Fatalf("the right gradient after a refused one: %v", err)
	}
	grads, err := distautograd.GetGradients(ctx, id)
	if err != nil || grads[x] == nil || grads[x].DType() != tensor.Float32 {
		t.Fatalf("x's gradient: %v, %v", grads[x], err)
	}
	distautograd.Release(ctx, id)
}
