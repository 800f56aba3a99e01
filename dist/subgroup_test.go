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

// TestNewGroupMembership: members get a group with the right Rank, Size
// and Ranks, non-members nil; a collective in it involves the members only.
func TestNewGroupMembership(t *testing.T) {
	for _, world := range []int{1, 2, 3, 5, 8} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			// Every other rank, listed backwards with a duplicate.
			var ranks []int
			for r := world - 1; r >= 0; r -= 2 {
				ranks = append(ranks, r, r)
			}
			want := slices.Compact(slices.Sorted(slices.Values(ranks)))
			disttest.Spawn(t, world, func(g *dist.Group) error {
				ctx := context.Background()
				sub, err := g.NewGroup(ctx, ranks)
				if err != nil {
					return err
				}
				me := g.Rank()
				idx := slices.Index(want, me)
				if idx < 0 {
					if sub != nil {
						return fmt.Errorf("rank %d is not in %v but got a group", me, want)
					}
				} else {
					if sub == nil {
						return fmt.Errorf("rank %d is in %v but got no group", me, want)
					}
					if sub.Rank() != idx || sub.Size() != len(want) || !slices.Equal(sub.Ranks(), want) {
						return fmt.Errorf("subgroup: rank %d size %d ranks %v, want %d %d %v", sub.Rank(), sub.Size(), sub.Ranks(), idx, len(want), want)
					}
					for i, r := range want {
						if sub.GlobalRank(i) != r {
							return fmt.Errorf("GlobalRank(%d) = %d, want %d", i, sub.GlobalRank(i), r)
						}
					}
					x := tensor.Full(tensor.Int64, float64(me), 3)
					if err := sub.AllReduce(ctx, x, dist.Sum); err != nil {
						return err
					}
					sum := 0
					for _, r := range want {
						sum += r
					}
					if err := expect(x, func(int) float64 { return float64(sum) }, "subgroup all_reduce"); err != nil {
						return err
					}
					b := tensor.Full(tensor.Int64, float64(me), 2)
					if err := sub.Broadcast(ctx, b, sub.Size()-1); err != nil {
						return err
					}
					if err := expect(b, func(int) float64 { return float64(want[len(want)-1]) }, "subgroup broadcast"); err != nil {
						return err
					}
				}
				// The parent still works afterwards.
				y := tensor.Full(tensor.Int64, 1, 2)
				if err := g.AllReduce(ctx, y, dist.Sum); err != nil {
					return err
				}
				return expect(y, func(int) float64 { return float64(world) }, "parent all_reduce after new_group")
			})
		})
	}
}

func TestNewGroupBadRanks(t *testing.T) {
	disttest.Spawn(t, 3, func(g *dist.Group) error {
		for _, rs := range [][]int{nil, {}, {0, 3}, {-1, 1}} {
			var ie *dist.InputError
			if _, err := g.NewGroup(context.Background(), rs); !errors.As(err, &ie) {
				return fmt.Errorf("NewGroup(%v): %v, want *dist.InputError", rs, err)
			}
		}
		return nil
	})
}

