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
				shared := dist.SharedCalls(g)
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

// TestSharedCollectives: over TCP with shared memory, broadcast,
// all_gather_into_tensor and reduce_scatter_tensor of pieces of a
// NewSharedTensor go through shared memory (the inputs read straight out
// of the others' copies), in place too, and give what they give on
// ordinary tensors; the inputs stay as they were.
func TestSharedCollectives(t *testing.T) {
	const n = 120_000 // per rank: 480 KB
	for _, world := range []int{2, 3} {
		t.Run(fmt.Sprintf("world%d", world), func(t *testing.T) {
			opt := disttest.Options{TCP: true, SharedMemory: true, Timeout: 20 * time.Second}
			disttest.SpawnWith(t, world, opt, func(_ *disttest.Job, g *dist.Group) error {
				ctx := context.Background()
				r, size := g.Rank(), g.Size()
				x, err := g.NewSharedTensor(ctx, tensor.Float32, size*n)
				if err != nil {
					return err
				}
				calls := dist.SharedCalls(g)
				counted := func(what string, want int64) error {
					if got := dist.SharedCalls(g) - calls; got != want {
						return fmt.Errorf("rank %d: %s: %d calls through shared memory, want %d", r, what, got, want)
					}
					calls = dist.SharedCalls(g)
					return nil
				}
				equal := func(what string, got, want []float32) error {
					for i := range want {
						if got[i] != want[i] {
							return fmt.Errorf("rank %d: %s: [%d] = %v, want %v", r, what, i, got[i], want[i])
						}
					}
					return nil
				}
				// Broadcast of a piece, from each root.
				for root := range size {
					piece := x.Narrow(0, 1024, n)
					piece.Copy(randFloat32(uint64(10*root+r), n))
					if err := g.Broadcast(ctx, piece, root); err != nil {
						return err
					}
					if err := equal(fmt.Sprintf("broadcast from %d", root), piece.Float32s(), randFloat32(uint64(10*root+root), n).Float32s()); err != nil {
						return err
					}
				}
				if err := counted("broadcast", int64(size)); err != nil {
					return err
				}
				// all_gather_into_tensor: a shared input into an ordinary
				// output, then in place (the input is this rank's chunk of
				// the shared output).
				want := tensor.New(tensor.Float32, size*n)
				for q := range size {
					want.Narrow(0, q*n, n).Copy(randFloat32(uint64(20+q), n))
				}
				in := x.Narrow(0, 0, n)
				in.Copy(randFloat32(uint64(20+r), n))
				out := tensor.New(tensor.Float32, size*n)
				if err := g.AllGatherIntoTensor(ctx, out, in); err != nil {
					return err
				}
				if err := equal("all_gather", out.Float32s(), want.Float32s()); err != nil {
					return err
				}
				if err := equal("all_gather's input", in.Float32s(), randFloat32(uint64(20+r), n).Float32s()); err != nil {
					return err
				}
				x.Zero()
				mine := x.Narrow(0, r*n, n)
				mine.Copy(randFloat32(uint64(20+r), n))
				if err := g.AllGatherIntoTensor(ctx, x, mine); err != nil {
					return err
				}
				if err := equal("all_gather in place", x.Float32s(), want.Float32s()); err != nil {
					return err
				}
				if err := counted("all_gather", 2); err != nil {
					return err
				}
				// reduce_scatter_tensor, SUM then AVG into an ordinary
				// output, then in place; against the ring on ordinary
				// tensors.
				for _, op := range []dist.ReduceOp{dist.Sum, dist.Avg} {
					x.Copy(randFloat32(uint64(30+r), size*n))
					plainIn := randFloat32(uint64(30+r), size*n)
					plainOut := tensor.New(tensor.Float32, n)
					if err := g.ReduceScatterTensor(ctx, plainOut, plainIn, op); err != nil {
						return err
					}
					got := tensor.New(tensor.Float32, n)
					if err := g.ReduceScatterTensor(ctx, got, x, op); err != nil {
						return err
					}
					if err := sameSum(got.Float32s(), plainOut.Float32s(), size); err != nil {
						return fmt.Errorf("rank %d: reduce_scatter %v: %v", r, op, err)
					}
					if err := equal("reduce_scatter's input", x.Float32s(), randFloat32(uint64(30+r), size*n).Float32s()); err != nil {
						return err
					}
					if err := g.ReduceScatterTensor(ctx, x.Narrow(0, r*n, n), x, op); err != nil {
						return err
					}
					if err := sameSum(x.Narrow(0, r*n, n).Float32s(), plainOut.Float32s(), size); err != nil {
						return fmt.Errorf("rank %d: reduce_scatter %v in place: %v", r, op, err)
					}
				}
				if err := counted("reduce_scatter", 4); err != nil {
					return err
				}
				// Different pieces in a broadcast: an error, not a hang.
				err = g.Broadcast(ctx, x.Narrow(0, r*n, n), 0)
				var om *dist.OffsetMismatchError
				if !errors.As(err, &om) && (err == nil || !strings.Contains(err.Error(), "every member must pass the same piece")) {
					return fmt.Errorf("rank %d: broadcast of different pieces: %v, want an OffsetMismatchError", r, err)
				}
				return nil
			})
		})
	}
}
