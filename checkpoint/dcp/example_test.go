package dcp_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/godist/godist/checkpoint/dcp"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// Two ranks hold halves of a flattened weight (as FSDP shards it) and a
// replicated bias; one process loads the whole tensors back.
func Example() {
	dir, _ := os.MkdirTemp("", "dcp")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	// Two ranks in this process, as goroutines (dist.Init in a real job).
	mesh := transport.NewInProc(2, transport.Faults{})
	var wg sync.WaitGroup
	for rank, ep := range mesh.Endpoints {
		g := dist.FromEndpoint(ep, nil, "inproc", time.Minute)
		defer g.Destroy()
		wg.Add(1)
		go func() {
			defer wg.Done()
			half := tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}[3*rank:3*rank+3], 3)
			state := dcp.State{
				"fc.weight": dcp.Flat([]int{2, 3}, 3*rank, half),
				"fc.bias":   dcp.Whole(tensor.FromFloat32([]float32{0.5, -0.5}, 2)),
			}
			if err := dcp.Save(ctx, dir, state, g); err != nil {
				panic(err)
			}
		}()
	}
	wg.Wait()

	state := dcp.State{
		"fc.weight": dcp.Whole(tensor.New(tensor.Float32, 2, 3)),
		"fc.bias":   dcp.Whole(tensor.New(tensor.Float32, 2)),
	}
	if err := dcp.Load(ctx, dir, state, nil); err != nil {
		panic(err)
	}
	fmt.Println(state["fc.weight"].Local, state["fc.bias"].Local)
	// Output:
	// tensor(float32[2 3] [1 2 3 4 5 6]) tensor(float32[2] [0.5 -0.5])
}
