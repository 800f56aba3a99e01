package ddp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/tensor"
)

var tinyGPT = models.GPTConfig{Vocab: 256, Block: 8, Layers: 2, Heads: 2, Dim: 16}

func gpt(seed uint64) *models.GPT {
	m, err := models.NewGPT(tensor.NewRNG(seed), tinyGPT)
	if err != nil {
		panic(err)
	}
	return m
}

// tokens is rank r's batch of next-token data for a step.
func tokens(r, step int) (x, y *tensor.Tensor) {
	rng := tensor.NewRNG(uint64(100*step + r))
	x, y = tensor.New(tensor.Int64, 3, tinyGPT.Block), tensor.New(tensor.Int64, 3, tinyGPT.Block)
	for i := range 3 * tinyGPT.Block {
		x.Reshape(-1).Set(float64(rng.IntN(256)), i)
		y.Reshape(-1).Set(float64(rng.IntN(256)), i)
	}
	return x, y
}

// TestTiedWeightsUnderDDP: the GPT's token embedding is used twice in one
// graph (the embedding and the output head). DDP must see its gradient
// once, complete (the sum of both uses), and average it like any other:
// its grad-ready hook fires once per backward pass, after both uses, and
// every gradient equals the average of the ranks' gradients computed in
// one process.
func TestTiedWeightsUnderDDP(t *testing.T) {
	const world = 2
	for _, opt := range []ddp.Options{{}, {GradientAsBucketView: true, BucketCapMB: 0.02, FirstBucketCapMB: 0.01}} {
		t.Run(fmt.Sprintf("%+v", opt), func(t *testing.T) {
			// The reference: rank 0's initial weights, each rank's batch.
			ref := gpt(0)
			want := map[string]*tensor.Tensor{}
			for r := range world {
				x, y := tokens(r, 0)
				if err := models.Loss(nn.Call(ref, autograd.Const(x)), y).Backward(nil); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range nn.NamedParameters(ref) {
				want[p.Name] = new(tensor.Tensor).MulScalar(p.Value.Grad(), 1.0/world)
			}
			disttest.Spawn(t, world, func(g *dist.Group) error {
				ctx := context.Background()
				net := gpt(uint64(g.Rank()))
				fired := 0
				net.Wte.Weight.RegisterGradReadyHook(func(v *autograd.Var) {
					if v.Grad() == nil {
						panic("wte.weight ready without a gradient")
					}
					fired++
				})
				m, err := ddp.New(ctx, net, g, opt)
				if err != nil {
					return err
				}
				x, y := tokens(g.Rank(), 0)
				if err := m.Backward(ctx, models.Loss(nn.Call(m, autograd.Const(x)), y)); err != nil {
					return err
				}
				if fired != 1 {
					return fmt.Errorf("wte.weight's grad-ready hook fired %d times in one backward pass, want 1", fired)
				}
				for _, p := range nn.NamedParameters(net) {
					if err := close(p.Value.Grad(), want[p.Name], 1e-5); err != nil {
						return fmt.Errorf("%s: %w", p.Name, err)
					}
				}
				return nil
			})
		})
	}
}
