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
// bucket a parameter; every cap the model tries is at least 64 KiB and
// the model is 1.7 KiB, so across hosts the shortlist is the options'
// four buckets and one bucket, tried in turn for three rounds, and after
// them every rank keeps the one of least median on rank 0. On one host
// nothing is tried and the four buckets stay. The gradients are the
// average throughout.
func TestAutoBucketCaps(t *testing.T) {
	for _, hosts := range [][]string{{"a", "b"}, nil} {
		t.Run(fmt.Sprintf("hosts=%v", hosts), func(t *testing.T) {
			var caps [2]ddp.BucketCaps
			var plans [2]string
			var trials [2][]ddp.BucketTrial
			disttest.SpawnWith(t, 2, disttest.Options{Hosts: hosts}, func(_ *disttest.Job, g *dist.Group) error {
				ctx := context.Background()
				opt := ddp.Options{BucketCapMB: 1e-4, FirstBucketCapMB: 1e-5, AutoBucketCaps: true}
				m, err := ddp.New(ctx, mlp(uint64(g.Rank())), g, opt)
				if err != nil {
					return err
				}
				for step := range 10 {
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
					n := len(m.Buckets())
					switch {
					case step < 2 && n != 4:
						return fmt.Errorf("step %d: %d buckets before the trials, want the options' 4", step, n)
					case hosts != nil && step >= 2 && step < 8 && n != []int{4, 1}[step%2]:
						return fmt.Errorf("step %d: %d buckets in a trial, want the options' 4 and the model's 1 in turn", step, n)
					case hosts != nil && step < 8 && m.BucketTrials() != nil:
						return fmt.Errorf("step %d: trials %v reported before the choice", step, m.BucketTrials())
					}
				}
				r := g.Rank()
				caps[r], plans[r], trials[r] = m.BucketCaps(), fmt.Sprint(m.Buckets()), m.BucketTrials()
				return nil
			})
			if caps[0] != caps[1] || plans[0] != plans[1] {
				t.Fatalf("ranks differ: caps %+v, buckets %s", caps, plans)
			}
			options := ddp.BucketCaps{First: 10, Rest: 104}
			if hosts == nil {
				if n := strings.Count(plans[0], "[") - 1; n != 4 || caps[0] != options || trials[0] != nil {
					t.Errorf("one host: caps %+v, buckets %s, trials %v: want the options' caps, 4 buckets and no trials", caps[0], plans[0], trials[0])
				}
				return
			}
			tr := trials[0]
			if len(tr) != 2 || tr[0].Caps != options || tr[1].Caps.Rest < 64<<10 || tr[0].Median <= 0 || tr[1].Median <= 0 {
				t.Fatalf("rank 0's trials %+v: want the options' caps and the model's, each with a median", tr)
			}
			if len(trials[1]) != 2 || trials[1][0].Median != 0 {
				t.Errorf("rank 1's trials %+v: want the same candidates without times", trials[1])
			}
			best := tr[0]
			if tr[1].Median < tr[0].Median {
				best = tr[1]
			}
			if caps[0] != best.Caps {
				t.Errorf("kept caps %+v; trials %+v: want the one of least median", caps[0], tr)
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
