package dist_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
)

// TestSmallCollectives: with a control block (all ranks on this host),
// barriers and small all-reduces, broadcasts, all-gathers and
// reduce-scatters go through shared memory (and Choice says so) and give
// what the transport gives.
func TestSmallCollectives(t *testing.T) {
	for _, world := range []int{2, 3, 4} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			opt := disttest.Options{TCP: true, SharedMemory: true, ShmRing: true, SmallCollectives: true, Timeout: 10 * time.Second}
			disttest.SpawnWith(t, world, opt, func(_ *disttest.Job, g *dist.Group) error {
				ctx := context.Background()
				r := g.Rank()
				// Choice names the control block for the calls that fit
				// (a member's largest input at most 4 KiB).
				for _, c := range []struct {
					op    string
					count int
					block bool
				}{
					{"barrier", 0, true}, {"all_reduce", 1024, true}, {"all_reduce", 1025, false},
					{"broadcast", 1024, true}, {"all_gather", 1024, true}, {"all_gather", 1025, false},
					{"reduce_scatter", 1024 / world, true}, {"reduce_scatter", 1024/world + 1, false},
				} {
					ch, ok := g.Choice(c.op, c.count, tensor.Float32)
					if !ok || (ch.Algo == "control block") != c.block {
						return fmt.Errorf("%s of %d float32: %q %v, want the control block: %v", c.op, c.count, ch.Algo, ok, c.block)
					}
				}
				before := dist.SharedCalls(g)
				for it := range 50 {
					if err := g.Barrier(ctx); err != nil {
						return fmt.Errorf("barrier %d: %w", it, err)
					}
					x := tensor.FromFloat32([]float32{float32(r + it), 1})
					if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
						return fmt.Errorf("all_reduce %d: %w", it, err)
					}
					want := float32(world*it + world*(world-1)/2)
					if v := x.Float32s(); v[0] != want || v[1] != float32(world) {
						return fmt.Errorf("all_reduce %d: %v, want [%v %v]", it, v, want, world)
					}
					b := tensor.FromInt64([]int64{int64(r), int64(it)})
					root := it % world
					if err := g.Broadcast(ctx, b, root); err != nil {
						return fmt.Errorf("broadcast %d: %w", it, err)
					}
					if v := b.Int64s(); v[0] != int64(root) || v[1] != int64(it) {
						return fmt.Errorf("broadcast %d from %d: %v", it, root, v)
					}
					out := tensor.New(tensor.Int64, 2*world)
					if err := g.AllGatherIntoTensor(ctx, out, tensor.FromInt64([]int64{int64(r), int64(it)})); err != nil {
						return fmt.Errorf("all_gather %d: %w", it, err)
					}
					for q := range world {
						if v := out.Int64s(); v[2*q] != int64(q) || v[2*q+1] != int64(it) {
							return fmt.Errorf("all_gather %d: %v", it, v)
						}
					}
					// reduce_scatter: member q's chunk of rank r's input
					// holds r+q and it; in place every other time.
					in := tensor.New(tensor.Int64, 2*world)
					for q := range world {
						in.Int64s()[2*q], in.Int64s()[2*q+1] = int64(r+q), int64(it)
					}
					rs := tensor.New(tensor.Int64, 2)
					if it%2 == 1 {
						rs = in.Narrow(0, 2*r, 2)
					}
					if err := g.ReduceScatterTensor(ctx, rs, in, dist.Sum); err != nil {
						return fmt.Errorf("reduce_scatter %d: %w", it, err)
					}
					if v := rs.Int64s(); v[0] != int64(world*r+world*(world-1)/2) || v[1] != int64(world*it) {
						return fmt.Errorf("reduce_scatter %d: %v", it, v)
					}
				}
				if got := dist.SharedCalls(g) - before; got != 250 {
					return fmt.Errorf("rank %d: %d calls through shared memory, want 250", r, got)
				}
				return nil
			})
		})
	}
}

