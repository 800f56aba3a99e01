package fsdp_test

import (
	"context"
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
	"github.com/godist/godist/tensor"
)

// stepGPT is a mid-sized GPT for step times: 4 blocks of width 256 (3.4M
// parameters), 64 tokens, batch 8 per rank.
var stepGPT = models.GPTConfig{Vocab: 256, Block: 64, Layers: 4, Heads: 4, Dim: 256}

// BenchmarkStep times one AdamW training step at world 2 (two ranks as
// goroutines joined by loopback TCP with the shared-memory path, as
// dist.Init makes them, sharing this machine's cores) under DDP and FSDP
// FullShard with and without prefetch, each sub-benchmark's ns/op a step
// of both ranks. Compare the ratios within one run (issue 13 asks
// FullShard to stay within 1.3× DDP):
//
//	go test -bench Step -run '^$' -benchtime 20x ./parallel/fsdp/
func BenchmarkStep(b *testing.B) {
	for _, c := range []struct {
		name string
		opt  *fsdp.Options // nil: DDP
	}{
		{"DDP", nil},
		{"FullShard", &fsdp.Options{Strategy: fsdp.FullShard, Wrap: isBlock}},
		{"FullShardNoPrefetch", &fsdp.Options{Strategy: fsdp.FullShard, Wrap: isBlock, NoBackwardPrefetch: true}},
		{"ShardGradOp", &fsdp.Options{Strategy: fsdp.ShardGradOp, Wrap: isBlock}},
	} {
		b.Run(c.name, func(b *testing.B) {
			n := b.N
			disttest.SpawnWith(b, 2, disttest.Options{TCP: true, SharedMemory: true, Timeout: 10 * time.Minute}, func(_ *disttest.Job, g *dist.Group) error {
				ctx := context.Background()
				net, err := models.NewGPT(tensor.NewRNG(1), stepGPT)
				if err != nil {
					return err
				}
				var model nn.Layer
				var params []*autograd.Var
				var backward func(*autograd.Var) error
				if c.opt == nil {
					m, err := ddp.New(ctx, net, g, ddp.Options{})
					if err != nil {
						return err
					}
					model, params, backward = m, nn.Parameters(net), func(l *autograd.Var) error { return m.Backward(ctx, l) }
				} else {
					m, err := fsdp.New(ctx, net, g, *c.opt)
					if err != nil {
						return err
					}
					model, params, backward = m, m.Parameters(), func(l *autograd.Var) error { return m.Backward(ctx, l) }
				}
				opt := optim.NewAdamW(params, optim.AdamOptions{LR: 1e-3})
				rng := tensor.NewRNG(uint64(10 + g.Rank()))
				x, y := tensor.New(tensor.Int64, 8, stepGPT.Block), tensor.New(tensor.Int64, 8, stepGPT.Block)
				for i := range 8 * stepGPT.Block {
					x.Reshape(-1).Set(float64(rng.IntN(256)), i)
					y.Reshape(-1).Set(float64(rng.IntN(256)), i)
				}
				step := func() error {
					opt.ZeroGrad(true)
					loss := models.Loss(nn.Call(model, autograd.Const(x)), y)
					if err := backward(loss); err != nil {
						return err
					}
					opt.Step()
					return nil
				}
				if err := step(); err != nil { // warm up
					return err
				}
				if err := g.Barrier(ctx); err != nil {
					return err
				}
				if g.Rank() == 0 {
					b.ResetTimer()
				}
				for range n {
					if err := step(); err != nil {
						return err
					}
				}
				if err := g.Barrier(ctx); err != nil {
					return err
				}
				if g.Rank() == 0 {
					b.StopTimer()
				}
				return nil
			})
		})
	}
}
