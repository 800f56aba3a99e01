package dist_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/store"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// tcpGroups connects world ranks over loopback TCP inside this process.
func tcpGroups(b testing.TB, world int) []*dist.Group {
	return tcpGroupsWith(b, world, transport.TCPOptions{})
}

// tcpGroupsWith is tcpGroups with the transport's options (rank, size and
// store are filled in).
func tcpGroupsWith(b testing.TB, world int, o transport.TCPOptions) []*dist.Group {
	return tcpGroupsTimeout(b, world, o, 0)
}

// tcpGroupsTimeout is tcpGroupsWith for groups whose calls fail after
// timeout (0: never).
func tcpGroupsTimeout(b testing.TB, world int, o transport.TCPOptions, timeout time.Duration) []*dist.Group {
	st := store.NewMem()
	eps := make([]*transport.Endpoint, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			opt := o
			opt.Rank, opt.Size, opt.Store = r, world, st
			eps[r], err = transport.NewTCP(context.Background(), opt)
			if err != nil {
				panic(err)
			}
		}()
	}
	wg.Wait()
	gs := make([]*dist.Group, world)
	for r := range world {
		gs[r] = dist.FromEndpoint(eps[r], st, "tcp", timeout)
	}
	return gs
}

// BenchmarkAllReduceTCP measures all_reduce of float32 over loopback TCP
// with ranks as goroutines of one process (godist bench runs processes);
// the "ring" variants send every frame through the same-host
// shared-memory frame ring (transport.TCPOptions.ShmRing).
func BenchmarkAllReduceTCP(b *testing.B) {
	for _, v := range []struct {
		name  string
		world int
		opt   transport.TCPOptions
	}{
		{"", 2, transport.TCPOptions{}}, {"", 4, transport.TCPOptions{}},
		{"shm", 2, transport.TCPOptions{SharedMemory: true, Spin: 50 * time.Microsecond}},
		{"ring", 2, transport.TCPOptions{SharedMemory: true, ShmRing: true, Spin: 50 * time.Microsecond}},
	} {
		world := v.world
		gs := tcpGroupsWith(b, world, v.opt)
		for _, bytes := range []int{8, 1 << 10, 64 << 10, 1 << 20, 16 << 20} {
			b.Run(fmt.Sprintf("%sworld%d/%dB", v.name, world, bytes), func(b *testing.B) {
				xs := make([]*tensor.Tensor, world)
				for r := range xs {
					xs[r] = tensor.Zeros(bytes / 4)
				}
				b.SetBytes(int64(bytes))
				b.ResetTimer()
				var wg sync.WaitGroup
				for r := range world {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range b.N {
							if err := gs[r].AllReduce(context.Background(), xs[r], dist.Sum); err != nil {
								panic(err)
							}
						}
					}()
				}
				wg.Wait()
			})
		}
		for _, g := range gs {
			g.Destroy()
		}
	}
}

// BenchmarkAllReduceInProc measures the process group's own cost: an
// all_reduce of 8 bytes with ranks as goroutines over the in-process
// transport, whose delivery costs nearly nothing (allocs/op is the
// group's, per rank and call summed over the ranks).
func BenchmarkAllReduceInProc(b *testing.B) {
	for _, world := range []int{2, 4} {
		b.Run(fmt.Sprintf("world%d/8B", world), func(b *testing.B) {
			m := transport.NewInProc(world, transport.Faults{})
			gs := make([]*dist.Group, world)
			xs := make([]*tensor.Tensor, world)
			for r := range world {
				gs[r] = dist.FromEndpoint(m.Endpoints[r], nil, "inproc", 0)
				xs[r] = tensor.Zeros(2)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for r := range world {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range b.N {
						if err := gs[r].AllReduce(context.Background(), xs[r], dist.Sum); err != nil {
							panic(err)
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			for _, g := range gs {
				g.Destroy()
			}
		})
	}
}

// BenchmarkSmallCollectives measures the control block's path (samehost.go):
// barriers, 8-byte all-reduces and broadcasts (back to back, as a loop
// of small broadcasts runs) of goroutine ranks over loopback TCP
// with shared memory; allocs/op is the group's cost per call, summed over
// the ranks.
func BenchmarkSmallCollectives(b *testing.B) {
	const world = 2
	gs := tcpGroupsWith(b, world, transport.TCPOptions{SharedMemory: true, ShmRing: true, Spin: 50 * time.Microsecond})
	var wg sync.WaitGroup
	for _, g := range gs {
		wg.Go(func() {
			if err := g.InitSmallCollectives(context.Background()); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	defer func() {
		for _, g := range gs {
			g.Destroy()
		}
	}()
	for _, op := range []string{"barrier", "all_reduce_8B", "broadcast_8B"} {
		b.Run(op, func(b *testing.B) {
			b.ReportAllocs()
			if err := smallCalls(context.Background(), gs, op, b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// smallCalls makes n calls of op ("barrier", "all_reduce_8B" or
// "broadcast_8B" from rank 0) on every rank of gs at once, and returns the
// first rank's error.
func smallCalls(ctx context.Context, gs []*dist.Group, op string, n int) error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		x := tensor.Zeros(2)
		wg.Go(func() {
			for range n {
				switch op {
				case "barrier":
					errs[r] = g.Barrier(ctx)
				case "all_reduce_8B":
					errs[r] = g.AllReduce(ctx, x, dist.Sum)
				default:
					errs[r] = g.Broadcast(ctx, x, 0)
				}
				if errs[r] != nil {
					errs[r] = fmt.Errorf("%s on rank %d: %w", op, r, errs[r])
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// BenchmarkBarrierTCP measures barriers and 8-byte all-reduces of
// goroutine ranks over loopback TCP without shared memory, the path of
// ranks on different hosts; allocs/op is the cost per call summed over
// the ranks.
func BenchmarkBarrierTCP(b *testing.B) {
	for _, world := range []int{2, 4} {
		gs := tcpGroupsWith(b, world, transport.TCPOptions{Spin: 50 * time.Microsecond})
		for _, op := range []string{"barrier", "all_reduce_8B"} {
			b.Run(fmt.Sprintf("world%d/%s", world, op), func(b *testing.B) {
				b.ReportAllocs()
				if err := smallCalls(context.Background(), gs, op, b.N); err != nil {
					b.Fatal(err)
				}
			})
		}
		for _, g := range gs {
			g.Destroy()
		}
	}
}