// TestSmallCollectivesFailures: through the control block, a member that
// dies mid-way is named in the others' errors within 2 s; members that
// issue different collectives get a DesyncError naming both calls; a
// member that stops taking part times the others out, naming it.
func TestSmallCollectivesFailures(t *testing.T) {
	opt := disttest.Options{TCP: true, SharedMemory: true, ShmRing: true, SmallCollectives: true, Timeout: 10 * time.Second}
	t.Run("death", func(t *testing.T) {
		disttest.SpawnWith(t, 3, opt, func(j *disttest.Job, g *dist.Group) error {
			ctx := context.Background()
			for range 20 {
				if err := g.Barrier(ctx); err != nil {
					return err
				}
			}
			if g.Rank() == 2 {
				j.Kill(2)
				return nil
			}
			start := time.Now()
			var err error
			for range 1000 {
				if err = g.AllReduce(ctx, tensor.Zeros(2), dist.Sum); err != nil {
					break
				}
			}
			var re *dist.RankError
			if !errors.As(err, &re) || re.Rank != 2 {
				return fmt.Errorf("rank %d: got %v, want a RankError naming rank 2", g.Rank(), err)
			}
			if d := time.Since(start); d > 2*time.Second {
				return fmt.Errorf("rank %d: the death took %v to notice", g.Rank(), d)
			}
			return nil
		})
	})
	t.Run("desync", func(t *testing.T) {
		disttest.SpawnWith(t, 2, opt, func(_ *disttest.Job, g *dist.Group) error {
			ctx := context.Background()
			var err error
			if g.Rank() == 0 {
				err = g.Barrier(ctx)
			} else {
				err = g.AllReduce(ctx, tensor.Zeros(4), dist.Max)
			}
			var de *dist.DesyncError
			var ae *dist.AbortError
			if !errors.As(err, &de) && !errors.As(err, &ae) {
				return fmt.Errorf("rank %d: got %v, want a DesyncError (or the peer's abort)", g.Rank(), err)
			}
			if de != nil && (!strings.Contains(de.Mine+de.Theirs, "barrier") || !strings.Contains(de.Mine+de.Theirs, "all_reduce")) {
				return fmt.Errorf("rank %d: %v does not name both calls", g.Rank(), err)
			}
			return nil
		})
	})
	t.Run("two roots", func(t *testing.T) {
		// A broadcast whose members each think themselves its root: the
		// roots read nobody's header in it, so the call after finds it.
		disttest.SpawnWith(t, 2, opt, func(_ *disttest.Job, g *dist.Group) error {
			ctx := context.Background()
			err := g.Broadcast(ctx, tensor.Zeros(2), g.Rank())
			if err == nil {
				err = g.Barrier(ctx)
			}
			var de *dist.DesyncError
			var ae *dist.AbortError
			if !errors.As(err, &de) && !errors.As(err, &ae) {
				return fmt.Errorf("rank %d: got %v, want a DesyncError (or the peer's abort)", g.Rank(), err)
			}
			if de != nil && !strings.Contains(de.Mine+de.Theirs, "root") {
				return fmt.Errorf("rank %d: %v does not name the roots", g.Rank(), err)
			}
			return nil
		})
	})
	t.Run("timeout", func(t *testing.T) {
		o := opt
		o.Timeout = 1500 * time.Millisecond
		disttest.SpawnWith(t, 2, o, func(_ *disttest.Job, g *dist.Group) error {
			if g.Rank() == 1 {
				time.Sleep(2500 * time.Millisecond) // never calls the barrier
				return nil
			}
			err := g.Barrier(context.Background())
			var te *dist.TimeoutError
			if !errors.As(err, &te) || !slices.Contains(te.Waiting, 1) {
				return fmt.Errorf("rank 0: got %v, want a TimeoutError waiting on rank 1", err)
			}
			return nil
		})
	})
}
