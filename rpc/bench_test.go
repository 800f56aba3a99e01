package rpc_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/store"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// tcpAgents starts two agents in this process joined by real loopback TCP
// (with the same-host shared-memory path, as dist.Init makes them). The
// cross-process numbers, beside PyTorch's, come from `make bench-rpc`.
func tcpAgents(b testing.TB) ([]*rpc.Agent, funcs) {
	st := store.NewMem()
	agents := make([]*rpc.Agent, 2)
	names := []string{"worker0", "worker1"}
	var f funcs
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		reg := rpc.NewRegistry()
		fr := register(b, reg, &names[r])
		if r == 0 {
			f = fr
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ep, err := transport.NewTCP(ctx, transport.TCPOptions{Rank: r, Size: 2, Store: st, JobID: "bench", Token: []byte("t"),
				Spin: transport.DefaultSpin(2, runtime.GOMAXPROCS(0), runtime.NumCPU()), SharedMemory: true})
			if err != nil {
				errs[r] = err
				return
			}
			agents[r], errs[r] = rpc.Init(ctx, "", rpc.Options{Group: dist.FromEndpoint(ep, st, "tcp", 0), Functions: reg})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for _, a := range agents {
			a.Shutdown(context.Background(), false)
			a.Group().Endpoint().Close()
		}
	})
	return agents, f
}

func BenchmarkRPC(b *testing.B) {
	agents, f := tcpAgents(b)
	ctx := context.Background()
	a := agents[0]
	b.Run("sync-add", func(b *testing.B) {
		for b.Loop() {
			if _, err := f.add.Call(ctx, a, "worker1", addArgs{1, 2}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("async-add-x256", func(b *testing.B) {
		futs := make([]*rpc.Future[int], 256)
		for b.Loop() {
			for i := range futs {
				futs[i] = f.add.Go(ctx, a, "worker1", addArgs{i, 1})
			}
			if _, err := rpc.WaitAll(ctx, futs); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*256)/b.Elapsed().Seconds(), "calls/s")
	})
	for _, n := range []int{1 << 10, 1 << 20, 16 << 20} {
		t := tensor.New(tensor.Float32, n/4)
		b.Run("echo-"+byteName(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				if _, err := f.echoT.Call(ctx, a, "worker1", t); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func byteName(n int) string {
	switch {
	case n >= 1<<20:
		return itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return itoa(n>>10) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	s := ""
	for n > 0 {
		s = string(rune('0'+n%10)) + s
		n /= 10
	}
	return s
}
