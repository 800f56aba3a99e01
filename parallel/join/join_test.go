package join_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/parallel/join"
	"github.com/godist/godist/tensor"
)

// counter is a Joinable whose iteration is one all-reduce of a count of
// the ranks taking part: 1 from a rank still training, 0 from a shadow.
type counter struct {
	g       *dist.Group
	c       *join.Context
	shadows int
}

func (k *counter) SetJoin(c *join.Context) { k.c = c }

func (k *counter) Shadow(ctx context.Context) error {
	k.shadows++
	return k.g.AllReduce(ctx, tensor.FromInt64([]int64{0}), dist.Sum)
}

// iterate is one training iteration: it returns how many ranks trained.
func (k *counter) iterate(ctx context.Context) (int64, error) {
	if err := k.c.Notify(ctx, k); err != nil {
		return 0, err
	}
	t := tensor.FromInt64([]int64{1})
	err := k.g.AllReduce(ctx, t, dist.Sum)
	return t.Int64s()[0], err
}

// TestJoin: at worlds 1, 2, 3 and 5, ranks with 0 to 2·rank+1 iterations
// all finish; each iteration the ranks still training see exactly their
// own number (the joined ranks answer with zeros), the joined ranks
// shadow every Joinable each iteration they miss, and only the first
// Joinable's Notify is a collective.
func TestJoin(t *testing.T) {
	for _, world := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			iters := func(r int) int { return 2*r + 1 - world%2 } // world 3: 0, 2, 4
			disttest.SpawnWith(t, world, disttest.Options{Timeout: 20 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
				ctx := context.Background()
				a, b := &counter{g: g}, &counter{g: g}
				err := join.Join(ctx, g, []join.Joinable{a, b}, func() error {
					for s := range iters(g.Rank()) {
						for _, k := range []*counter{a, b} {
							n, err := k.iterate(ctx)
							if err != nil {
								return err
							}
							want := 0
							for r := range world {
								if s < iters(r) {
									want++
								}
							}
							if n != int64(want) {
								return fmt.Errorf("iteration %d: %d ranks training, want %d", s, n, want)
							}
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
				missed := iters(world-1) - iters(g.Rank())
				if a.shadows != missed || b.shadows != missed {
					return fmt.Errorf("shadowed %d and %d iterations, want %d", a.shadows, b.shadows, missed)
				}
				if a.c != nil || b.c != nil {
					return errors.New("the Joinables still have the Join after it returned")
				}
				return g.Barrier(ctx) // still in step
			})
		})
	}
}
