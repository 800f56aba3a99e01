package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/tensor"
)

func subset(t *testing.T) string {
	t.Helper()
	dir, err := data.SubsetDir()
	if err != nil {
		t.Skipf("shipped Fashion-MNIST subset not found: %v", err)
	}
	return dir
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// TestTrainKeepsReplicasEqual trains 20 steps on two goroutine ranks that
// start from different weights: rank 0's weights reach rank 1 by
// Send/Recv, the averaged gradients keep the replicas bit-identical, and
// the loss goes down.
func TestTrainKeepsReplicasEqual(t *testing.T) {
	const world = 2
	cfg := config{Steps: 20, Batch: 32, LR: 0.05, Momentum: 0.9, Dir: subset(t), LogEvery: 5}
	var logs strings.Builder
	states := make([]map[string]*tensor.Tensor, world)
	results := make([]result, world)
	disttest.Spawn(t, world, func(g *dist.Group) error {
		c := cfg
		if g.Rank() == 0 {
			c.Log = &logs
		}
		net := models.MLP(tensor.NewTorchRNG(uint64(10 + g.Rank())))
		res, err := train(context.Background(), g, net, c)
		if err != nil {
			return err
		}
		states[g.Rank()], results[g.Rank()] = nn.StateDict(net), res
		return nil
	})
	if t.Failed() {
		return
	}
	for name, w := range states[0] {
		if !tensor.Equal(states[1][name], w) {
			t.Errorf("parameter %s differs between the ranks after training", name)
		}
	}
	for r, res := range results {
		if len(res.Losses) != cfg.Steps {
			t.Fatalf("rank %d: %d losses, want %d", r, len(res.Losses), cfg.Steps)
		}
		first, last := mean(res.Losses[:5]), mean(res.Losses[15:])
		if !(last < first) {
			t.Errorf("rank %d: loss did not go down: first five steps %.4f, last five %.4f (%v)", r, first, last, res.Losses)
		}
		if res.Data != "given" || res.World != world {
			t.Errorf("rank %d: result %+v", r, res)
		}
	}
	if !strings.Contains(logs.String(), "step 20/20 loss") {
		t.Errorf("rank 0 printed %q", logs.String())
	}
}

// TestGradientsEqualDDP takes the same batches through the manual pattern
// and through DDP from the same initial weights: the averaged gradients
// agree at every step.
func TestGradientsEqualDDP(t *testing.T) {
	cfg := config{Batch: 16, Dir: subset(t)}
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		manual := models.MLP(tensor.NewTorchRNG(uint64(20 + g.Rank())))
		if err := syncParams(ctx, g, manual); err != nil {
			return err
		}
		// DDP's replica starts from the same (rank 0's) weights.
		inner := models.MLP(tensor.NewTorchRNG(99))
		if err := nn.LoadStateDict(inner, nn.StateDict(manual), true); err != nil {
			return err
		}
		model, err := ddp.New(ctx, inner, g, ddp.Options{})
		if err != nil {
			return err
		}
		loader, _, err := newLoader(g, cfg)
		if err != nil {
			return err
		}
		step := 0
		for b := range loader.Batches() {
			if step == 3 {
				break
			}
			nn.ZeroGrad(manual, true)
			nn.CrossEntropy(nn.Call(manual, autograd.Const(b[0])), b[1]).Backward(nil)
			if err := averageGradients(ctx, g, nn.Parameters(manual)); err != nil {
				return err
			}
			nn.ZeroGrad(model, true)
			if err := model.Backward(ctx, nn.CrossEntropy(nn.Call(model, autograd.Const(b[0])), b[1])); err != nil {
				return err
			}
			pm, pd := nn.NamedParameters(manual), nn.NamedParameters(inner)
			for i := range pm {
				a, d := pm[i].Value.Grad().Values(), pd[i].Value.Grad().Values()
				for k := range a {
					if math.Abs(a[k]-d[k]) > 1e-5*(1+math.Abs(d[k])) {
						return fmt.Errorf("step %d, gradient of %s element %d: manual %v, DDP %v", step, pm[i].Name, k, a[k], d[k])
					}
				}
				// The same plain SGD step on both keeps the weights together.
				for _, p := range []*autograd.Var{pm[i].Value, pd[i].Value} {
					p.Value().AddScaled(p.Value(), -0.1, p.Grad())
				}
			}
			step++
		}
		if step != 3 {
			return fmt.Errorf("only %d batches", step)
		}
		return nil
	})
}
