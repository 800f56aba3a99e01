package dist_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
)

// TestSharedTensor: over TCP with shared memory, all-reduces of a
// NewSharedTensor (or of a piece of at least 128 KiB) go through shared
// memory, and they and sends of it give the results ordinary tensors give;
// over the in-process
// transport it is an ordinary tensor.
func TestSharedTensor(t *testing.T) {
	const n = 300_000 // 1.2 MB: halving-doubling for 2 ranks, pieces for 3
	for _, c := range []struct {
		world int
		shm   bool
	}{{2, true}, {3, true}, {2, false}} {
		t.Run(fmt.Sprintf("world%d/tcp+shm=%v", c.world, c.shm), func(t *testing.T) {
			opt := disttest.Options{TCP: c.shm, SharedMemory: c.shm}
			disttest.SpawnWith(t, c.world, opt, func(_ *disttest.Job, g *dist.Group) error {
				ctx := context.Background()
				r := g.Rank()
				x, err := g.NewSharedTensor(ctx, tensor.Float32, n)
				if err != nil {
					return err
				}
				plain := tensor.New(tensor.Float32, n)
				for it := range 3 {
					seed := uint64(100*it + r)
					x.Copy(randFloat32(seed, n))
					plain.Copy(x)
					if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
						return err
					}
					if err := g.AllReduce(ctx, plain, dist.Sum); err != nil {
						return err
					}
					if err := sameSum(x.Float32s(), plain.Float32s(), c.world); err != nil {
						return fmt.Errorf("iteration %d: shared all_reduce against an ordinary tensor's: %v", it, err)
					}
				}
				// A piece of the tensor, averaged (AVG's scaling in the
				// last sum's pass), then a small piece (the ordinary
				// schedules), then MAX.
				for _, p := range []struct {
					off, len int
					op       dist.ReduceOp
				}{{4096, 100_000, dist.Avg}, {16, 1000, dist.Avg}, {0, n, dist.Max}} {
					piece := x.Narrow(0, p.off, p.len)
					piece.Copy(randFloat32(uint64(7+r), p.len))
					want := randFloat32(uint64(7+r), p.len)
					if err := g.AllReduce(ctx, want, p.op); err != nil {
						return err
					}
					if err := g.AllReduce(ctx, piece, p.op); err != nil {
						return err
					}
					if err := sameSum(piece.Float32s(), want.Float32s(), c.world); err != nil {
						return fmt.Errorf("%v of [%d, +%d): %v", p.op, p.off, p.len, err)
					}
				}
				shared := dist.SharedAllReduces(g)
				if c.shm && shared != 5 {
					return fmt.Errorf("rank %d: %d all-reduces through shared memory, want 5 (3 sums, the large piece, MAX)", r, shared)
				}
				if !c.shm && shared != 0 {
					return fmt.Errorf("rank %d: %d all-reduces through shared memory without it", r, shared)
				}
				// A send of a piece: the receiver gets the bytes as they
				// were when Send was called, though the sender overwrites
				// them as soon as Send returns.
				piece := x.Narrow(0, 1000, 50_000)
				if r == 0 {
					piece.Copy(randFloat32(7, 50_000))
					if err := g.Send(ctx, piece, 1, 0); err != nil {
						return err
					}
					piece.Zero()
				} else if r == 1 {
					got := tensor.New(tensor.Float32, 50_000)
					if _, err := g.Recv(ctx, got, 0, 0); err != nil {
						return err
					}
					want := randFloat32(7, 50_000).Float32s()
					for i, v := range got.Float32s() {
						if v != want[i] {
							return fmt.Errorf("received [%d] = %v, sent %v", i, v, want[i])
						}
					}
				}
				return nil
			})
		})
	}
}

// sameSum compares an all-reduce's result with another algorithm's: bit
// for bit for two ranks (a+b is b+a), else within float32 rounding (the
// algorithms add the ranks' values in different orders).
func sameSum(got, want []float32, world int) error {
	for i := range got {
		d := math.Abs(float64(got[i] - want[i]))
		if world == 2 && d != 0 || d > 1e-6*(1+math.Abs(float64(want[i]))) {
			return fmt.Errorf("[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	return nil
}

// TestSharedAllReduceMisuse: members that pass different pieces of a
// shared tensor, or a shared tensor on one member and an ordinary one on
// another, get an error on every member, not a hang or a wrong sum; a
// member that leaves mid-way is named in the others' error.
func TestSharedAllReduceMisuse(t *testing.T) {
	const n = 100_000
	opt := disttest.Options{TCP: true, SharedMemory: true, Timeout: 10 * time.Second}
	t.Run("different pieces", func(t *testing.T) {
		disttest.SpawnWith(t, 2, opt, func(_ *disttest.Job, g *dist.Group) error {
			ctx := context.Background()
			x, err := g.NewSharedTensor(ctx, tensor.Float32, 2*n)
			if err != nil {
				return err
			}
			err = g.AllReduce(ctx, x.Narrow(0, g.Rank()*n, n), dist.Sum)
			// This member's own check, or the peer's, whose abort can
			// arrive first.
			var om *dist.OffsetMismatchError
			if !errors.As(err, &om) && (err == nil || !strings.Contains(err.Error(), "every member must pass the same piece")) {
				return fmt.Errorf("rank %d: got %v, want an OffsetMismatchError", g.Rank(), err)
			}
			return nil
		})
	})
	t.Run("shared and ordinary", func(t *testing.T) {
		disttest.SpawnWith(t, 2, opt, func(_ *disttest.Job, g *dist.Group) error {
			ctx := context.Background()
			x, err := g.NewSharedTensor(ctx, tensor.Float32, n)
			if err != nil {
				return err
			}
			if g.Rank() == 1 {
				x = tensor.New(tensor.Float32, n)
			}
			err = g.AllReduce(ctx, x, dist.Sum)
			if err == nil {
				return fmt.Errorf("rank %d: all_reduce of a shared tensor against an ordinary one succeeded", g.Rank())
			}
			// This member's own explanation, or the peer's abort.
			if !strings.Contains(err.Error(), "every member must pass the same piece of its own shared tensor") {
				return fmt.Errorf("rank %d: %v does not say what went wrong", g.Rank(), err)
			}
			return nil
		})
	})
	t.Run("member leaves", func(t *testing.T) {
		disttest.SpawnWith(t, 2, opt, func(_ *disttest.Job, g *dist.Group) error {
			ctx := context.Background()
			x, err := g.NewSharedTensor(ctx, tensor.Float32, n)
			if err != nil {
				return err
			}
			if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
				return err
			}
			if g.Rank() == 1 {
				return g.Destroy()
			}
			err = g.AllReduce(ctx, x, dist.Sum)
			var re *dist.RankError
			if !errors.As(err, &re) || re.Rank != 1 {
				return fmt.Errorf("rank 0: got %v, want a RankError naming rank 1", err)
			}
			return nil
		})
	})
}
