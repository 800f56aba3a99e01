package ddp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/ddp"
)

// TestAutoBucketCaps runs AutoBucketCaps on two hosts (the cost model
// covers the group) and on one (it does not). The options ask for a
// bucket a parameter; every cap the chooser tries is at least 64 KiB, and
// the model is 1.7 KiB, so across hosts the second iteration's choice
// must leave one bucket, the same on both ranks, while on one host the
// four buckets stay. The gradients are the average throughout.
func TestAutoBucketCaps(t *testing.T) {
	for _, hosts := range [][]string{{"a", "b"}, nil} {
		t.Run(fmt.Sprintf("hosts=%v", hosts), func(t *testing.T) {
			var caps [2]ddp.BucketCaps
			var plans [2]string
			disttest.SpawnWith(t, 2, disttest.Options{Hosts: hosts}, func(_ *disttest.Job, g *dist.Group) error {
				ctx := context.Background()
				opt := ddp.Options{BucketCapMB: 1e-4, FirstBucketCapMB: 1e-5, AutoBucketCaps: true}
				m, err := ddp.New(ctx, mlp(uint64(g.Rank())), g, opt)
				if err != nil {
					return err
				}
				for step := range 4 {
					nn.ZeroGrad(m, true)
					x, y := batch(g.Rank(), step, 8)
					if err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y)); err != nil {
						return err
					}
					want := reference(2, step, 8)
					for _, p := range nn.NamedParameters(m.Module) {
						if err := close(p.Value.Grad(), want[p.Name], 1e-5); err != nil {
							return fmt.Errorf("step %d %s: %w", step, p.Name, err)
						}
					}
					if n := len(m.Buckets()); step < 2 && n != 4 {
						return fmt.Errorf("step %d: %d buckets before the choice, want the options' 4", step, n)
					}
				}
				caps[g.Rank()], plans[g.Rank()] = m.BucketCaps(), fmt.Sprint(m.Buckets())
				return nil
			})
			if caps[0] != caps[1] || plans[0] != plans[1] {
				t.Fatalf("ranks differ: caps %+v, buckets %s", caps, plans)
			}
			n := strings.Count(plans[0], "[") - 1
			switch {
			case hosts != nil && (n != 1 || caps[0].Rest < 64<<10):
				t.Errorf("across hosts: caps %+v, buckets %s: want a chosen cap of at least 64 KiB and one bucket", caps[0], plans[0])
			case hosts == nil && (n != 4 || caps[0] != ddp.BucketCaps{First: 10, Rest: 104}):
				t.Errorf("one host: caps %+v, buckets %s: want the options' caps and 4 buckets", caps[0], plans[0])
			}
		})
	}
}

// TestBucketOrderKeepsBuckets checks that BucketOrder carries the
// buckets themselves: a model planned with other caps takes them over
// exactly, as a resumed run must; the form without bucket ends (older
// checkpoints) is cut by the model's caps; malformed ones are refused.
func TestBucketOrderKeepsBuckets(t *testing.T) {
	disttest.Spawn(t, 1, func(g *dist.Group) error {
		ctx := context.Background()
		small, err := ddp.New(ctx, mlp(1), g, ddp.Options{BucketCapMB: 1e-4, FirstBucketCapMB: 1e-5})
		if err != nil {
			return err
		}
		big, err := ddp.New(ctx, mlp(1), g, ddp.Options{})
		if err != nil {
			return err
		}
		s := small.BucketOrder()
		if s != "3|2|1|0|" {
			return fmt.Errorf("BucketOrder %q, want a parameter a bucket, each ended", s)
		}
		if err := big.SetBucketOrder(s); err != nil {
			return err
		}
		if got, want := fmt.Sprint(big.Buckets()), fmt.Sprint(small.Buckets()); got != want {
			return fmt.Errorf("buckets %s after SetBucketOrder(%q), want %s", got, s, want)
		}
		if c := big.BucketCaps(); c.First != 12 || c.Rest != 384 {
			return fmt.Errorf("caps %+v, want the plan's own (first bucket 12 B, largest 384 B)", c)
		}
		if err := big.SetBucketOrder("3,2|1,0|"); err != nil || fmt.Sprint(big.Buckets()) != "[[2.bias 2.weight] [0.bias 0.weight]]" {
			return fmt.Errorf("two buckets: %v, %v", err, big.Buckets())
		}
		if err := small.SetBucketOrder("3,2,1,0"); err != nil || len(small.Buckets()) != 4 {
			return fmt.Errorf("without ends: %v, %v: want the caps' 4 buckets", err, small.Buckets())
		}
		for _, bad := range []string{"3,2||1,0|", "3,2|1|", "3,2,1,0,0|", "|", "x|"} {
			if err := big.SetBucketOrder(bad); err == nil {
				return fmt.Errorf("SetBucketOrder(%q) accepted", bad)
			}
		}
		return nil
	})
}
