package fsdp_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/fsdp"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// Two ranks train y = w·x with w sharded: each holds two of its four
// elements (fsdp.FullShard), gathers the whole for forward and backward,
// and keeps only its shard of the averaged gradient. With w = 0, rank 0's
// sample x = (1, 0, 0, 0), y = 1 gives the gradient (-2, 0, 0, 0) under
// the squared error, rank 1's x = (0, 0, 0, 1), y = 2 gives (0, 0, 0, -4);
// their mean is (-1, 0, 0, -2), whose first half rank 0 holds and second
// half rank 1.
func Example() {
	ctx := context.Background()
	// Two ranks in this process, as goroutines (dist.Init in a real job).
	mesh := transport.NewInProc(2, transport.Faults{})
	grads := make([][]float32, 2)
	var wg sync.WaitGroup
	for rank, ep := range mesh.Endpoints {
		g := dist.FromEndpoint(ep, nil, "inproc", time.Minute)
		defer g.Destroy()
		wg.Go(func() {
			lin := nn.NewLinear(tensor.NewRNG(1), 4, 1, false)
			lin.Weight.Value().Zero()
			model, err := fsdp.New(ctx, lin, g, fsdp.Options{Strategy: fsdp.FullShard})
			if err != nil {
				panic(err)
			}
			x := tensor.New(tensor.Float32, 1, 4)
			x.Float32s()[3*rank] = 1
			y := tensor.FromFloat32([]float32{float32(rank + 1)}, 1, 1)
			loss := nn.MSELoss(nn.Call(model, autograd.Const(x)), autograd.Const(y))
			if err := model.Backward(ctx, loss); err != nil {
				panic(err)
			}
			shard := model.Parameters()[0] // this rank's piece of the flat parameter
			grads[rank] = shard.Grad().Float32s()
		})
	}
	wg.Wait()
	fmt.Println(grads[0], grads[1])
	// Output: [-1 0] [0 -2]
}
