package distautograd_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/store"
	"github.com/godist/godist/tensor"
)

// A trainer's x = 2 goes to a parameter server, which returns w·x with
// its own w = 3; the trainer's loss is (w·x)² = 36. Backward in the
// context carries the gradient back across the call: dloss/dx = 2·w·x·w
// = 36 lands in the trainer's part of the context, dloss/dw = 2·w·x·x =
// 24 in the server's (where a DistributedOptimizer would step w). The two
// workers run in this process as goroutines over loopback TCP (under
// godist run, each is a process).
func Example() {
	ctx := context.Background()
	st := store.NewMem()
	w := autograd.Param(tensor.FromFloat32([]float32{3}, 1))
	// Each worker its registry (distautograd adds its own functions to
	// it); both know "scale", which only the server is asked to run.
	registry := func() (*rpc.Registry, rpc.Fn[*distautograd.Var, *distautograd.Var]) {
		reg := rpc.NewRegistry()
		scale, err := rpc.Register(reg, "scale", func(_ context.Context, x *distautograd.Var) (*distautograd.Var, error) {
			return distautograd.Wrap(autograd.Mul(w, x.Var)), nil
		})
		if err != nil {
			panic(err)
		}
		return reg, scale
	}
	done := make(chan distautograd.ContextID) // the trainer's backward is over
	psGrad := make(chan float32)
	var wg sync.WaitGroup
	for rank, name := range []string{"trainer", "ps"} {
		wg.Go(func() {
			reg, scale := registry()
			a, err := rpc.Init(ctx, name, rpc.Options{Functions: reg, Dist: dist.Options{Rank: rank, WorldSize: 2, Store: st}})
			if err != nil {
				panic(err)
			}
			if name == "ps" {
				id := <-done
				grads, err := distautograd.GetGradients(distautograd.WithAgent(ctx, a), id)
				if err != nil {
					panic(err)
				}
				psGrad <- grads[w].Float32s()[0]
			} else {
				dctx, id, err := distautograd.NewContext(ctx, a)
				if err != nil {
					panic(err)
				}
				x := autograd.Param(tensor.FromFloat32([]float32{2}, 1))
				h, err := scale.Call(dctx, a, "ps", distautograd.Wrap(x))
				if err != nil {
					panic(err)
				}
				loss := autograd.SumAll(autograd.Square(h.Var))
				if err := distautograd.Backward(dctx, id, loss); err != nil {
					panic(err)
				}
				grads, err := distautograd.GetGradients(dctx, id)
				if err != nil {
					panic(err)
				}
				done <- id
				fmt.Println("loss", loss.Value().Float32s()[0], "trainer's x:", grads[x].Float32s()[0], "server's w:", <-psGrad)
				if err := distautograd.Release(dctx, id); err != nil {
					panic(err)
				}
			}
			if err := a.Shutdown(ctx, true); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	// Output: loss 36 trainer's x: 36 server's w: 24
}
