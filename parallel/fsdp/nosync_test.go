package fsdp_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/fsdp"
	"github.com/godist/godist/tensor"
)

// micro is the number of micro-batches of TestNoSync (the last one
// synchronised), each microRows sequences a rank.
const micro, microRows = 3, 2

// bigBatch is rank r's whole batch for TestNoSync: micro*microRows
// sequences, micro-batch i its rows [i*microRows, (i+1)*microRows).
func bigBatch(r int) (x, y *tensor.Tensor) {
	rng := tensor.NewRNG(uint64(7000 + r))
	n := micro * microRows
	x, y = tensor.New(tensor.Int64, n, cfg.Block), tensor.New(tensor.Int64, n, cfg.Block)
	for i := range n * cfg.Block {
		x.Reshape(-1).Set(float64(rng.IntN(256)), i)
		y.Reshape(-1).Set(float64(rng.IntN(256)), i)
	}
	return x, y
}

// noSyncTol bounds how far the accumulated gradients and the parameters
// after a step may lie from those of the whole batch, relative to the
// largest magnitude of the tensor compared: the two sum the same terms
// in a different order in float32.
const noSyncTol = 1e-5

// maxRelDiff is the largest |a-b| over the largest |b|.
func maxRelDiff(a, b *tensor.Tensor) float64 {
	av, bv := a.Values(), b.Values()
	d, m := 0.0, 0.0
	for i := range av {
		d = max(d, math.Abs(av[i]-bv[i]))
		m = max(m, math.Abs(bv[i]))
	}
	if m == 0 {
		return d
	}
	return d / m
}

// TestNoSync: micro-1 backward passes inside NoSync and one after it,
// each on a micro-batch with its mean loss scaled by 1/micro, leave in
// the shards the gradients of one pass over the whole batch with its mean
// loss (within noSyncTol), and the optimizer's step then gives the same
// shards; inside NoSync nothing is reduced (Traffic.Reduce stays put),
// the shards' gradients stay nil, and Memory.UnshardedGrads holds every
// unit's whole gradient until the synchronised pass drops it. FullShard
// (with BackwardPost too) and NoShard at world 2, nested units at world 3
// (every flat parameter padded), ShardGradOp and HybridShard (two shard
// groups of two) at world 4.
func TestNoSync(t *testing.T) {
	type result struct{ grads, params []*tensor.Tensor }
	cases := []struct {
		world int
		opt   fsdp.Options
	}{
		{2, fsdp.Options{Strategy: fsdp.FullShard, Wrap: isBlock}},
		{2, fsdp.Options{Strategy: fsdp.NoShard, Wrap: isBlock}},
		{2, fsdp.Options{Strategy: fsdp.FullShard, Wrap: isBlock, BackwardPrefetch: fsdp.BackwardPost}},
		{3, fsdp.Options{Strategy: fsdp.FullShard, Wrap: blockAndMLP}},
		{4, fsdp.Options{Strategy: fsdp.ShardGradOp, Wrap: isBlock}},
		{4, fsdp.Options{Strategy: fsdp.HybridShard, ShardSize: 2, Wrap: isBlock}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("world%d/%v/units=%d/%v", c.world, c.opt.Strategy, unitsOf(c.opt), c.opt.BackwardPrefetch), func(t *testing.T) {
			// train runs one step on every rank: backward over the whole
			// batch (accumulate false) or over its micro-batches.
			train := func(accumulate bool) []result {
				out := make([]result, c.world)
				disttest.SpawnWith(t, c.world, disttest.Options{Timeout: time.Minute}, func(_ *disttest.Job, g *dist.Group) error {
					ctx := context.Background()
					m, err := fsdp.New(ctx, gpt(uint64(g.Rank())), g, c.opt)
					if err != nil {
						return err
					}
					o := newOpt(m.Parameters())
					x, y := bigBatch(g.Rank())
					pass := func(i, rows int, scale float64) error {
						xi, yi := x.Narrow(0, i*rows, rows).Clone(), y.Narrow(0, i*rows, rows).Clone()
						loss := models.Loss(nn.Call(m, autograd.Const(xi)), yi)
						return m.Backward(ctx, autograd.MulScalar(loss, scale))
					}
					if !accumulate {
						if err := pass(0, micro*microRows, 1); err != nil {
							return err
						}
					} else {
						sent := m.Traffic().Reduce
						err := m.NoSync(func() error {
							for i := range micro - 1 {
								if err := pass(i, microRows, 1.0/micro); err != nil {
									return err
								}
							}
							return nil
						})
						if err != nil {
							return err
						}
						if d := m.Traffic().Reduce - sent; d != 0 {
							return fmt.Errorf("%d gradient bytes reduced inside NoSync, want none", d)
						}
						// Every unit's padded flat gradient: its shard
						// times the ranks it is sharded over.
						over := c.world
						switch c.opt.Strategy {
						case fsdp.NoShard:
							over = 1
						case fsdp.HybridShard:
							over = c.opt.ShardSize
						}
						whole := 0
						for _, p := range m.Parameters() {
							if p.Grad() != nil {
								return errors.New("a shard has a gradient after the passes inside NoSync")
							}
							whole += 4 * p.Value().Numel() * over
						}
						if n := m.Memory().UnshardedGrads; n != whole {
							return fmt.Errorf("Memory.UnshardedGrads %d inside NoSync, want every unit's whole gradient, %d bytes", n, whole)
						}
						if err := pass(micro-1, microRows, 1.0/micro); err != nil {
							return err
						}
						if n := m.Memory().UnshardedGrads; n != 0 {
							return fmt.Errorf("Memory.UnshardedGrads %d after the synchronised pass, want 0", n)
						}
					}
					var r result
					for _, p := range m.Parameters() {
						if p.Grad() == nil {
							return errors.New("a shard has no gradient after the synchronised pass")
						}
						r.grads = append(r.grads, p.Grad().Clone())
					}
					o.Step()
					for _, p := range m.Parameters() {
						r.params = append(r.params, p.Value().Clone())
					}
					out[g.Rank()] = r
					return nil
				})
				if t.Failed() {
					t.FailNow()
				}
				return out
			}
			want, got := train(false), train(true)
			worstG, worstP := 0.0, 0.0
			for r := range c.world {
				for i := range want[r].grads {
					dg, dp := maxRelDiff(got[r].grads[i], want[r].grads[i]), maxRelDiff(got[r].params[i], want[r].params[i])
					worstG, worstP = max(worstG, dg), max(worstP, dp)
					if dg > noSyncTol {
						t.Errorf("rank %d shard %d: accumulated gradient differs from the whole batch's by %.3g of its largest", r, i, dg)
					}
					if dp > noSyncTol {
						t.Errorf("rank %d shard %d: parameters after the step differ by %.3g of their largest", r, i, dp)
					}
				}
			}
			t.Logf("largest relative difference from the whole batch: gradients %.2g, parameters after the step %.2g", worstG, worstP)
		})
	}
}
