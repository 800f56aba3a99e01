package ddp_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// Two ranks train one linear model y = w·x on different samples. ddp.New
// gives both rank 0's weights (here zeros); Backward averages the
// gradients while it runs, so both ranks hold the same gradient:
// rank 0's sample x = (1, 0), y = 1 alone gives (-2, 0) under the squared
// error, rank 1's x = (0, 1), y = 2 gives (0, -4), and both see their
// mean.
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
			lin := nn.NewLinear(tensor.NewRNG(uint64(rank)), 2, 1, false)
			if rank == 0 {
				lin.Weight.Value().Zero()
			}
			model, err := ddp.New(ctx, lin, g, ddp.Options{})
			if err != nil {
				panic(err)
			}
			x := tensor.FromFloat32([]float32{1 - float32(rank), float32(rank)}, 1, 2)
			y := tensor.FromFloat32([]float32{float32(rank + 1)}, 1, 1)
			loss := nn.MSELoss(nn.Call(model, autograd.Const(x)), autograd.Const(y))
			if err := model.Backward(ctx, loss); err != nil {
				panic(err)
			}
			grads[rank] = lin.Weight.Grad().Float32s()
		})
	}
	wg.Wait()
	fmt.Println(grads[0], grads[1])
	// Output: [-1 -2] [-1 -2]
}
