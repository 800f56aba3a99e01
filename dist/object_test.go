package dist_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
)

type objInner struct {
	Label string
	Score float64
	IDs   []int64
}

// objPayload is a typical object-collective payload: strings, a map,
// slices, a nested struct, a pointer and a slice of structs. Every field
// is non-empty so that gob's nil-for-empty decoding compares equal.
type objPayload struct {
	Name   string
	Rank   int
	Attrs  map[string]int
	Vals   []float64
	Inner  objInner
	Ptr    *objInner
	Nested []objInner
	Blob   []byte
}

// objFor is rank r's object; its encoded size grows steeply with size.
func objFor(r, size int) objPayload {
	p := objPayload{
		Name:  fmt.Sprintf("rank-%d-%s", r, strings.Repeat("é", r)),
		Rank:  r + 1,
		Attrs: map[string]int{"rank": r + 1, fmt.Sprintf("k%d", r): 2*r + 1},
		Vals:  []float64{float64(r) + 0.5, -1.25},
		Inner: objInner{Label: "inner", Score: 3.5 * float64(r+1), IDs: []int64{int64(r + 1), 42}},
		Ptr:   &objInner{Label: "ptr", Score: 1, IDs: []int64{int64(-r - 1)}},
		Blob:  []byte{byte(r + 1)},
	}
	for i := range 1 + r%3 {
		p.Nested = append(p.Nested, objInner{Label: fmt.Sprint("n", i), Score: float64(i + 1), IDs: []int64{int64(i + 1)}})
	}
	if size > 0 {
		p.Blob = make([]byte, size)
		for i := range p.Blob {
			p.Blob[i] = byte(i*7 + r + 1)
		}
	}
	return p
}

func TestBroadcastObjectEveryRoot(t *testing.T) {
	for _, world := range worlds {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			disttest.Spawn(t, world, func(g *dist.Group) error {
				ctx := context.Background()
				for root := range world {
					var v objPayload
					if g.Rank() == root {
						v = objFor(root, 100*root)
					} else {
						v = objPayload{Name: "stale", Attrs: map[string]int{"stale": 1}}
					}
					if err := dist.BroadcastObject(ctx, g, &v, root); err != nil {
						return fmt.Errorf("root %d: %w", root, err)
					}
					if want := objFor(root, 100*root); !reflect.DeepEqual(v, want) {
						return fmt.Errorf("broadcast_object from %d: got %+v, want %+v", root, v, want)
					}
				}
				// A plain type and a map.
				m := map[string][]string{}
				if g.Rank() == world-1 {
					m = map[string][]string{"a": {"x", "y"}, "b": {"z"}}
				}
				if err := dist.BroadcastObject(ctx, g, &m, world-1); err != nil {
					return err
				}
				if !reflect.DeepEqual(m, map[string][]string{"a": {"x", "y"}, "b": {"z"}}) {
					return fmt.Errorf("broadcast_object of a map: %v", m)
				}
				return nil
			})
		})
	}
}

func TestAllGatherAndGatherObject(t *testing.T) {
	for _, world := range worlds {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			disttest.Spawn(t, world, func(g *dist.Group) error {
				ctx := context.Background()
				me := g.Rank()
				// Sizes differ a lot between ranks (uneven all-gather).
				size := []int{0, 5, 70000, 3, 200000, 1, 9, 100}[me]
				all, err := dist.AllGatherObject(ctx, g, objFor(me, size))
				if err != nil {
					return err
				}
				if len(all) != world {
					return fmt.Errorf("all_gather_object: %d objects for %d ranks", len(all), world)
				}
				for r, v := range all {
					s := []int{0, 5, 70000, 3, 200000, 1, 9, 100}[r]
					if !reflect.DeepEqual(v, objFor(r, s)) {
						return fmt.Errorf("all_gather_object: object of rank %d differs: %+v", r, v.Name)
					}
				}
				for root := range world {
					got, err := dist.GatherObject(ctx, g, objFor(me, 10*me), root)
					if err != nil {
						return err
					}
					if me != root {
						if got != nil {
							return fmt.Errorf("gather_object to %d returned %d objects on rank %d, want nil", root, len(got), me)
						}
						continue
					}
					if len(got) != world {
						return fmt.Errorf("gather_object: %d objects", len(got))
					}
					for r, v := range got {
						if !reflect.DeepEqual(v, objFor(r, 10*r)) {
							return fmt.Errorf("gather_object to %d: object of rank %d differs", root, r)
						}
					}
				}
				return nil
			})
		})
	}
}

func TestScatterObjectUnevenSizes(t *testing.T) {
	for _, world := range worlds {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			disttest.Spawn(t, world, func(g *dist.Group) error {
				ctx := context.Background()
				me := g.Rank()
				size := func(r int) int { return []int{300000, 0, 17, 1 << 16, 2, 90000, 0, 5}[r] }
				for root := range world {
					var vs []objPayload
					if me == root {
						for r := range world {
							o := objFor(r, size(r))
							o.Name += fmt.Sprint(" from ", root)
							vs = append(vs, o)
						}
					}
					got, err := dist.ScatterObject(ctx, g, vs, root)
					if err != nil {
						return fmt.Errorf("root %d: %w", root, err)
					}
					want := objFor(me, size(me))
					want.Name += fmt.Sprint(" from ", root)
					if !reflect.DeepEqual(got, want) {
						return fmt.Errorf("scatter_object from %d: rank %d got %q (%d blob bytes), want %q (%d)", root, me, got.Name, len(got.Blob), want.Name, len(want.Blob))
					}
				}
				return nil
			})
		})
	}
}

func TestScatterObjectWrongCount(t *testing.T) {
	disttest.Spawn(t, 1, func(g *dist.Group) error {
		_, err := dist.ScatterObject(context.Background(), g, []int{1, 2}, 0)
		var ie *dist.InputError
		if !errors.As(err, &ie) {
			return fmt.Errorf("scatter_object of 2 objects in a group of 1: %v", err)
		}
		return nil
	})
}

// TestScatterObjectHostileSizes: a root that announces a huge size for
// another member's slot makes every member fail with an error naming it,
// before anything is allocated (each member checked only its own size, and
// allocated the largest: a receiver ran out of memory).
func TestScatterObjectHostileSizes(t *testing.T) {
	disttest.Spawn(t, 3, func(g *dist.Group) error {
		ctx := context.Background()
		if g.Rank() == 0 {
			// Not ScatterObject: the announcement alone, as a hostile root.
			return g.Broadcast(ctx, tensor.FromInt64([]int64{8, 8, 1 << 50}, 3), 0)
		}
		_, err := dist.ScatterObject[string](ctx, g, nil, 0)
		if err == nil || !strings.Contains(err.Error(), "member 2") || !strings.Contains(err.Error(), "limit") {
			return fmt.Errorf("rank %d: a huge announced size gave %v", g.Rank(), err)
		}
		return nil
	})
}
