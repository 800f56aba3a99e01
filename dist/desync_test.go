package dist_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
)

// desyncCase is one way for a rank (odd) to issue a call unlike the
// others'. The error must name both calls: want holds a word of each.
type desyncCase struct {
	name string
	call func(ctx context.Context, g *dist.Group, odd bool) error
	want [2]string // a word of the usual call and of the odd one
}

var desyncCases = []desyncCase{
	{"op", func(ctx context.Context, g *dist.Group, odd bool) error {
		x := tensor.New(tensor.Float32, 16)
		if odd {
			return g.Broadcast(ctx, x, 0)
		}
		return g.AllReduce(ctx, x, dist.Sum)
	}, [2]string{"all_reduce", "broadcast"}},
	{"count", func(ctx context.Context, g *dist.Group, odd bool) error {
		n := 16
		if odd {
			n = 17
		}
		return g.AllReduce(ctx, tensor.New(tensor.Float32, n), dist.Sum)
	}, [2]string{"16 elements", "17 elements"}},
	{"dtype", func(ctx context.Context, g *dist.Group, odd bool) error {
		d := tensor.Float32
		if odd {
			d = tensor.Int32 // same byte count
		}
		return g.AllReduce(ctx, tensor.New(d, 16), dist.Sum)
	}, [2]string{tensor.Float32.String(), tensor.Int32.String()}},
	{"root", func(ctx context.Context, g *dist.Group, odd bool) error {
		root := 0
		if odd {
			root = 1
		}
		return g.Broadcast(ctx, tensor.New(tensor.Float32, 16), root)
	}, [2]string{"root 0", "root 1"}},
	{"reduce op", func(ctx context.Context, g *dist.Group, odd bool) error {
		op := dist.Sum
		if odd {
			op = dist.Max
		}
		return g.AllReduce(ctx, tensor.New(tensor.Float32, 16), op)
	}, [2]string{"SUM", "MAX"}},
	{"op large", func(ctx context.Context, g *dist.Group, odd bool) error {
		x := tensor.New(tensor.Float32, 1<<19)
		if odd {
			return g.AllGatherIntoTensor(ctx, tensor.New(tensor.Float32, (1<<19)*g.Size()), x)
		}
		return g.AllReduce(ctx, x, dist.Sum)
	}, [2]string{"all_reduce", "all_gather"}},
	// All-to-all with equal splits may run Bruck's algorithm, the others
	// the pairwise exchange: a member that passes split sizes where the
	// others pass none, or another block, is out of step (as in gloo).
	{"all_to_all splits", func(ctx context.Context, g *dist.Group, odd bool) error {
		w := g.Size()
		in, out := tensor.New(tensor.Float32, 2*w), tensor.New(tensor.Float32, 2*w)
		if odd {
			splits := make([]int, w)
			for i := range splits {
				splits[i] = 2
			}
			return g.AllToAllSingle(ctx, out, in, splits, splits)
		}
		return g.AllToAllSingle(ctx, out, in, nil, nil)
	}, [2]string{"all_to_all_single (equal splits)", "all_to_all("}},
	{"all_to_all block", func(ctx context.Context, g *dist.Group, odd bool) error {
		n := 2 * g.Size()
		if odd {
			n = 3 * g.Size()
		}
		return g.AllToAllSingle(ctx, tensor.New(tensor.Float32, n), tensor.New(tensor.Float32, n), nil, nil)
	}, [2]string{"2 elements", "3 elements"}},
}

