package zero_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/zero"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// Two ranks share the optimizer's work: each keeps the optimizer's state
// (here SGD's momentum) for the parameters of its partition only, updates
// those, and broadcasts them, so that after the step both ranks hold the
// same parameters. Two parameters of 3 and 5 elements with the same
// gradient on both ranks (as after DDP's all-reduce): each rank steps one
// of them, and the first step moves every element by the learning rate
// (0.5) times its gradient, against it.
func Example() {
	ctx := context.Background()
	// Two ranks in this process, as goroutines (dist.Init in a real job).
	mesh := transport.NewInProc(2, transport.Faults{})
	out := make([]string, 2)
	var wg sync.WaitGroup
	for rank, ep := range mesh.Endpoints {
		g := dist.FromEndpoint(ep, nil, "inproc", time.Minute)
		defer g.Destroy()
		wg.Go(func() {
			a := autograd.Param(tensor.New(tensor.Float32, 3))
			b := autograd.Param(tensor.New(tensor.Float32, 5))
			newSGD := func(ps []*autograd.Var) optim.Optimizer {
				return optim.NewSGD(ps, optim.SGDOptions{LR: 0.5, Momentum: 0.9})
			}
			opt, err := zero.New([]*autograd.Var{a, b}, newSGD, g, zero.Options{})
			if err != nil {
				panic(err)
			}
			a.SetGrad(tensor.FromFloat32([]float32{1, -1, 1}, 3))
			b.SetGrad(tensor.FromFloat32([]float32{-1, -1, -1, -1, -1}, 5))
			if err := opt.StepContext(ctx); err != nil {
				panic(err)
			}
			out[rank] = fmt.Sprintf("rank %d steps parameters %v: a %v, b %v", rank, opt.Partition()[rank], a.Value().Float32s(), b.Value().Float32s())
		})
	}
	wg.Wait()
	fmt.Println(out[0])
	fmt.Println(out[1])
	// Output:
	// rank 0 steps parameters [1]: a [-0.5 0.5 -0.5], b [0.5 0.5 0.5 0.5 0.5]
	// rank 1 steps parameters [0]: a [-0.5 0.5 -0.5], b [0.5 0.5 0.5 0.5 0.5]
}
