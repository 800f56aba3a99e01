package ddp_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/tensor"
)

// towers is a model of transformer blocks (dropout on) in which block a is
// called twice, around block b: its parameters are used twice in the
// graph. extra is a layer the forward pass never calls (an unused
// parameter). With ck every block call is checkpointed.
type towers struct {
	nn.Base
	a, b  nn.Layer
	extra *nn.Linear
	seq   *nn.Sequential
}

func newTowers(seed uint64, ck bool) *towers {
	rng := tensor.NewRNG(seed)
	m := &towers{
		a:     nn.NewTransformerBlock(rng, 16, 2, 32, 0.1, true),
		b:     nn.NewTransformerBlock(rng, 16, 2, 32, 0.1, true),
		extra: nn.NewLinear(rng, 16, 16, true),
	}
	a, b := m.a, m.b
	if ck {
		a, b = nn.NewCheckpointed(a), nn.NewCheckpointed(b)
	}
	m.seq = nn.NewSequential(a, b, a)
	m.RegisterModule("seq", m.seq)
	m.RegisterModule("extra", m.extra)
	return m
}

func (m *towers) Forward(x *autograd.Var) *autograd.Var { return nn.Call(m.seq, x) }

// tokensOf is rank r's input for a step, 2×6×16.
func tokensOf(r, step int) *tensor.Tensor {
	return tensor.Randn(tensor.NewRNG(uint64(7000+100*step+r)), 2, 6, 16)
}

// lossOf is the loss of a step; with reg it also penalises extra's
// parameters, used outside the forward pass only.
func lossOf(m *towers, y *autograd.Var, reg bool) *autograd.Var {
	loss := autograd.MeanAll(autograd.Square(y))
	if reg {
		for _, p := range []*autograd.Var{m.extra.Weight, m.extra.Bias} {
			loss = autograd.Add(loss, autograd.MulScalar(autograd.MeanAll(autograd.Square(p)), 0.01))
		}
	}
	return loss
}

// trainTowers trains the model of every rank for steps of plain SGD under
// DDP with opt and returns rank 0's parameters (DDP keeps them equal).
// twoPasses backpropagates the loss as two halves, each its own backward
// pass.
func trainTowers(t *testing.T, ck bool, opt ddp.Options, steps int, reg, twoPasses bool) []*tensor.Tensor {
	t.Helper()
	var out []*tensor.Tensor
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		net := newTowers(uint64(10+g.Rank()), ck)
		m, err := ddp.New(ctx, net, g, opt)
		if err != nil {
			return err
		}
		ps := nn.Parameters(net)
		for step := range steps {
			nn.ZeroGrad(m, step%2 == 0)
			y := nn.Call(m, autograd.Const(tokensOf(g.Rank(), step)))
			if twoPasses {
				half := autograd.MulScalar(lossOf(net, y, reg), 0.5)
				if err := half.BackwardWith(nil, autograd.BackwardOptions{RetainGraph: true}); err != nil {
					return err
				}
				if err := half.Backward(nil); err != nil {
					return err
				}
				if err := m.Wait(ctx); err != nil {
					return fmt.Errorf("step %d: %w", step, err)
				}
			} else if err := m.Backward(ctx, lossOf(net, y, reg)); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			for _, p := range ps {
				p.Value().Sub(p.Value(), new(tensor.Tensor).MulScalar(p.Grad(), 0.05))
			}
		}
		if g.Rank() == 0 {
			for _, p := range ps {
				out = append(out, p.Value().Clone())
			}
		}
		return nil
	})
	return out
}

func sameParams(t *testing.T, what string, got, want []*tensor.Tensor) {
	t.Helper()
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("%s: %d parameters, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := got[i].Float32s(), want[i].Float32s()
		for k := range w {
			if g[k] != w[k] {
				t.Fatalf("%s: parameter %d element %d is %v, want %v", what, i, k, g[k], w[k])
			}
		}
	}
}

// TestCheckpointedBlocksUnderDDP: a DDP model whose transformer blocks
// (dropout on, one block called twice) are checkpointed ends four steps
// with the parameters, bit for bit, of the same model run plainly under
// DDP, whatever the bucket layout, with gradients as bucket views (the
// recomputation's weight gradients then go straight into the buckets) and
// with StaticGraph.
func TestCheckpointedBlocksUnderDDP(t *testing.T) {
	small := ddp.Options{BucketCapMB: 0.01, FirstBucketCapMB: 0.005}
	for name, opt := range map[string]ddp.Options{
		"default":      {FindUnusedParameters: true},
		"small":        {FindUnusedParameters: true, BucketCapMB: small.BucketCapMB, FirstBucketCapMB: small.FirstBucketCapMB},
		"bucketview":   {FindUnusedParameters: true, GradientAsBucketView: true},
		"static_graph": {StaticGraph: true, BucketCapMB: small.BucketCapMB, FirstBucketCapMB: small.FirstBucketCapMB},
	} {
		t.Run(name, func(t *testing.T) {
			want := trainTowers(t, false, opt, 4, false, false)
			got := trainTowers(t, true, opt, 4, false, false)
			sameParams(t, "checkpointed", got, want)
		})
	}
}

// TestStaticGraphSameAsDynamic: StaticGraph gives, bit for bit, the
// parameters that FindUnusedParameters gives after five steps, with a
// parameter used twice, one unused, checkpointed blocks or not, buckets
// small or not, gradients as bucket views or not.
func TestStaticGraphSameAsDynamic(t *testing.T) {
	for _, ck := range []bool{false, true} {
		for name, opt := range map[string]ddp.Options{"default": {}, "small": {BucketCapMB: 0.01, FirstBucketCapMB: 0.005}, "bucketview": {GradientAsBucketView: true}} {
			t.Run(fmt.Sprintf("ck=%v/%s", ck, name), func(t *testing.T) {
				dyn, static := opt, opt
				dyn.FindUnusedParameters = true
				static.StaticGraph = true
				sameParams(t, "static graph", trainTowers(t, ck, static, 5, false, false), trainTowers(t, ck, dyn, 5, false, false))
			})
		}
	}
}