// TestDesyncDetected: when one rank issues a different call than the
// others, every rank fails within 2s (the mismatched call itself, or the
// next call for a rank whose part of it finished before anyone noticed)
// with a *dist.DesyncError naming both ranks and both calls, and the group
// stays failed.
func TestDesyncDetected(t *testing.T) {
	for _, c := range desyncCases {
		wos := [][2]int{{2, 1}, {3, 0}, {3, 2}, {5, 4}}
		if strings.HasPrefix(c.name, "all_to_all") {
			wos = append(wos, [2]int{9, 4}) // Bruck's algorithm
		}
		for _, wo := range wos {
			world, odd := wo[0], wo[1]
			{
				t.Run(fmt.Sprintf("%s/world%d/odd%d", c.name, world, odd), func(t *testing.T) {
					// The subtests mostly wait: run them side by side.
					t.Parallel()
					disttest.SpawnWith(t, world, disttest.Options{Timeout: 2500 * time.Millisecond}, func(_ *disttest.Job, g *dist.Group) error {
						ctx := context.Background()
						// One good call first, so the desync is not at call 1.
						// A rank still leaving it may already hear of the
						// desync from faster ranks: that counts too.
						start := time.Now()
						err := g.Barrier(ctx)
						if err == nil {
							start = time.Now()
							err = c.call(ctx, g, g.Rank() == odd)
						}
						if err == nil {
							err = g.Barrier(ctx)
						}
						if el := time.Since(start); el > 2*time.Second {
							return fmt.Errorf("desync noticed after %v (err %v)", el.Round(time.Millisecond), err)
						}
						if err == nil {
							return errors.New("no error from a desynchronised call nor from the call after it")
						}
						var de *dist.DesyncError
						if !errors.As(err, &de) {
							return fmt.Errorf("got %v, want a *dist.DesyncError", err)
						}
						if err := checkDesync(de, odd, c.want); err != nil {
							return err
						}
						if ge := g.Err(); !errors.As(ge, new(*dist.DesyncError)) {
							return fmt.Errorf("Group.Err() = %v, want the desync", ge)
						}
						// The group stays failed.
						for range 2 {
							err := g.AllReduce(ctx, tensor.New(tensor.Float32, 4), dist.Sum)
							if !errors.Is(err, dist.ErrGroupFailed) || !errors.As(err, &de) {
								return fmt.Errorf("call after a desync: %v, want dist.ErrGroupFailed wrapping the desync", err)
							}
						}
						if err := g.ISend(tensor.New(tensor.Float32, 1), (g.Rank()+1)%world, 0).Wait(ctx); !errors.Is(err, dist.ErrGroupFailed) {
							return fmt.Errorf("isend after a desync: %v, want dist.ErrGroupFailed", err)
						}
						return nil
					})
				})
			}
		}
	}
}

// checkDesync checks that a desync error names the odd rank and another,
// and the two calls.
func checkDesync(de *dist.DesyncError, odd int, want [2]string) error {
	msg := de.Error()
	if de.Rank == de.Peer || (de.Rank != odd && de.Peer != odd) {
		return fmt.Errorf("desync between ranks %d and %d, want one of them to be %d: %s", de.Rank, de.Peer, odd, msg)
	}
	for _, r := range []int{de.Rank, de.Peer} {
		if !strings.Contains(msg, fmt.Sprintf("rank %d", r)) {
			return fmt.Errorf("desync error does not name rank %d: %s", r, msg)
		}
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			return fmt.Errorf("desync error does not mention %q: %s", w, msg)
		}
	}
	mine, theirs := de.Mine, de.Theirs
	if de.Rank == odd {
		mine, theirs = theirs, mine
	}
	// mine is now the usual call, theirs the odd one.
	if !strings.Contains(mine, want[0]) || !strings.Contains(theirs, want[1]) {
		return fmt.Errorf("desync error attributes the calls wrongly (rank %d: %s, rank %d: %s; odd rank %d did %q): %s", de.Rank, de.Mine, de.Peer, de.Theirs, odd, want[1], msg)
	}
	return nil
}

// TestDesyncAsync: the async forms detect it too and every pending Work
// fails.
func TestDesyncAsync(t *testing.T) {
	disttest.SpawnWith(t, 4, disttest.Options{Timeout: 3 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
		ctx := context.Background()
		n := 1000
		if g.Rank() == 2 {
			n = 1001
		}
		w1 := g.AllReduceAsync(tensor.New(tensor.Float32, n), dist.Sum)
		w2 := g.AllReduceAsync(tensor.New(tensor.Float32, 10), dist.Sum)
		return within(2*time.Second, "async desync", func() error {
			e1, e2 := w1.Wait(ctx), w2.Wait(ctx)
			if e1 == nil && e2 == nil {
				return errors.New("both async calls succeeded")
			}
			for _, e := range []error{e1, e2} {
				if e != nil && !errors.As(e, new(*dist.DesyncError)) {
					return fmt.Errorf("async desync: %v, want a *dist.DesyncError", e)
				}
			}
			return nil
		})
	})
}
