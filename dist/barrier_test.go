package dist_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
)

// TestBarrierWaitsForEveryone: no member leaves a barrier before the last
// member has entered it.
func TestBarrierWaitsForEveryone(t *testing.T) {
	for _, world := range []int{2, 3, 4, 5, 8} {
		for _, late := range []int{0, world - 1, world / 2} {
			t.Run(fmt.Sprintf("world%d/late%d", world, late), func(t *testing.T) {
				var entered atomic.Bool
				disttest.Spawn(t, world, func(g *dist.Group) error {
					ctx := context.Background()
					for round := range 2 {
						if g.Rank() == late {
							time.Sleep(30 * time.Millisecond)
							entered.Store(true)
						}
						var err error
						if round == 0 {
							err = g.Barrier(ctx)
						} else {
							err = g.BarrierAsync().Wait(ctx)
						}
						if err != nil {
							return err
						}
						if !entered.Load() {
							return fmt.Errorf("round %d: rank %d left the barrier before rank %d entered it", round, g.Rank(), late)
						}
						// Everyone is out before the next round starts.
						if err := g.Barrier(ctx); err != nil {
							return err
						}
						if g.Rank() == late {
							entered.Store(false)
						}
						if err := g.Barrier(ctx); err != nil {
							return err
						}
					}
					return nil
				})
			})
		}
	}
}

// TestBarrierMissingRankNeverCompletes: with one member that never enters
// (but is alive), no member's barrier succeeds: each times out.
func TestBarrierMissingRankNeverCompletes(t *testing.T) {
	for _, world := range []int{3, 4, 8} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			done := make(chan struct{})
			var waiting atomic.Int32
			waiting.Store(int32(world - 1))
			disttest.SpawnWith(t, world, disttest.Options{Timeout: 300 * time.Millisecond}, func(_ *disttest.Job, g *dist.Group) error {
				if g.Rank() == world-1 {
					<-done
					return nil
				}
				defer func() {
					if waiting.Add(-1) == 0 {
						close(done)
					}
				}()
				err := g.Barrier(context.Background())
				if err == nil {
					return fmt.Errorf("rank %d passed a barrier rank %d never entered", g.Rank(), world-1)
				}
				if !errors.As(err, new(*dist.TimeoutError)) && !errors.As(err, new(*dist.DesyncError)) {
					return fmt.Errorf("barrier without rank %d: %v, want a timeout", world-1, err)
				}
				return nil
			})
		})
	}
}