// TestDisjointSubgroupsConcurrently: two disjoint subgroups run many
// collectives at the same time, while the parent group has async work in
// flight too.
func TestDisjointSubgroupsConcurrently(t *testing.T) {
	for _, world := range []int{2, 5, 8} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			var evens, odds []int
			for r := range world {
				if r%2 == 0 {
					evens = append(evens, r)
				} else {
					odds = append(odds, r)
				}
			}
			disttest.Spawn(t, world, func(g *dist.Group) error {
				ctx := context.Background()
				a, err := g.NewGroup(ctx, evens)
				if err != nil {
					return err
				}
				b, err := g.NewGroup(ctx, odds)
				if err != nil {
					return err
				}
				mine, members := a, evens
				if g.Rank()%2 == 1 {
					mine, members = b, odds
				}
				if (a == nil) == (b == nil) {
					return fmt.Errorf("rank %d: in evens %v, in odds %v", g.Rank(), a != nil, b != nil)
				}
				par := tensor.Full(tensor.Float64, 1, 100)
				pw := g.AllReduceAsync(par, dist.Sum)
				for i := range 20 {
					n := []int{1, 33, 20000, 300000}[i%4]
					x := iota32(float32(g.Rank()), n)
					if err := mine.AllReduce(ctx, x, dist.Sum); err != nil {
						return err
					}
					want := func(j int) float64 {
						s := 0.0
						for _, r := range members {
							s += float64(r + j)
						}
						return s
					}
					if err := expect(x, want, fmt.Sprintf("subgroup all_reduce %d", i)); err != nil {
						return err
					}
					outs := make([]*tensor.Tensor, len(members))
					for k := range outs {
						outs[k] = tensor.New(tensor.Int32, 2)
					}
					if err := mine.AllGather(ctx, outs, tensor.Full(tensor.Int32, float64(g.Rank()), 2)); err != nil {
						return err
					}
					for k, o := range outs {
						if err := expect(o, func(int) float64 { return float64(members[k]) }, "subgroup all_gather"); err != nil {
							return err
						}
					}
				}
				if err := pw.Wait(ctx); err != nil {
					return err
				}
				return expect(par, func(int) float64 { return float64(world) }, "parent all_reduce during subgroup work")
			})
		})
	}
}

// TestNewGroupDifferentLists: members passing different rank lists get a
// *dist.DesyncError, not a hang.
func TestNewGroupDifferentLists(t *testing.T) {
	for _, world := range []int{2, 3, 5} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			disttest.SpawnWith(t, world, disttest.Options{Timeout: 5 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
				ranks := []int{0, 1}
				if g.Rank() == world-1 {
					ranks = []int{0}
				}
				return within(2*time.Second, "new_group with different lists", func() error {
					sub, err := g.NewGroup(context.Background(), ranks)
					if err == nil {
						// A member whose barrier finished before the
						// mismatch was seen learns of it on its next call.
						err = g.Barrier(context.Background())
						if sub != nil {
							sub.Destroy()
						}
					}
					var de *dist.DesyncError
					if !errors.As(err, &de) {
						return fmt.Errorf("new_group with different lists: %v, want a *dist.DesyncError", err)
					}
					if !strings.Contains(err.Error(), "new_group") {
						return fmt.Errorf("desync error does not name new_group: %v", err)
					}
					return nil
				})
			})
		})
	}
}

