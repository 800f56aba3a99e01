package ddp_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/tensor"
)

// mlp is a small model; every rank builds it from a different seed, so
// only DDP's broadcast makes the replicas equal.
func mlp(seed uint64) *nn.Sequential {
	rng := tensor.NewRNG(seed)
	return nn.NewSequential(nn.NewLinear(rng, 6, 16, true), nn.NewTanh(), nn.NewLinear(rng, 16, 3, true))
}

// batch is rank r's data for a step.
func batch(r, step, n int) (*tensor.Tensor, *tensor.Tensor) {
	rng := tensor.NewRNG(uint64(1000*step + r))
	x := tensor.Randn(rng, n, 6)
	y := make([]int64, n)
	for i := range y {
		y[i] = int64(rng.IntN(3))
	}
	return x, tensor.FromInt64(y)
}

// reference computes, in one process, the average over ranks of the
// gradients of the per-rank losses, starting from rank 0's weights.
func reference(world, step, n int) map[string]*tensor.Tensor {
	return averageGradients(mlp, world, step, n)
}

func close(a, b *tensor.Tensor, tol float64) error {
	av, bv := a.Values(), b.Values()
	for i := range av {
		if math.Abs(av[i]-bv[i]) > tol*(1+math.Abs(bv[i])) {
			return fmt.Errorf("element %d: %v, want %v", i, av[i], bv[i])
		}
	}
	return nil
}

func TestGradientsAreTheAverage(t *testing.T) {
	for _, world := range []int{1, 2, 3, 5} {
		for _, opt := range []ddp.Options{{}, {GradientAsBucketView: true}, {BucketCapMB: 1e-4, FirstBucketCapMB: 1e-5}} {
			t.Run(fmt.Sprintf("world%d/%+v", world, opt), func(t *testing.T) {
				disttest.Spawn(t, world, func(g *dist.Group) error {
					ctx := context.Background()
					m, err := ddp.New(ctx, mlp(uint64(g.Rank())), g, opt)
					if err != nil {
						return err
					}
					for step := range 3 {
						nn.ZeroGrad(m, step%2 == 0)
						x, y := batch(g.Rank(), step, 8)
						if err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y)); err != nil {
							return err
						}
						want := reference(world, step, 8)
						for _, p := range nn.NamedParameters(m.Module) {
							if err := close(p.Value.Grad(), want[p.Name], 1e-5); err != nil {
								return fmt.Errorf("step %d %s: %w", step, p.Name, err)
							}
						}
						// The reference starts from rank 0's initial weights:
						// do not step, so the weights stay comparable.
					}
					return nil
				})
			})
		}
	}
}

func TestBucketsRebuiltAndReducedInOrder(t *testing.T) {
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		m, err := ddp.New(ctx, mlp(1), g, ddp.Options{BucketCapMB: 1e-4, FirstBucketCapMB: 1e-5})
		if err != nil {
			return err
		}
		before := fmt.Sprint(m.Buckets())
		if before != "[[2.bias] [2.weight] [0.bias] [0.weight]]" {
			return fmt.Errorf("initial buckets %s, want reverse registration order", before)
		}
		for step := range 2 {
			x, y := batch(g.Rank(), step, 4)
			if err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y)); err != nil {
				return err
			}
		}
		// After the first iteration the buckets follow the order the
		// gradients became ready in.
		if after := fmt.Sprint(m.Buckets()); after != "[[2.bias] [2.weight] [0.bias] [0.weight]]" && after != "[[2.weight] [2.bias] [0.weight] [0.bias]]" {
			return fmt.Errorf("rebuilt buckets %s", after)
		}
		return nil
	})
}

// branchy has a layer that a forward pass may skip.
type branchy struct {
	nn.Base
	a, b *nn.Linear
	skip bool
}

func newBranchy(seed uint64) *branchy {
	rng := tensor.NewRNG(seed)
	m := &branchy{a: nn.NewLinear(rng, 6, 3, true), b: nn.NewLinear(rng, 3, 3, true)}
	m.RegisterModule("a", m.a)
	m.RegisterModule("b", m.b)
	return m
}