// TestStaticGraphWhereDynamicFails: a parameter whose gradient two
// backward passes an iteration complete, or that only the loss uses
// outside the forward pass, is an error without StaticGraph (its bucket
// would be reduced without part of it) and trained right with it: as
// with one pass, or as without DDP's unused-parameter marking.
func TestStaticGraphWhereDynamicFails(t *testing.T) {
	for _, c := range []struct {
		name           string
		reg, twoPasses bool
		want           ddp.Options // what gives the reference
	}{
		{"two_passes", false, true, ddp.Options{FindUnusedParameters: true}},
		{"loss_outside_forward", true, false, ddp.Options{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The reference: one pass; extra marked unused, or used
			// by the loss (every parameter then gets a gradient).
			want := trainTowers(t, true, c.want, 3, c.reg, false)
			got := trainTowers(t, true, ddp.Options{StaticGraph: true}, 3, c.reg, c.twoPasses)
			if c.twoPasses {
				// Two halves accumulated are not one whole bit for bit.
				for i := range want {
					if err := close(got[i], want[i], 1e-5); err != nil {
						t.Fatalf("parameter %d: %v", i, err)
					}
				}
			} else {
				sameParams(t, "static graph", got, want)
			}
			disttest.Spawn(t, 2, func(g *dist.Group) error {
				ctx := context.Background()
				net := newTowers(uint64(10+g.Rank()), true)
				m, err := ddp.New(ctx, net, g, ddp.Options{FindUnusedParameters: true})
				if err != nil {
					return err
				}
				y := nn.Call(m, autograd.Const(tokensOf(g.Rank(), 0)))
				loss := lossOf(net, y, c.reg)
				if c.twoPasses {
					_ = loss.BackwardWith(nil, autograd.BackwardOptions{RetainGraph: true})
				}
				_ = loss.Backward(nil)
				err = m.Wait(ctx)
				var rt *ddp.ReadyTwiceError
				if !errors.As(err, &rt) {
					return fmt.Errorf("without StaticGraph Wait returned %v, want a *ReadyTwiceError", err)
				}
				return nil
			})
		})
	}
}

// TestStaticGraphChanged: an iteration that leaves a parameter without the
// gradient the first iteration gave it fails with a *StaticGraphError
// naming it, with both counts.
func TestStaticGraphChanged(t *testing.T) {
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		net := newBranchy(0)
		m, err := ddp.New(ctx, net, g, ddp.Options{StaticGraph: true})
		if err != nil {
			return err
		}
		for step := range 3 {
			net.skip = step == 2
			x, y := batch(g.Rank(), step, 4)
			err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y))
			if step < 2 && err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			if step == 2 {
				var se *ddp.StaticGraphError
				if !errors.As(err, &se) || fmt.Sprint(se.Params, se.Ready, se.Want) != "[b.weight b.bias] [0 0] [1 1]" {
					return fmt.Errorf("changed graph: %v, want a *StaticGraphError for b.weight and b.bias, ready 0 times of 1", err)
				}
			}
		}
		return nil
	})
}

// deepNet is BenchmarkStaticGraph's model: many small layers (a graph of
// many operations to walk) and one unused layer.
type deepNet struct {
	nn.Base
	seq    *nn.Sequential
	unused *nn.Linear
}

func newDeepNet(seed uint64) *deepNet {
	rng := tensor.NewRNG(seed)
	var layers []nn.Layer
	for range 24 {
		layers = append(layers, nn.NewLinear(rng, 16, 16, true), nn.NewTanh())
	}
	m := &deepNet{seq: nn.NewSequential(layers...), unused: nn.NewLinear(rng, 16, 16, true)}
	m.RegisterModule("seq", m.seq)
	m.RegisterModule("unused", m.unused)
	return m
}

func (m *deepNet) Forward(x *autograd.Var) *autograd.Var { return nn.Call(m.seq, x) }

// BenchmarkStaticGraph times a training step (forward, backward, Wait) of
// two goroutine ranks on a 48-operation model with an unused layer, with
// FindUnusedParameters (the graph walked after every forward pass) and
// with StaticGraph (the unused layer known from the first iteration).
// The time and allocations are the two ranks' together, per step.
func BenchmarkStaticGraph(b *testing.B) {
	for _, c := range []struct {
		name string
		opt  ddp.Options
	}{
		{"find_unused", ddp.Options{FindUnusedParameters: true}},
		{"static_graph", ddp.Options{StaticGraph: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			disttest.Spawn(b, 2, func(g *dist.Group) error {
				ctx := context.Background()
				net := newDeepNet(uint64(g.Rank()))
				m, err := ddp.New(ctx, net, g, c.opt)
				if err != nil {
					return err
				}
				x := autograd.Const(tensor.Randn(tensor.NewRNG(uint64(g.Rank())), 8, 16))
				step := func() error {
					nn.ZeroGrad(m, true)
					return m.Backward(ctx, autograd.MeanAll(autograd.Square(nn.Call(m, x))))
				}
				for range 3 { // the recording iteration and the rebuild
					if err := step(); err != nil {
						return err
					}
				}
				if err := g.Barrier(ctx); err != nil {
					return err
				}
				if g.Rank() == 0 {
					b.ResetTimer()
				}
				for range b.N {
					if err := step(); err != nil {
						return err
					}
				}
				return g.Barrier(ctx)
			})
		})
	}
}
