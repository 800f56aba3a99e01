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

// TestThrowOnEarlyTermination: ranks with 1, 2 and 4 iterations, with
// ThrowOnEarlyTermination: as soon as rank 0 runs out, every rank stops
// with an *EarlyTerminationError (rank 0's says it ran out, the others'
// that 1 of 3 did), nobody shadows, and the group is still in step.
func TestThrowOnEarlyTermination(t *testing.T) {
	iters := []int{1, 2, 4}
	disttest.SpawnWith(t, 3, disttest.Options{Timeout: 20 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
		ctx := context.Background()
		k := &counter{g: g}
		ran := 0
		err := join.Run(ctx, g, []join.Joinable{k}, join.Options{ThrowOnEarlyTermination: true}, func() error {
			for range iters[g.Rank()] {
				if _, err := k.iterate(ctx); err != nil {
					return err
				}
				ran++
			}
			return nil
		})
		var et *join.EarlyTerminationError
		if !errors.As(err, &et) {
			return fmt.Errorf("got %v, want an *EarlyTerminationError", err)
		}
		want := join.EarlyTerminationError{Rank: g.Rank(), Exhausted: g.Rank() == 0, Training: 2, World: 3}
		if *et != want || k.shadows != 0 || ran != 1 {
			return fmt.Errorf("got %+v after %d iterations and %d shadows, want %+v after 1 and none: %v", *et, ran, k.shadows, want, err)
		}
		return g.Barrier(ctx)
	})
}

// TestDisabled: with Disabled the loop runs as it is, the Joinables
// never told (no count per iteration), and even inputs finish.
func TestDisabled(t *testing.T) {
	disttest.SpawnWith(t, 2, disttest.Options{Timeout: 20 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
		ctx := context.Background()
		k := &told{}
		err := join.Run(ctx, g, []join.Joinable{k}, join.Options{Disabled: true}, func() error {
			for range 3 {
				if err := g.AllReduce(ctx, tensor.FromInt64([]int64{1}), dist.Sum); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || k.sets != 0 {
			return fmt.Errorf("err %v, SetJoin called %d times: want nil and none", err, k.sets)
		}
		return nil
	})
}

// told counts SetJoin calls.
type told struct{ sets int }

func (k *told) SetJoin(*join.Context)        { k.sets++ }
func (k *told) Shadow(context.Context) error { return errors.New("shadowed") }