func (m *branchy) Forward(x *autograd.Var) *autograd.Var {
	h := nn.Call(m.a, x)
	if m.skip {
		return h
	}
	return nn.Call(m.b, h)
}

func TestUnusedParameters(t *testing.T) {
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		net := newBranchy(0)
		m, err := ddp.New(ctx, net, g, ddp.Options{FindUnusedParameters: true})
		if err != nil {
			return err
		}
		net.skip = true
		x, y := batch(g.Rank(), 0, 4)
		if err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y)); err != nil {
			return fmt.Errorf("with FindUnusedParameters: %w", err)
		}
		if gb := net.b.Weight.Grad(); gb == nil || gb.Values()[0] != 0 {
			return fmt.Errorf("unused parameter's gradient %v, want zeros", gb)
		}
		return nil
	})
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		net := newBranchy(0)
		m, err := ddp.New(ctx, net, g, ddp.Options{})
		if err != nil {
			return err
		}
		net.skip = true
		x, y := batch(g.Rank(), 0, 4)
		err = m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y))
		var ue *ddp.UnusedParameterError
		if !errors.As(err, &ue) || fmt.Sprint(ue.Params) != "[b.weight b.bias]" {
			return fmt.Errorf("without FindUnusedParameters: %v, want an error naming b.weight and b.bias", err)
		}
		return nil
	})
}

func TestNoSyncAccumulates(t *testing.T) {
	disttest.Spawn(t, 3, func(g *dist.Group) error {
		ctx := context.Background()
		m, err := ddp.New(ctx, mlp(uint64(g.Rank())), g, ddp.Options{})
		if err != nil {
			return err
		}
		step := func(s int) error {
			x, y := batch(g.Rank(), s, 8)
			nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y).Backward(nil)
			return m.Wait(ctx)
		}
		if err := m.NoSync(func() error { return step(0) }); err != nil {
			return err
		}
		if err := step(1); err != nil {
			return err
		}
		r0, r1 := reference(3, 0, 8), reference(3, 1, 8)
		for _, p := range nn.NamedParameters(m.Module) {
			want := new(tensor.Tensor).Add(r0[p.Name], r1[p.Name])
			if err := close(p.Value.Grad(), want, 1e-5); err != nil {
				return fmt.Errorf("%s after no_sync + sync: %w", p.Name, err)
			}
		}
		return nil
	})
}

func TestCommHooks(t *testing.T) {
	hooks := map[string]ddp.CommHook{"fp16": ddp.FP16CompressHook, "bf16": ddp.BF16CompressHook}
	for name, hook := range hooks {
		t.Run(name, func(t *testing.T) {
			disttest.Spawn(t, 2, func(g *dist.Group) error {
				ctx := context.Background()
				m, err := ddp.New(ctx, mlp(0), g, ddp.Options{CommHook: hook})
				if err != nil {
					return err
				}
				x, y := batch(g.Rank(), 0, 8)
				if err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y)); err != nil {
					return err
				}
				want := reference(2, 0, 8)
				for _, p := range nn.NamedParameters(m.Module) {
					if err := close(p.Value.Grad(), want[p.Name], 2e-2); err != nil {
						return fmt.Errorf("%s: %w", p.Name, err)
					}
				}
				return nil
			})
		})
	}
}

// TestPowerSGD checks that a rank-r PowerSGD reduction of gradients whose
// average has rank ≤ r is exact, and that error feedback makes the sum of
// applied gradients track the true sum.
func TestPowerSGD(t *testing.T) {
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		rng := tensor.NewRNG(5)
		lin := nn.NewLinear(rng, 40, 30, false)
		net := nn.NewSequential(lin)
		ps := ddp.NewPowerSGD(2, 0)
		m, err := ddp.New(ctx, net, g, ddp.Options{CommHook: ps.Hook()})
		if err != nil {
			return err
		}
		// loss = sum(W·x_r) for one input vector per rank: dW = 1·x_rᵀ,
		// rank one on each rank and rank ≤ 2 on average.
		x := tensor.Randn(tensor.NewRNG(uint64(10+g.Rank())), 1, 40)
		autograd.SumAll(nn.Call(m, autograd.Const(x))).Backward(nil)
		if err := m.Wait(ctx); err != nil {
			return err
		}
		x0, x1 := tensor.Randn(tensor.NewRNG(10), 1, 40), tensor.Randn(tensor.NewRNG(11), 1, 40)
		avg := new(tensor.Tensor).Add(x0, x1)
		avg.Scale(0.5)
		want := tensor.Full(tensor.Float32, 1, 30, 1)
		want = new(tensor.Tensor).MatMul(want, avg)
		if err := close(lin.Weight.Grad(), want, 1e-3); err != nil {
			return fmt.Errorf("PowerSGD rank 2 of a rank-2 average: %w", err)
		}
		sent, full := ps.Compression()
		if sent >= full {
			return fmt.Errorf("PowerSGD sent %d bytes for %d", sent, full)
		}
		return nil
	})
}

