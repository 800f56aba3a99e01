package zero_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint/paritytest"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/parallel/zero"
	"github.com/godist/godist/tensor"
)

// The reference comes from PyTorch 1.13's ZeroRedundancyOptimizer over
// two gloo ranks via testdata/parity/make_zero_parity.py: the model
// Linear(6, 8) -> Tanh -> Linear(8, 4), MSE loss on a fixed batch a rank,
// gradients averaged by DDP, Adam with lr 1e-2, 50 steps. The parameters
// after 50 steps must agree within parityTol (the largest difference
// relative to the largest magnitude of PyTorch's tensor), and the
// partition exactly.
const (
	parityTol   = 1e-5
	paritySteps = 50
)

var zeroRef = &paritytest.Ref{Path: filepath.Join("..", "..", "testdata", "parity", "zero_parity.safetensors")}

func TestParityPyTorch(t *testing.T) {
	ref := zeroRef.All(t)
	const world = 2
	for _, bucket := range []bool{false, true} {
		t.Run(fmt.Sprintf("bucket=%v", bucket), func(t *testing.T) {
			finals := make([]map[string]*tensor.Tensor, world)
			losses := make([][]float64, world)
			owners := make([][]int, world)
			disttest.Spawn(t, world, func(g *dist.Group) error {
				ctx := context.Background()
				rng := tensor.NewRNG(0)
				net := nn.NewSequential(nn.NewLinear(rng, 6, 8, true), nn.NewTanh(), nn.NewLinear(rng, 8, 4, true))
				init := map[string]*tensor.Tensor{}
				for _, k := range nn.StateDictKeys(net) {
					init[k] = ref["init."+k]
				}
				if err := nn.LoadStateDict(net, init, true); err != nil {
					return err
				}
				model, err := ddp.New(ctx, net, g, ddp.Options{})
				if err != nil {
					return err
				}
				z, err := zero.New(nn.Parameters(net), func(ps []*autograd.Var) optim.Optimizer {
					return optim.NewAdam(ps, optim.AdamOptions{LR: 1e-2})
				}, g, zero.Options{ParametersAsBucketView: bucket})
				if err != nil {
					return err
				}
				x := autograd.Const(ref[fmt.Sprintf("x.rank%d", g.Rank())])
				y := autograd.Const(ref[fmt.Sprintf("y.rank%d", g.Rank())])
				for range paritySteps {
					z.ZeroGrad(true)
					loss := nn.MSELoss(nn.Call(model, x), y)
					losses[g.Rank()] = append(losses[g.Rank()], loss.Value().Item())
					if err := model.Backward(ctx, loss); err != nil {
						return err
					}
					if err := z.StepContext(ctx); err != nil {
						return err
					}
				}
				finals[g.Rank()] = nn.StateDict(net)
				owner := make([]int, len(z.Params()))
				for r, idx := range z.Partition() {
					for _, i := range idx {
						owner[i] = r
					}
				}
				owners[g.Rank()] = owner
				return nil
			})
			if t.Failed() {
				return
			}
			for r := range world {
				var want []int
				for _, v := range ref["owner"].Values() {
					want = append(want, int(v))
				}
				if !slices.Equal(owners[r], want) {
					t.Errorf("rank %d: owners %v, PyTorch %v", r, owners[r], want)
				}
				zeroRef.ExpectValues(t, fmt.Sprintf("rank %d losses", r), losses[r], fmt.Sprintf("loss.rank%d", r), parityTol)
				for k, v := range finals[r] {
					zeroRef.Expect(t, fmt.Sprintf("rank %d %s after %d steps", r, k, paritySteps), v, "final."+k, parityTol)
				}
			}
		})
	}
}
