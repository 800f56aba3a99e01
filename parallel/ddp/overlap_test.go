package ddp_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/ddp"
)

// TestReductionOverlapsBackward checks the claim that DDP reduces its
// buckets while backward runs: with one bucket a parameter, the
// communication hook of the first bucket (the last layer's bias, whose
// gradient is ready first) must be called before the gradients of the
// first layer (the last that backward computes) are ready. The same check
// run with NoOverlap, which starts every reduction after backward, must
// see the opposite order: that is what makes this test able to fail.
func TestReductionOverlapsBackward(t *testing.T) {
	for _, noOverlap := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoOverlap=%v", noOverlap), func(t *testing.T) {
			disttest.Spawn(t, 2, func(g *dist.Group) error {
				ctx := context.Background()
				var mu sync.Mutex
				var events []string
				log := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
				hook := func(g *dist.Group, b *ddp.GradBucket) *dist.Work {
					log(fmt.Sprintf("reduce bucket %d", b.Index))
					return ddp.AllReduceHook(g, b)
				}
				net := mlp(1)
				m, err := ddp.New(ctx, net, g, ddp.Options{BucketCapMB: 1e-4, FirstBucketCapMB: 1e-5, CommHook: hook, NoOverlap: noOverlap})
				if err != nil {
					return err
				}
				for _, p := range nn.NamedParameters(net) {
					if p.Name == "0.weight" || p.Name == "0.bias" {
						p.Value.RegisterGradReadyHook(func(*autograd.Var) { log(p.Name + " ready") })
					}
				}
				x, y := batch(g.Rank(), 0, 4)
				if err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y)); err != nil {
					return err
				}
				first := slices.Index(events, "reduce bucket 0")
				layer0 := min(slices.Index(events, "0.weight ready"), slices.Index(events, "0.bias ready"))
				if first < 0 || layer0 < 0 || len(events) != 6 {
					return fmt.Errorf("events %q: want 4 reductions and 2 gradients of layer 0", events)
				}
				if overlapped := first < layer0; overlapped == noOverlap {
					return fmt.Errorf("NoOverlap=%v, yet the order was %q", noOverlap, events)
				}
				return nil
			})
		})
	}
}
