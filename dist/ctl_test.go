package dist_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
)

// TestSmallCollectives: with a control block (all ranks on this host),
// barriers and small all-reduces, broadcasts and all-gathers go through
// shared memory and give what the transport gives.
func TestSmallCollectives(t *testing.T) {
	for _, world := range []int{2, 3, 4} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			opt := disttest.Options{TCP: true, SharedMemory: true, ShmRing: true, SmallCollectives: true, Timeout: 10 * time.Second}
			disttest.SpawnWith(t, world, opt, func(_ *disttest.Job, g *dist.Group) error {
				ctx := context.Background()
				r := g.Rank()
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
				}
				if got := dist.SharedCalls(g) - before; got != 200 {
					return fmt.Errorf("rank %d: %d calls through shared memory, want 200", r, got)
				}
				return nil
			})
		})
	}
}
