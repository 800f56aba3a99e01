package fsdp_test

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
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/fsdp"
)

// TestBackwardPrefetchSameGradients: BackwardPost and BackwardNone give,
// step after step, the shards' gradients and parameters that the default
// BackwardPre gives, bit for bit, at worlds 2 and 3, with units of one
// and of two parameter groups, nested units and HybridShard; and, with
// one unit a block, BackwardPost holds no more gathered than BackwardNone
// (the root and one block) where BackwardPre holds a second block.
func TestBackwardPrefetchSameGradients(t *testing.T) {
	byDecay := func(name string, p *autograd.Var) int {
		if decays(name, p) {
			return 0
		}
		return 1
	}
	policies := []fsdp.BackwardPrefetch{fsdp.BackwardPre, fsdp.BackwardPost, fsdp.BackwardNone}
	type run struct {
		grads, params [][]float64 // rank 0's shards, gradients after each step
		peak          int         // rank 0's Memory.PeakGathered
	}
	for _, c := range []struct {
		world int
		base  fsdp.Options
	}{
		{2, fsdp.Options{Strategy: fsdp.FullShard, Wrap: isBlock}},
		{2, fsdp.Options{Strategy: fsdp.FullShard, Wrap: isBlock, Group: byDecay}},
		{2, fsdp.Options{Strategy: fsdp.HybridShard, ShardSize: 1, Wrap: blockAndMLP}},
		{3, fsdp.Options{Strategy: fsdp.FullShard, Wrap: isBlock}},
		{3, fsdp.Options{Strategy: fsdp.FullShard, Wrap: blockAndMLP, Group: byDecay}},
	} {
		name := fmt.Sprintf("world%d/%v/units=%d/groups=%v", c.world, c.base.Strategy, unitsOf(c.base), c.base.Group != nil)
		t.Run(name, func(t *testing.T) {
			runs := make([]run, len(policies))
			for k, p := range policies {
				opt := c.base
				opt.BackwardPrefetch = p
				disttest.SpawnWith(t, c.world, disttest.Options{Timeout: time.Minute}, func(_ *disttest.Job, g *dist.Group) error {
					ctx := context.Background()
					m, err := fsdp.New(ctx, gpt(uint64(g.Rank())), g, opt)
					if err != nil {
						return err
					}
					o := newOpt(m.Parameters())
					var r run
					for step := range 3 {
						x, y := tokens(g.Rank(), step)
						o.ZeroGrad(true)
						if err := m.Backward(ctx, models.Loss(nn.Call(m, autograd.Const(x)), y)); err != nil {
							return err
						}
						for _, p := range m.Parameters() {
							r.grads = append(r.grads, p.Grad().Values())
						}
						o.Step()
					}
					for _, p := range m.Parameters() {
						r.params = append(r.params, p.Value().Values())
					}
					r.peak = m.Memory().PeakGathered
					if g.Rank() == 0 {
						runs[k] = r
					}
					return nil
				})
				if t.Failed() {
					t.FailNow()
				}
			}
			for k := 1; k < len(policies); k++ {
				if !slices.EqualFunc(runs[k].grads, runs[0].grads, slices.Equal) {
					t.Errorf("%v: the shards' gradients differ from BackwardPre's", policies[k])
				}
				if !slices.EqualFunc(runs[k].params, runs[0].params, slices.Equal) {
					t.Errorf("%v: the shards after 3 steps differ from BackwardPre's", policies[k])
				}
			}
			pre, post, none := runs[0].peak, runs[1].peak, runs[2].peak
			t.Logf("peak gathered: BackwardPre %d bytes, BackwardPost %d, BackwardNone %d", pre, post, none)
			if c.base.Strategy == fsdp.FullShard && c.base.Group == nil && unitsOf(c.base) == cfg.Layers+1 && (post != none || pre <= post) {
				t.Errorf("peak gathered BackwardPost %d, BackwardNone %d, BackwardPre %d: want Post = None < Pre", post, none, pre)
			}
		})
	}
}

// TestBackwardPrefetchOptions: contradictory or unknown prefetch options
// are refused by New with an error naming the fields.
func TestBackwardPrefetchOptions(t *testing.T) {
	disttest.Spawn(t, 1, func(g *dist.Group) error {
		for _, c := range []struct {
			opt  fsdp.Options
			want string
		}{
			{fsdp.Options{NoBackwardPrefetch: true, BackwardPrefetch: fsdp.BackwardPost}, "NoBackwardPrefetch with BackwardPrefetch BackwardPost"},
			{fsdp.Options{BackwardPrefetch: fsdp.BackwardPrefetch(7)}, "BackwardPrefetch is BackwardPrefetch(7)"},
		} {
			_, err := fsdp.New(context.Background(), gpt(0), g, c.opt)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				return fmt.Errorf("%+v: %v, want an error saying %q", c.opt, err, c.want)
			}
		}
		// NoBackwardPrefetch alone is BackwardNone, and BackwardNone with
		// it is no contradiction.
		_, err := fsdp.New(context.Background(), gpt(0), g, fsdp.Options{NoBackwardPrefetch: true, BackwardPrefetch: fsdp.BackwardNone})
		return err
	})
}
