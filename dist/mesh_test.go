package dist_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
)

// TestMeshGroups: on meshes of 1, 2 and 3 dimensions, every member's
// subgroup of each dimension holds exactly the members that differ from it
// in that coordinate, ranked by it, and an all-reduce in it sums over
// those members only.
func TestMeshGroups(t *testing.T) {
	cases := []struct {
		shape []int
		names []string
	}{
		{[]int{4}, []string{"dp"}},
		{[]int{2, 2}, []string{"pp", "dp"}},
		{[]int{3, 2}, []string{"pp", "dp"}},
		{[]int{2, 1, 3}, []string{"pp", "tp", "dp"}},
	}
	for _, c := range cases {
		world := 1
		for _, s := range c.shape {
			world *= s
		}
		t.Run(fmt.Sprint(c.shape), func(t *testing.T) {
			disttest.Spawn(t, world, func(g *dist.Group) error {
				ctx := context.Background()
				m, err := dist.NewMesh(ctx, g, c.shape, c.names)
				if err != nil {
					return err
				}
				me := m.Coords(g.Rank())
				if m.RankAt(me...) != g.Rank() {
					return fmt.Errorf("RankAt(%v) = %d, want %d", me, m.RankAt(me...), g.Rank())
				}
				for d, name := range c.names {
					sub := m.Group(name)
					var want []int
					for r := range world {
						rc := m.Coords(r)
						other := slices.Clone(rc)
						other[d] = me[d]
						if slices.Equal(other, me) {
							want = append(want, r)
						}
					}
					if sub.Size() != c.shape[d] || !slices.Equal(sub.Ranks(), want) || sub.Rank() != me[d] || m.Coord(name) != me[d] {
						return fmt.Errorf("dimension %s: group ranks %v rank %d, want %v rank %d", name, sub.Ranks(), sub.Rank(), want, me[d])
					}
					x := tensor.FromInt64([]int64{int64(g.Rank())})
					if err := sub.AllReduce(ctx, x, dist.Sum); err != nil {
						return err
					}
					sum := 0
					for _, r := range want {
						sum += r
					}
					if x.Int64s()[0] != int64(sum) {
						return fmt.Errorf("dimension %s: all_reduce gave %d, want %d", name, x.Int64s()[0], sum)
					}
				}
				return nil
			})
		})
	}
}

func TestMeshBadArguments(t *testing.T) {
	disttest.Spawn(t, 4, func(g *dist.Group) error {
		ctx := context.Background()
		for _, c := range []struct {
			shape []int
			names []string
			want  string
		}{
			{[]int{2, 3}, []string{"a", "b"}, "holds 6 ranks, the group has 4"},
			{[]int{2, 2}, []string{"a"}, "one name per dimension"},
			{[]int{2, 2}, []string{"a", "a"}, "distinct"},
			{[]int{4, 0}, []string{"a", "b"}, `"b" has size 0`},
		} {
			_, err := dist.NewMesh(ctx, g, c.shape, c.names)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				return fmt.Errorf("NewMesh(%v, %q) = %v, want an error containing %q", c.shape, c.names, err, c.want)
			}
		}
		return nil
	})
}

// TestAbortTellsTheMembers: a member that aborts a group fails its peers'
// calls in flight at once with an *AbortError carrying its reason.
func TestAbortTellsTheMembers(t *testing.T) {
	disttest.Spawn(t, 3, func(g *dist.Group) error {
		ctx := context.Background()
		if g.Rank() == 2 {
			g.Abort(fmt.Errorf("rank 7 of another group is gone"))
			if err := g.Barrier(ctx); err == nil || !strings.Contains(err.Error(), "rank 7 of another group is gone") {
				return fmt.Errorf("a call after Abort: %v", err)
			}
			return nil
		}
		x := tensor.New(tensor.Float32, 4)
		err := g.AllReduce(ctx, x, dist.Sum)
		var ae *dist.AbortError
		if !errors.As(err, &ae) || ae.Rank != 2 || !strings.Contains(ae.Reason, "rank 7 of another group is gone") {
			return fmt.Errorf("all_reduce with rank 2 aborting: %v, want an *AbortError from rank 2 with its reason", err)
		}
		return nil
	})
}
