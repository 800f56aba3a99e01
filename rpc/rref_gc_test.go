package rpc_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/rpc"
	"github.com/godist/godist/transport"
)

// TestToHereKeepsItsRRef: a handler that fetches an RRef it was passed
// and holds no other reference to it (as PyTorch's pipeline tutorial's
// shards do) gets its value, though a collection runs while ToHere waits
// for the owner to confirm the fork: ToHere keeps its RRef reachable.
// Before, the handle's cleanup released it mid-wait, the confirmation
// found no handle, and the wait never ended.
func TestToHereKeepsItsRRef(t *testing.T) {
	var fetch rpc.Fn[*rpc.RRef[int], int]
	var make_ rpc.Fn[int, int]
	c := startWith(t, 3, transport.Faults{Seed: 3, MaxDelay: 2 * time.Millisecond}, rpc.Options{}, func(_ int, reg *rpc.Registry) {
		var err error
		make_, err = rpc.Register(reg, "gc.make", func(_ context.Context, v int) (int, error) { return v, nil })
		if err != nil {
			t.Fatal(err)
		}
		fetch, err = rpc.Register(reg, "gc.fetch", func(ctx context.Context, in *rpc.RRef[int]) (int, error) {
			done := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
						runtime.GC()
					}
				}
			})
			defer func() { close(done); wg.Wait() }()
			return in.ToHere(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	a := c.agents[0]
	for i := range 30 {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ref, err := make_.Remote(cctx, a, "worker1", i)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fetch.Call(cctx, a, "worker2", ref)
		cancel()
		ref.Release()
		if err != nil || got != i {
			t.Fatalf("round %d: the handler's ToHere gave %d, %v", i, got, err)
		}
	}
}