// TestJoinUnevenInputs: ranks with 5 and 6 batches both finish under Join.
func TestJoinUnevenInputs(t *testing.T) {
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		m, err := ddp.New(ctx, mlp(0), g, ddp.Options{})
		if err != nil {
			return err
		}
		batches := 5 + g.Rank()
		steps := 0
		err = ddp.Join(ctx, []*ddp.DDP{m}, func() error {
			for s := range batches {
				x, y := batch(g.Rank(), s, 4)
				if err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y)); err != nil {
					return err
				}
				steps++
			}
			return nil
		})
		if err != nil {
			return err
		}
		if steps != batches {
			return fmt.Errorf("ran %d steps of %d", steps, batches)
		}
		// The group is still in step: one more collective works.
		return g.Barrier(ctx)
	})
}

// TestSyncBatchNormMatchesWholeBatch: SyncBatchNorm over two halves equals
// BatchNorm over the whole batch, forward and backward.
func TestSyncBatchNormMatchesWholeBatch(t *testing.T) {
	const n, c = 8, 3
	rng := tensor.NewRNG(3)
	x := tensor.Randn(rng, n, c, 4, 4)
	gOut := tensor.Randn(rng, n, c, 4, 4)
	bn := nn.NewBatchNorm2d(c)
	xv := autograd.Param(x.Clone())
	y := nn.Call(bn, xv)
	y.Backward(gOut)
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		s := ddp.NewSyncBatchNorm(c, g)
		half := x.Narrow(0, g.Rank()*n/2, n/2).Contiguous()
		xs := autograd.Param(half.Clone())
		ys := nn.Call(s, xs)
		if err := close(ys.Value(), y.Value().Narrow(0, g.Rank()*n/2, n/2).Contiguous(), 1e-4); err != nil {
			return fmt.Errorf("forward: %w", err)
		}
		ys.Backward(gOut.Narrow(0, g.Rank()*n/2, n/2).Contiguous())
		if err := close(xs.Grad(), xv.Grad().Narrow(0, g.Rank()*n/2, n/2).Contiguous(), 1e-4); err != nil {
			return fmt.Errorf("input gradient: %w", err)
		}
		// Weight gradients are local; their sum over ranks is BatchNorm's.
		dw := s.Weight.Grad().Clone()
		if err := g.AllReduce(context.Background(), dw, dist.Sum); err != nil {
			return err
		}
		if err := close(dw, bn.Weight.Grad(), 1e-4); err != nil {
			return fmt.Errorf("weight gradient: %w", err)
		}
		sd := nn.StateDict(s)
		if err := close(sd["running_var"], bn.RunningVar(), 1e-5); err != nil {
			return fmt.Errorf("running var: %w", err)
		}
		return nil
	})
}

// TestUnevenInputsWithoutJoinFail: without Join, the rank with more batches
// gets a clear error naming the rank that left, not a hang.
func TestUnevenInputsWithoutJoinFail(t *testing.T) {
	disttest.SpawnWith(t, 2, disttest.Options{Timeout: 20 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
		ctx := context.Background()
		m, err := ddp.New(ctx, mlp(0), g, ddp.Options{})
		if err != nil {
			return err
		}
		batches := 5 + g.Rank()
		for s := range batches {
			x, y := batch(g.Rank(), s, 4)
			start := time.Now()
			if err := m.Prepare(ctx); err != nil {
				return checkLeft(err, g.Rank(), s, start)
			}
			err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y))
			if err != nil {
				return checkLeft(err, g.Rank(), s, start)
			}
		}
		if g.Rank() == 1 {
			return errors.New("rank 1 finished 6 steps while rank 0 had only 5")
		}
		return g.Destroy() // rank 0 runs out of data and leaves, as a program would
	})
}

