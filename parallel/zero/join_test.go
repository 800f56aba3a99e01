package zero_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/parallel/join"
	"github.com/godist/godist/parallel/zero"
	"github.com/godist/godist/tensor"
)

// net is a small MLP with parameters of unequal sizes, so that the
// partitions differ.
func net(seed uint64) *nn.Sequential {
	rng := tensor.NewRNG(seed)
	return nn.NewSequential(nn.NewLinear(rng, 6, 16, true), nn.NewTanh(), nn.NewLinear(rng, 16, 8, true), nn.NewTanh(), nn.NewLinear(rng, 8, 3, true))
}

// batch is rank r's data for a step.
func batch(r, step int) (*tensor.Tensor, *tensor.Tensor) {
	rng := tensor.NewRNG(uint64(1000*step + r))
	x := tensor.Randn(rng, 4, 6)
	y := make([]int64, 4)
	for i := range y {
		y[i] = int64(rng.IntN(3))
	}
	return x, tensor.FromInt64(y)
}

// batches is how many batches rank r has: uneven.
func batches(r int) int { return 3 + 2*r }

func adam(ps []*autograd.Var) optim.Optimizer {
	return optim.NewAdam(ps, optim.AdamOptions{LR: 0.01})
}

// joinReference trains in one process what the job under Join computes:
// at step s, the sum of the gradients of the ranks that still have a
// batch, divided by the whole world (the joined ranks count as zeros),
// stepped by one unsharded optimizer; from rank 0's initial weights.
func joinReference(world int) []*tensor.Tensor {
	m := net(0)
	ps := nn.Parameters(m)
	opt := adam(ps)
	for s := range batches(world - 1) {
		sum := make([]*tensor.Tensor, len(ps))
		for r := range world {
			if s >= batches(r) {
				continue
			}
			nn.ZeroGrad(m, true)
			x, y := batch(r, s)
			nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y).Backward(nil)
			for i, p := range ps {
				if sum[i] == nil {
					sum[i] = p.Grad().Clone()
				} else {
					sum[i].Add(sum[i], p.Grad())
				}
			}
		}
		for i, p := range ps {
			p.SetGrad(sum[i].Scale(1 / float64(world)))
		}
		opt.Step()
	}
	out := make([]*tensor.Tensor, len(ps))
	for i, p := range ps {
		out[i] = p.Value().Clone()
	}
	return out
}

// TestJoinUnevenInputs: a DDP model and its ZeRO optimizer join together
// on ranks with 3, 5 and 7 batches. Every rank finishes; the joined ranks
// keep stepping their partitions and sending them, so the parameters end
// the same on every rank and equal to one process's training on the
// same gradients.
func TestJoinUnevenInputs(t *testing.T) {
	for _, world := range []int{2, 3} {
		want := joinReference(world)
		for _, c := range []struct{ bucketView, gradView bool }{{false, false}, {true, false}, {false, true}} {
			t.Run(fmt.Sprintf("world%d/bucket=%v/gradview=%v", world, c.bucketView, c.gradView), func(t *testing.T) {
				disttest.SpawnWith(t, world, disttest.Options{Timeout: 30 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
					ctx := context.Background()
					n := net(uint64(g.Rank()))
					m, err := ddp.New(ctx, n, g, ddp.Options{GradientAsBucketView: c.gradView})
					if err != nil {
						return err
					}
					z, err := zero.New(nn.Parameters(n), adam, g, zero.Options{ParametersAsBucketView: c.bucketView})
					if err != nil {
						return err
					}
					steps := 0
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
							steps++
						}
						return nil
					})
					if err != nil {
						return err
					}
					if steps != batches(g.Rank()) {
						return fmt.Errorf("ran %d steps of %d", steps, batches(g.Rank()))
					}
					for i, p := range nn.Parameters(n) {
						all := make([]*tensor.Tensor, world)
						for r := range all {
							all[r] = tensor.New(tensor.Float32, p.Shape()...)
						}
						if err := g.AllGather(ctx, all, p.Value()); err != nil {
							return err
						}
						for r, v := range all {
							if !slices.Equal(v.Values(), p.Value().Values()) {
								return fmt.Errorf("parameter %d differs between this rank and rank %d", i, r)
							}
						}
						if !tensor.AllClose(p.Value(), want[i], 1e-5, 1e-6) {
							return fmt.Errorf("parameter %d: %v, one process's %v", i, p.Value().Values(), want[i].Values())
						}
					}
					return nil
				})
			})
		}
	}
}
