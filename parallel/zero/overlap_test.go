package zero_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
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
	"github.com/godist/godist/parallel/join"
	"github.com/godist/godist/parallel/zero"
	"github.com/godist/godist/tensor"
)

var gptConfig = models.GPTConfig{Vocab: 64, Block: 8, Layers: 2, Heads: 2, Dim: 12}

func tokens(r, step int) (x, y *tensor.Tensor) {
	rng := tensor.NewRNG(uint64(100*step + r))
	x, y = tensor.New(tensor.Int64, 3, gptConfig.Block), tensor.New(tensor.Int64, 3, gptConfig.Block)
	for i := range 3 * gptConfig.Block {
		x.Reshape(-1).Set(float64(rng.IntN(gptConfig.Vocab)), i)
		y.Reshape(-1).Set(float64(rng.IntN(gptConfig.Vocab)), i)
	}
	return x, y
}

func adamW(ps []*autograd.Var) optim.Optimizer {
	return optim.NewAdamW(ps, optim.AdamOptions{LR: 0.01, WeightDecay: 0.1})
}

// overlapRun trains the tied GPT with DDP and ZeRO for steps and returns
// rank 0's losses and every rank's final parameters.
func overlapRun(t *testing.T, world, steps int, bucketMB float64, overlap bool) ([]float64, [][]*tensor.Tensor) {
	t.Helper()
	var mu sync.Mutex
	var losses []float64
	params := make([][]*tensor.Tensor, world)
	disttest.SpawnWith(t, world, disttest.Options{Timeout: 30 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
		ctx := context.Background()
		net, err := models.NewGPT(tensor.NewRNG(uint64(g.Rank())), gptConfig)
		if err != nil {
			return err
		}
		z, err := zero.New(nn.Parameters(net), adamW, g, zero.Options{OverlapWithDDP: overlap})
		if err != nil {
			return err
		}
		opt := ddp.Options{BucketCapMB: bucketMB, FirstBucketCapMB: bucketMB}
		if overlap {
			opt.CommHook = ddp.HookWithZeroStep(nil, z)
		}
		m, err := ddp.New(ctx, net, g, opt)
		if err != nil {
			return err
		}
		var ls []float64
		for s := range steps {
			z.ZeroGrad(true)
			x, y := tokens(g.Rank(), s)
			loss := models.Loss(nn.Call(m, autograd.Const(x)), y)
			if err := m.Backward(ctx, loss); err != nil {
				return err
			}
			if err := z.StepContext(ctx); err != nil {
				return err
			}
			ls = append(ls, loss.Value().Item())
		}
		if overlap && len(m.Buckets()) < 2 && bucketMB < 1 {
			return fmt.Errorf("%d bucket(s): the test wants several", len(m.Buckets()))
		}
		var ps []*tensor.Tensor
		for _, p := range nn.Parameters(net) {
			ps = append(ps, p.Value().Clone())
		}
		mu.Lock()
		params[g.Rank()] = ps
		if g.Rank() == 0 {
			losses = ls
		}
		mu.Unlock()
		return nil
	})
	if losses == nil {
		t.FailNow()
	}
	return losses, params
}

// TestOverlapWithDDP: DDP with ddp.HookWithZeroStep steps the tied GPT with
// AdamW inside backward, bucket by bucket, to the very parameters (bit
// for bit) that DDP followed by ZeRO's StepContext reaches, at worlds 2
// and 3, with many small buckets (rebuilt after the first step) and with
// one.
func TestOverlapWithDDP(t *testing.T) {
	const steps = 5
	for _, world := range []int{2, 3} {
		for _, mb := range []float64{0.002, 25} {
			t.Run(fmt.Sprintf("world%d/bucketMB=%g", world, mb), func(t *testing.T) {
				wantLoss, want := overlapRun(t, world, steps, mb, false)
				gotLoss, got := overlapRun(t, world, steps, mb, true)
				if !slices.Equal(gotLoss, wantLoss) {
					t.Errorf("losses %v, without overlap %v", gotLoss, wantLoss)
				}
				for r := range world {
					for i := range want[0] {
						if !slices.Equal(got[r][i].Values(), want[0][i].Values()) {
							t.Errorf("rank %d: parameter %d differs from rank 0's without overlap", r, i)
						}
					}
				}
			})
		}
	}
}

// TestOverlapWithoutHook: an optimizer made for overlap whose model does
// not run the hook says so at its step instead of silently not stepping.
func TestOverlapWithoutHook(t *testing.T) {
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		n := net(0)
		z, err := zero.New(nn.Parameters(n), adam, g, zero.Options{OverlapWithDDP: true})
		if err != nil {
			return err
		}
		m, err := ddp.New(ctx, n, g, ddp.Options{})
		if err != nil {
			return err
		}
		x, y := batch(g.Rank(), 0)
		if err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y)); err != nil {
			return err
		}
		err = z.StepContext(ctx)
		if err == nil || !strings.Contains(err.Error(), "HookWithZeroStep stepped 0 parameter(s) of 6") {
			return fmt.Errorf("StepContext: %v, want the error saying the hook did not run", err)
		}
		return nil
	})
}

// TestOverlapJoin: under Join, a joined rank's DDP shadow runs the hook,
// which steps and sends its partition: uneven inputs end as in
// TestJoinUnevenInputs.
func TestOverlapJoin(t *testing.T) {
	for _, world := range []int{2, 3} {
		want := joinReference(world)
		disttest.SpawnWith(t, world, disttest.Options{Timeout: 30 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
			ctx := context.Background()
			n := net(uint64(g.Rank()))
			z, err := zero.New(nn.Parameters(n), adam, g, zero.Options{OverlapWithDDP: true})
			if err != nil {
				return err
			}
			m, err := ddp.New(ctx, n, g, ddp.Options{CommHook: ddp.HookWithZeroStep(nil, z), BucketCapMB: 0.0005, FirstBucketCapMB: 0.0005})
			if err != nil {
				return err
			}
			err = join.Join(ctx, g, []join.Joinable{m, z}, func() error {
				for s := range batches(g.Rank()) {
					z.ZeroGrad(true)
					x, y := batch(g.Rank(), s)
					if err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y)); err != nil {
						return err
					}
					if err := z.StepContext(ctx); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			for i, p := range nn.Parameters(n) {
				if !tensor.AllClose(p.Value(), want[i], 1e-5, 1e-6) {
					return fmt.Errorf("world %d: parameter %d: %v, one process's %v", world, i, p.Value().Values(), want[i].Values())
				}
			}
			return nil
		})
	}
}
