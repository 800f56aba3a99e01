package rpc_test

import (
	"context"
	"errors"
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

// TestEarlyShutdownKeepsServedRRefs: a worker that calls a graceful
// Shutdown while it still serves a call that holds an RRef argument, and
// while it keeps owner RRefs that a later call returns, releases neither
// until every worker has called Shutdown: the handler's ToHere and the
// later call still work, and the job then ends with every RRef released.
// (Released at the start of Shutdown, the handle gave "was released
// while a call waited", and the owner's own handle "was released and
// cannot be sent": the RPC+DDP example under load, 1 run in 20.)
func TestEarlyShutdownKeepsServedRRefs(t *testing.T) {
	var fetch rpc.Fn[*rpc.RRef[int], int]
	var make_ rpc.Fn[int, int]
	var own rpc.Fn[struct{}, *rpc.RRef[int]]
	entered, proceed := make(chan struct{}), make(chan struct{})
	var kept *rpc.RRef[int] // worker1's own handle, returned to each caller
	var once sync.Once
	c := startWith(t, 3, transport.Faults{}, rpc.Options{}, func(r int, reg *rpc.Registry) {
		var err error
		make_, err = rpc.Register(reg, "early.make", func(_ context.Context, v int) (int, error) { return v, nil })
		if err == nil {
			fetch, err = rpc.Register(reg, "early.fetch", func(ctx context.Context, in *rpc.RRef[int]) (int, error) {
				close(entered)
				<-proceed
				return in.ToHere(ctx)
			})
		}
		if err == nil {
			own, err = rpc.Register(reg, "early.own", func(ctx context.Context, _ struct{}) (*rpc.RRef[int], error) {
				a, _ := rpc.AgentFrom(ctx)
				once.Do(func() { kept = rpc.NewRRef(a, 42) })
				return kept, nil
			})
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	ctx := ctx(t)
	a := c.agents[0]
	first, err := own.Call(ctx, a, "worker1", struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := make_.Remote(ctx, a, "worker2", 7)
	if err != nil {
		t.Fatal(err)
	}
	got := fetch.Go(ctx, a, "worker1", ref)
	<-entered
	// worker1 and worker2 reach Shutdown while worker1 serves the fetch.
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := 1; r < 3; r++ {
		wg.Go(func() { errs[r] = c.agents[r].Shutdown(ctx, true) })
	}
	time.Sleep(50 * time.Millisecond) // well into their Shutdown
	close(proceed)
	if v, err := got.Wait(ctx); err != nil || v != 7 {
		t.Fatalf("the served call's ToHere after its worker's Shutdown began: %d, %v", v, err)
	}
	second, err := own.Call(ctx, a, "worker1", struct{}{})
	if err != nil {
		t.Fatalf("worker1's own RRef, returned again after its Shutdown began: %v", err)
	}
	if v, err := second.ToHere(ctx); err != nil || v != 42 {
		t.Fatalf("ToHere of it: %d, %v", v, err)
	}
	first.Release()
	second.Release()
	ref.Release()
	errs[0] = a.Shutdown(ctx, true)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, a := range c.agents {
		if ok, s := a.RRefsEmpty(); !ok {
			t.Errorf("%s after a graceful shutdown: %s", a.Self().Name, s)
		}
	}
}