// TestSplitEvenOdd: Split by color rank%2, keyed in reverse order; a
// negative color joins nothing.
func TestSplitEvenOdd(t *testing.T) {
	for _, world := range []int{1, 2, 3, 5, 8} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			disttest.Spawn(t, world, func(g *dist.Group) error {
				ctx := context.Background()
				me := g.Rank()
				color := me % 2
				if world > 2 && me == world-1 {
					color = -1 // sits out
				}
				sub, err := g.Split(ctx, color, -me)
				if err != nil {
					return err
				}
				if color < 0 {
					if sub != nil {
						return fmt.Errorf("negative color got a group of %v", sub.Ranks())
					}
				} else {
					// Members of my color, in reverse rank order.
					var want []int
					for r := world - 1; r >= 0; r-- {
						if r%2 == color && !(world > 2 && r == world-1) {
							want = append(want, r)
						}
					}
					if sub == nil {
						return errors.New("no group for a non-negative color")
					}
					if sub.Size() != len(want) || sub.Rank() != slices.Index(want, me) {
						return fmt.Errorf("split color %d: rank %d size %d, want %d %d (members %v)", color, sub.Rank(), sub.Size(), slices.Index(want, me), len(want), want)
					}
					for i, r := range want {
						if sub.GlobalRank(i) != r {
							return fmt.Errorf("split: GlobalRank(%d) = %d, want %d (members %v)", i, sub.GlobalRank(i), r, want)
						}
					}
					// Group rank 0 is the highest rank of the color.
					b := tensor.Full(tensor.Int64, float64(me), 5)
					if err := sub.Broadcast(ctx, b, 0); err != nil {
						return err
					}
					if err := expect(b, func(int) float64 { return float64(want[0]) }, "broadcast from split rank 0"); err != nil {
						return err
					}
					outs := make([]*tensor.Tensor, sub.Size())
					for i := range outs {
						outs[i] = tensor.New(tensor.Int64, 1)
					}
					if err := sub.AllGather(ctx, outs, tensor.Full(tensor.Int64, float64(me), 1)); err != nil {
						return err
					}
					for i, o := range outs {
						if o.Int64s()[0] != int64(want[i]) {
							return fmt.Errorf("split all_gather slot %d holds rank %d, want %d", i, o.Int64s()[0], want[i])
						}
					}
					x := tensor.Full(tensor.Float32, float64(me+1), 70000)
					if err := sub.AllReduce(ctx, x, dist.Max); err != nil {
						return err
					}
					if err := expect(x, func(int) float64 { return float64(slices.Max(want) + 1) }, "split all_reduce"); err != nil {
						return err
					}
					if len(want) > 1 {
						// p2p in split ranks: group rank 0 to group rank 1.
						switch sub.Rank() {
						case 0:
							if err := sub.Send(ctx, tensor.FromInt64([]int64{int64(me)}), 1, 0); err != nil {
								return err
							}
						case 1:
							y := tensor.New(tensor.Int64, 1)
							src, err := sub.Recv(ctx, y, dist.AnySource, 0)
							if err != nil {
								return err
							}
							if src != 0 || y.Int64s()[0] != int64(want[0]) {
								return fmt.Errorf("split p2p: got %d from %d, want %d from 0", y.Int64s()[0], src, want[0])
							}
						}
					}
				}
				z := tensor.Full(tensor.Int64, 1, 1)
				if err := g.AllReduce(ctx, z, dist.Sum); err != nil {
					return err
				}
				return expect(z, func(int) float64 { return float64(world) }, "parent after split")
			})
		})
	}
}

// TestNestedSubgroupThenNewGroup: a subgroup made inside a subgroup, then a
// group made by everyone. Group ids must agree on every member of each
// group, whatever subgroups some members made earlier.
func TestNestedSubgroupThenNewGroup(t *testing.T) {
	disttest.SpawnWith(t, 4, disttest.Options{Timeout: 3 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
		ctx := context.Background()
		a, err := g.NewGroup(ctx, []int{0, 1})
		if err != nil {
			return err
		}
		if a != nil {
			// Only ranks 0 and 1 make this one.
			inner, err := a.Split(ctx, 0, 0)
			if err != nil {
				return err
			}
			if err := inner.Barrier(ctx); err != nil {
				return err
			}
		}
		all, err := g.NewGroup(ctx, []int{0, 1, 2, 3})
		if err != nil {
			return err
		}
		x := tensor.Full(tensor.Int64, 1, 4)
		if err := all.AllReduce(ctx, x, dist.Sum); err != nil {
			return fmt.Errorf("all_reduce in a group made after a nested subgroup: %w", err)
		}
		return expect(x, func(int) float64 { return 4 }, "all_reduce after nested subgroup")
	})
}

// TestDestroySubgroup: a destroyed subgroup refuses calls; the parent goes
// on.
func TestDestroySubgroup(t *testing.T) {
	disttest.Spawn(t, 3, func(g *dist.Group) error {
		ctx := context.Background()
		sub, err := g.NewGroup(ctx, []int{0, 1, 2})
		if err != nil {
			return err
		}
		if err := sub.Barrier(ctx); err != nil {
			return err
		}
		if err := sub.Destroy(); err != nil {
			return err
		}
		if err := sub.Barrier(ctx); !errors.Is(err, dist.ErrGroupFailed) || !errors.Is(err, dist.ErrDestroyed) {
			return fmt.Errorf("barrier on a destroyed group: %v", err)
		}
		return g.Barrier(ctx)
	})
}
