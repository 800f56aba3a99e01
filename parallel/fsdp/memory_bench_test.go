package fsdp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/parallel/fsdp"
	"github.com/godist/godist/parallel/zero"
	"github.com/godist/godist/tensor"
)

// bigGPT is the tests' GPT scaled to 21.6M parameters, as
// examples/tinygpt --layers 6 --width 544 --heads 8 makes it.
var bigGPT = models.GPTConfig{Vocab: 256, Block: 128, Layers: 6, Heads: 8, Dim: 544}

// benchTokens is the sequence length of a benchmark step: short, since
// activations are not what the benchmark measures.
const benchTokens = 16

// memoryRow is one rank's memory under a strategy, in bytes.
type memoryRow struct {
	params, grads, optim, gathered, upcast int
}

func (r memoryRow) total() int { return r.params + r.grads + r.optim + r.gathered + r.upcast }

// BenchmarkMemory measures what each data-parallel strategy holds per
// rank at world 4 (ranks as goroutines over the in-process transport) on
// the GPT scaled to 21.6M parameters, training with AdamW, and reports
// it in MB (10⁶ bytes) of rank 0:
//
//   - params: the parameters the rank keeps between steps (all of them
//     under DDP and ZeRO, its shards under FSDP);
//   - grads: their gradients (DDP's are views of its buckets,
//     GradientAsBucketView, so they count once);
//   - optim: AdamW's state (optim.StateBytes; ZeRO's and FSDP's are
//     their shares);
//   - gathered: FSDP's most parameters gathered at once (Memory's
//     PeakGathered, at the gather's precision);
//   - upcast: under bfloat16 mixed precision, the float32 copies the
//     float32 kernels compute on (Memory's PeakUpcast);
//   - total, and xDDP, total over DDP's (when DDP ran first).
//
// Activations are not counted. Run it with
//
//	go test -bench Memory -run '^$' ./parallel/fsdp/
//
// Its time per op is one training step of the four ranks sharing this
// machine's cores, not a speed measurement.
func BenchmarkMemory(b *testing.B) {
	full := fsdp.Options{Strategy: fsdp.FullShard, Wrap: isBlock}
	noPrefetch, bf16 := full, full
	noPrefetch.NoBackwardPrefetch = true
	bf16.MixedPrecision = fsdp.MixedPrecision{ParamDType: tensor.BFloat16}
	cases := []struct {
		name string
		fsdp *fsdp.Options // nil: DDP
		zero bool
	}{
		{name: "DDP"},
		{name: "ZeRO", zero: true},
		{name: "ShardGradOp", fsdp: &fsdp.Options{Strategy: fsdp.ShardGradOp, Wrap: isBlock}},
		{name: "FullShard", fsdp: &full},
		{name: "FullShard/no-prefetch", fsdp: &noPrefetch},
		{name: "FullShard/bf16", fsdp: &bf16},
	}
	ddpTotal := 0
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var mu sync.Mutex
			var row memoryRow
			disttest.SpawnWith(b, 4, disttest.Options{Timeout: 10 * time.Minute}, func(_ *disttest.Job, g *dist.Group) error {
				r, err := memoryOf(b, g, c.fsdp, c.zero)
				if g.Rank() == 0 {
					mu.Lock()
					row = r
					mu.Unlock()
				}
				return err
			})
			const mb = 1e6
			b.ReportMetric(float64(row.params)/mb, "params-MB")
			b.ReportMetric(float64(row.grads)/mb, "grads-MB")
			b.ReportMetric(float64(row.optim)/mb, "optim-MB")
			b.ReportMetric(float64(row.gathered)/mb, "gathered-MB")
			if row.upcast > 0 {
				b.ReportMetric(float64(row.upcast)/mb, "upcast-MB")
			}
			b.ReportMetric(float64(row.total())/mb, "total-MB")
			if c.name == "DDP" {
				ddpTotal = row.total()
			}
			if ddpTotal > 0 {
				b.ReportMetric(float64(row.total())/float64(ddpTotal), "xDDP")
			}
		})
	}
}

// memoryOf trains b.N steps on one rank under DDP (fo nil; with ZeRO if
// withZero) or FSDP with fo, and returns the rank's memory after them.
func memoryOf(b *testing.B, g *dist.Group, fo *fsdp.Options, withZero bool) (memoryRow, error) {
	ctx := context.Background()
	net, err := models.NewGPT(tensor.NewRNG(uint64(g.Rank())), bigGPT)
	if err != nil {
		return memoryRow{}, err
	}
	adamW := func(ps []*autograd.Var) optim.Optimizer {
		return optim.NewAdamW(ps, optim.AdamOptions{LR: 1e-4, WeightDecay: 0.1})
	}
	var (
		model    nn.Layer
		backward func(*autograd.Var) error
		opt      optim.Optimizer
		step     func() error
		row      func() memoryRow
	)
	if fo == nil {
		m, err := ddp.New(ctx, net, g, ddp.Options{GradientAsBucketView: true})
		if err != nil {
			return memoryRow{}, err
		}
		model = m
		backward = func(l *autograd.Var) error { return m.Backward(ctx, l) }
		if withZero {
			z, err := zero.New(nn.Parameters(net), adamW, g, zero.Options{})
			if err != nil {
				return memoryRow{}, err
			}
			opt, step = z, func() error { return z.StepContext(ctx) }
		} else {
			o := adamW(nn.Parameters(net))
			opt, step = o, func() error { o.Step(); return nil }
		}
		row = func() memoryRow {
			var r memoryRow
			for _, p := range nn.Parameters(net) {
				r.params += 4 * p.Value().Numel()
				if gr := p.Grad(); gr != nil {
					r.grads += 4 * gr.Numel()
				}
			}
			if z, ok := opt.(*zero.ZeRO); ok {
				r.optim = z.StateBytes()
			} else {
				r.optim = optim.StateBytes(opt)
			}
			return r
		}
	} else {
		m, err := fsdp.New(ctx, net, g, *fo)
		if err != nil {
			return memoryRow{}, err
		}
		model = m
		backward = func(l *autograd.Var) error { return m.Backward(ctx, l) }
		opt = adamW(m.Parameters())
		step = func() error { opt.Step(); return nil }
		row = func() memoryRow {
			mem := m.Memory()
			return memoryRow{params: mem.Params, grads: mem.Grads, optim: optim.StateBytes(opt), gathered: mem.PeakGathered, upcast: mem.PeakUpcast}
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return memoryRow{}, err
	}
	if g.Rank() == 0 {
		b.ResetTimer()
	}
	rng := tensor.NewRNG(uint64(7 + g.Rank()))
	x, y := tensor.New(tensor.Int64, 1, benchTokens), tensor.New(tensor.Int64, 1, benchTokens)
	for range b.N {
		for i := range benchTokens {
			x.Set(float64(rng.IntN(bigGPT.Vocab)), 0, i)
			y.Set(float64(rng.IntN(bigGPT.Vocab)), 0, i)
		}
		opt.ZeroGrad(true)
		if err := backward(models.Loss(nn.Call(model, autograd.Const(x)), y)); err != nil {
			return memoryRow{}, err
		}
		if err := step(); err != nil {
			return memoryRow{}, err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return memoryRow{}, err
	}
	if g.Rank() == 0 {
		b.StopTimer()
	}
	return row(), nil
}