func checkLeft(err error, rank, step int, start time.Time) error {
	var re *dist.RankError
	if rank != 1 || step != 5 || !errors.As(err, &re) || re.Rank != 0 {
		return fmt.Errorf("rank %d step %d: %v, want rank 1's 6th step to fail naming rank 0", rank, step, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		return fmt.Errorf("the error took %v", d)
	}
	return nil
}

// TestMixedPrecision: with MixedPrecision every Linear's output is a
// value of ParamDType (its product computed in it), the averaged
// gradients are values of ReduceDType (reduced in it) and within 2% of
// float32's average, and float32 reductions give gradients that are not;
// a dtype DDP cannot use is New's error.
func TestMixedPrecision(t *testing.T) {
	representable := func(x *tensor.Tensor, d tensor.DType) bool {
		for _, v := range x.Values() {
			if v != new(tensor.Tensor).RoundTo(tensor.FromFloat32([]float32{float32(v)}), d).Values()[0] {
				return false
			}
		}
		return true
	}
	for _, c := range []struct {
		mp         ddp.MixedPrecision
		reducedIn  tensor.DType // 0: float32
		computedIn tensor.DType
	}{
		{ddp.MixedPrecision{ParamDType: tensor.BFloat16}, tensor.BFloat16, tensor.BFloat16},
		{ddp.MixedPrecision{ParamDType: tensor.Float16}, tensor.Float16, tensor.Float16},
		{ddp.MixedPrecision{ParamDType: tensor.BFloat16, ReduceDType: tensor.Float32}, 0, tensor.BFloat16},
	} {
		t.Run(fmt.Sprintf("%v/%v", c.mp.ParamDType, c.mp.ReduceDType), func(t *testing.T) {
			disttest.Spawn(t, 2, func(g *dist.Group) error {
				ctx := context.Background()
				net := mlp(uint64(g.Rank()))
				var bad []string
				for _, mod := range nn.NamedModules(net) {
					if l, ok := mod.Value.(*nn.Linear); ok {
						l.RegisterForwardHook(func(_ nn.Module, _, y *autograd.Var) *autograd.Var {
							if !representable(y.Value(), c.computedIn) {
								bad = append(bad, mod.Name)
							}
							return nil
						})
					}
				}
				m, err := ddp.New(ctx, net, g, ddp.Options{MixedPrecision: c.mp})
				if err != nil {
					return err
				}
				x, y := batch(g.Rank(), 0, 8)
				if err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y)); err != nil {
					return err
				}
				if len(bad) > 0 {
					return fmt.Errorf("outputs of %v not computed in %v", bad, c.computedIn)
				}
				want := reference(2, 0, 8)
				allIn := true
				for _, p := range nn.NamedParameters(m.Module) {
					if err := close(p.Value.Grad(), want[p.Name], 2e-2); err != nil {
						return fmt.Errorf("%s: %w", p.Name, err)
					}
					if c.reducedIn != 0 && !representable(p.Value.Grad(), c.reducedIn) {
						return fmt.Errorf("%s's gradient is not %v values: not reduced in it", p.Name, c.reducedIn)
					}
					allIn = allIn && representable(p.Value.Grad(), tensor.BFloat16)
				}
				if c.reducedIn == 0 && allIn {
					return fmt.Errorf("float32 reductions gave bfloat16 values only")
				}
				return nil
			})
		})
	}
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		_, err := ddp.New(context.Background(), mlp(0), g, ddp.Options{MixedPrecision: ddp.MixedPrecision{ParamDType: tensor.Int64}})
		if err == nil || !strings.Contains(err.Error(), "int64") {
			return fmt.Errorf("New with an int64 ParamDType: %v, want an error naming it", err)
		}
		return nil
	})
}
