package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/pipeline"
	"github.com/godist/godist/parallel/pipeline/schedule"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// A model y = w2·(w1·x) cut into two stages on two ranks, w1 = 2 on rank
// 0 and w2 = 3 on rank 1, trained on two micro-batches with 1F1B: x = 1
// and 2 against y = 5 and 14. The outputs are 6 and 12, so the squared
// errors 1 and 4, their mean 2.5; the mean loss's gradients are -6 for w2
// ((2·1·2 + 2·(-2)·4) / 2) and -9 for w1 ((2·1·3·1 + 2·(-2)·3·2) / 2),
// each on the rank that holds it.
func Example() {
	ctx := context.Background()
	sched, err := schedule.OneFOneB(2, 2)
	if err != nil {
		panic(err)
	}
	// Two ranks in this process, as goroutines (dist.Init in a real job).
	mesh := transport.NewInProc(2, transport.Faults{})
	out := make([]string, 2)
	var wg sync.WaitGroup
	for rank, ep := range mesh.Endpoints {
		g := dist.FromEndpoint(ep, nil, "inproc", time.Minute)
		defer g.Destroy()
		wg.Go(func() {
			lin := nn.NewLinear(tensor.NewRNG(1), 1, 1, false)
			lin.Weight.Value().Fill(float64(2 + rank))
			p, err := pipeline.New(g, sched, []pipeline.Stage{{Index: rank, Module: lin}}, pipeline.Options{
				Loss: func(out *autograd.Var, y *tensor.Tensor) *autograd.Var { return nn.MSELoss(out, autograd.Const(y)) },
			})
			if err != nil {
				panic(err)
			}
			var xs, ys []*tensor.Tensor
			if rank == 0 {
				xs = []*tensor.Tensor{tensor.FromFloat32([]float32{1}, 1, 1), tensor.FromFloat32([]float32{2}, 1, 1)}
			} else {
				ys = []*tensor.Tensor{tensor.FromFloat32([]float32{5}, 1, 1), tensor.FromFloat32([]float32{14}, 1, 1)}
			}
			if err := p.Step(ctx, xs, ys); err != nil {
				panic(err)
			}
			out[rank] = fmt.Sprintf("rank %d: gradient %v", rank, lin.Weight.Grad().Float32s())
			if p.HasLast() {
				out[rank] += fmt.Sprintf(", mean loss %v", p.Stats().Loss)
			}
		})
	}
	wg.Wait()
	fmt.Println(out[0])
	fmt.Println(out[1])
	// Output:
	// rank 0: gradient [-9]
	// rank 1: gradient [-6], mean loss 2.5
}
