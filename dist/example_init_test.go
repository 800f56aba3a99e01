package dist_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/store"
	"github.com/godist/godist/tensor"
)

// Two ranks join one job and all-reduce a tensor, torch.distributed's
// init_process_group and all_reduce. In a real job each rank is its own
// process under godist run, and dist.Init(ctx, dist.Options{}) reads the
// rank, the world size and the store's address from the environment; here
// both run in this process as goroutines, over loopback TCP, sharing an
// in-memory store.
func ExampleInit() {
	ctx := context.Background()
	st := store.NewMem()
	sums := make([][]float32, 2)
	var wg sync.WaitGroup
	for rank := range 2 {
		wg.Go(func() {
			g, err := dist.Init(ctx, dist.Options{Rank: rank, WorldSize: 2, Store: st})
			if err != nil {
				panic(err)
			}
			defer g.Destroy()
			t := tensor.FromFloat32([]float32{float32(rank + 1), 10}, 2)
			if err := g.AllReduce(ctx, t, dist.Sum); err != nil {
				panic(err)
			}
			sums[rank] = t.Float32s()
		})
	}
	wg.Wait()
	fmt.Println(sums[0], sums[1])
	// Output: [3 20] [3 20]
}
