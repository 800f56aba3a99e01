package rpc_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/store"
)

// Two workers, "trainer" and "ps": the trainer calls a function the ps
// serves (rpc_sync), asks for a value to stay on the ps and gets a remote
// reference to it (remote), then fetches it (to_here). Functions are Go
// functions registered by name with typed arguments: no code crosses the
// wire. In a real job each worker is a process under godist run and
// rpc.Init reads its rank from the environment; here both run in this
// process as goroutines over loopback TCP, sharing an in-memory store.
func ExampleInit() {
	ctx := context.Background()
	st := store.NewMem()
	reg := rpc.NewRegistry()
	add, err := rpc.Register(reg, "add", func(_ context.Context, xy [2]int) (int, error) { return xy[0] + xy[1], nil })
	if err != nil {
		panic(err)
	}
	greet, err := rpc.Register(reg, "greet", func(_ context.Context, name string) (string, error) { return "hello, " + name, nil })
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	for rank, name := range []string{"trainer", "ps"} {
		wg.Go(func() {
			a, err := rpc.Init(ctx, name, rpc.Options{Functions: reg, Dist: dist.Options{Rank: rank, WorldSize: 2, Store: st}})
			if err != nil {
				panic(err)
			}
			if name == "trainer" {
				sum, err := add.Call(ctx, a, "ps", [2]int{2, 3})
				if err != nil {
					panic(err)
				}
				ref, err := greet.Remote(ctx, a, "ps", "trainer")
				if err != nil {
					panic(err)
				}
				s, err := ref.ToHere(ctx)
				if err != nil {
					panic(err)
				}
				fmt.Println(sum, s)
			}
			// Graceful: every worker waits until all have finished their calls.
			if err := a.Shutdown(ctx, true); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	// Output: 5 hello, trainer
}
