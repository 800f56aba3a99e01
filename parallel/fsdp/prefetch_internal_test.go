package fsdp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// TestBackwardPrefetchOrder records, on every rank of 2, the all-gathers
// one backward pass issues (on demand, "gather U", or ahead, "prefetch
// U"), each parameter's gradient becoming ready ("grad U") and each
// reduction issued ("reduce U"), over four wrapped Linear units, and
// checks each policy's definition for every unit B[i] after the first of
// backward (B[i-1] the unit backward runs before it):
//
//   - BackwardPre: B[i]'s all-gather is a prefetch, issued before the
//     first gradient of B[i-1] is ready: before B[i-1]'s gradients are
//     computed;
//   - BackwardPost: it is a prefetch issued after the last gradient of
//     B[i-1] is ready and before B[i-1]'s reduce-scatter, and before any
//     of B[i]'s own gradients;
//   - BackwardNone: nothing is prefetched; B[i] is gathered on demand,
//     after B[i-1]'s reduction and before its own gradients.
func TestBackwardPrefetchOrder(t *testing.T) {
	for _, p := range []BackwardPrefetch{BackwardPre, BackwardPost, BackwardNone} {
		t.Run(p.String(), func(t *testing.T) {
			disttest.SpawnWith(t, 2, disttest.Options{Timeout: 30 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
				ctx := context.Background()
				rng := tensor.NewRNG(1)
				net := nn.NewSequential(nn.NewLinear(rng, 5, 8, true), nn.NewTanh(), nn.NewLinear(rng, 8, 8, true), nn.NewTanh(),
					nn.NewLinear(rng, 8, 8, true), nn.NewTanh(), nn.NewLinear(rng, 8, 3, true))
				isLinear := func(_ string, m nn.Module) bool { _, ok := m.(*nn.Linear); return ok }
				f, err := New(ctx, net, g, Options{Wrap: isLinear, BackwardPrefetch: p})
				if err != nil {
					return err
				}
				var events []string
				f.trace = func(e string) { events = append(events, e) }
				x := autograd.Const(tensor.Randn(tensor.NewRNG(uint64(g.Rank())), 4, 5))
				loss := nn.MSELoss(nn.Call(f, x), autograd.Const(tensor.Zeros(4, 3)))
				// The forward passes' gathers are not backward's.
				events = events[:0]
				if err := f.Backward(ctx, loss); err != nil {
					return err
				}
				back := []string{"6", "4", "2", "0"}
				if got := f.order; len(got) != 4 {
					return fmt.Errorf("forward order of %d units, want 4", len(got))
				}
				return checkPrefetchOrder(p, back, events)
			})
		})
	}
}

// checkPrefetchOrder checks the events of one backward pass over units
// back (in backward's order) against policy p (TestBackwardPrefetchOrder).
func checkPrefetchOrder(p BackwardPrefetch, back, events []string) error {
	first := func(e string) int { return slices.Index(events, e) }
	last := func(e string) int {
		for i := len(events) - 1; i >= 0; i-- {
			if events[i] == e {
				return i
			}
		}
		return -1
	}
	say := func(format string, a ...any) error {
		return fmt.Errorf("%v: "+format+"\nevents: %s", append(append([]any{p}, a...), strings.Join(events, ", "))...)
	}
	for _, u := range back {
		if first("grad "+u) < 0 || first("reduce "+u) < 0 {
			return say("unit %s has no gradient or no reduction", u)
		}
	}
	if p == BackwardNone && slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "prefetch") }) {
		return say("a prefetch")
	}
	for i := 1; i < len(back); i++ {
		prev, u := back[i-1], back[i]
		pre, dem := first("prefetch "+u), first("gather "+u)
		switch p {
		case BackwardPre, BackwardPost:
			if pre < 0 || dem >= 0 {
				return say("unit %s gathered on demand (%d) or not prefetched (%d)", u, dem, pre)
			}
			if pre > first("grad "+u) {
				return say("unit %s prefetched after its own gradients", u)
			}
		case BackwardNone:
			if dem < 0 || dem < last("reduce "+prev) || dem > first("grad "+u) {
				return say("unit %s not gathered between the reduction of %s and its own gradients", u, prev)
			}
		}
		switch {
		case p == BackwardPre && pre > first("grad "+prev):
			return say("unit %s prefetched after unit %s's first gradient, want before its gradients are computed", u, prev)
		case p == BackwardPost && (pre < last("grad "+prev) || pre > first("reduce "+prev)):
			return say("unit %s prefetched at %d, want after unit %s's last gradient (%d) and before its reduction (%d)", u, pre, prev, last("grad "+prev), first("reduce "+prev))
		}
	}
	return nil
}
