package ddp_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint"
	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/tensor"
)

// ckData is a small classification set: 40 examples of 6 features.
func ckData() *tensor.Tensor {
	return tensor.Randn(tensor.NewRNG(42), 40, 6)
}

func ckLabels() *tensor.Tensor {
	rng := tensor.NewRNG(43)
	y := make([]int64, 40)
	for i := range y {
		y[i] = int64(rng.IntN(3))
	}
	return tensor.FromInt64(y)
}

// ckRun trains model from pos for steps optimizer steps, taking its
// batches from a shuffled DistributedSampler (5 batches of 4 per epoch
// and rank at world 2) and resuming mid-epoch as the package documents:
// SetEpoch(pos.Epoch), skip pos.Batch batches. It returns the local losses
// and the position reached.
func ckRun(ctx context.Context, g *dist.Group, m *ddp.DDP, opt optim.Optimizer, pos ddp.Position, steps int) ([]float64, ddp.Position, error) {
	x, y := ckData(), ckLabels()
	sampler, err := data.NewDistributedSampler(x.Size(0), g.Size(), g.Rank(), true, 7, false)
	if err != nil {
		return nil, pos, err
	}
	loader := data.NewLoader(data.NewTensorDataset(x, y), data.LoaderOptions{BatchSize: 4, Sampler: sampler})
	var losses []float64
	for len(losses) < steps {
		loader.SetEpoch(pos.Epoch)
		b := 0
		for batch := range loader.Batches() {
			if b < pos.Batch {
				b++
				continue // trained on before the checkpoint
			}
			if len(losses) == steps {
				return losses, pos, nil
			}
			opt.ZeroGrad(true)
			loss := nn.CrossEntropy(nn.Call(m, autograd.Const(batch[0])), batch[1])
			if err := m.Backward(ctx, loss); err != nil {
				return nil, pos, err
			}
			opt.Step()
			losses = append(losses, loss.Value().Item())
			b++
			pos.Batch, pos.Step = b, pos.Step+1
		}
		pos.Epoch, pos.Batch = pos.Epoch+1, 0
	}
	return losses, pos, nil
}

func TestCheckpointResumeIsExact(t *testing.T) {
	for _, tc := range []struct {
		world int
		adam  bool
		opt   ddp.Options
		// groups: AdamW over decay and no-decay groups.
		groups bool
	}{
		{2, false, ddp.Options{}, false},
		{3, false, ddp.Options{BucketCapMB: 1e-4, FirstBucketCapMB: 1e-5}, false},
		{2, true, ddp.Options{GradientAsBucketView: true}, false},
		{2, false, ddp.Options{}, true},
	} {
		t.Run(fmt.Sprintf("world%d/adam=%v/groups=%v/%+v", tc.world, tc.adam, tc.groups, tc.opt), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ckpt.safetensors")
			newOpt := func(m nn.Module, lr float64) optim.Optimizer {
				if tc.groups {
					return optim.NewAdamWGroups(optim.DecayGroups(nn.NamedParameters(m), 0.1, nil), optim.AdamOptions{LR: lr})
				}
				if tc.adam {
					return optim.NewAdam(nn.Parameters(m), optim.AdamOptions{LR: lr})
				}
				return optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: lr, Momentum: 0.9})
			}
			disttest.Spawn(t, tc.world, func(g *dist.Group) error {
				ctx := context.Background()
				m, err := ddp.New(ctx, mlp(uint64(g.Rank())), g, tc.opt)
				if err != nil {
					return err
				}
				opt := newOpt(m, 0.05)
				_, pos, err := ckRun(ctx, g, m, opt, ddp.Position{}, 3)
				if err != nil {
					return err
				}
				meta := pos.Meta()
				meta["note"] = "hello"
				if err := ddp.SaveCheckpoint(ctx, path, m, opt, meta); err != nil {
					return err
				}
				want, _, err := ckRun(ctx, g, m, opt, pos, 6) // crosses into the next epoch
				if err != nil {
					return err
				}

				// A fresh replica, other weights, another learning rate: all
				// of it comes back from the checkpoint.
				m2, err := ddp.New(ctx, mlp(uint64(100+g.Rank())), g, tc.opt)
				if err != nil {
					return err
				}
				opt2 := newOpt(m2, 0.5)
				meta2, err := ddp.LoadCheckpoint(ctx, path, m2, opt2)
				if err != nil {
					return err
				}
				if meta2["note"] != "hello" || meta2[ddp.MetaWorldSize] != fmt.Sprint(tc.world) {
					return fmt.Errorf("metadata %v", meta2)
				}
				pos2, err := ddp.ParsePosition(meta2)
				if err != nil {
					return err
				}
				if pos2 != pos {
					return fmt.Errorf("position %+v, saved %+v", pos2, pos)
				}
				got, _, err := ckRun(ctx, g, m2, opt2, pos2, 6)
				if err != nil {
					return err
				}
				for i := range want {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						return fmt.Errorf("resumed loss at step %d is %v, uninterrupted %v (want bit-identical)\nresumed %v\nuninterrupted %v", pos.Step+i, got[i], want[i], got, want)
					}
				}
				p1, p2 := nn.NamedParameters(m), nn.NamedParameters(m2)
				for i := range p1 {
					if !tensor.Equal(p1[i].Value.Value(), p2[i].Value.Value()) {
						return fmt.Errorf("%s differs after the resumed steps", p1[i].Name)
					}
				}
				return nil
			})
		})
	}
}

func TestCheckpointFileLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ckpt.safetensors")
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		m, err := ddp.New(ctx, mlp(0), g, ddp.Options{})
		if err != nil {
			return err
		}
		opt := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.1, Momentum: 0.9})
		if _, _, err := ckRun(ctx, g, m, opt, ddp.Position{}, 1); err != nil {
			return err
		}
		if err := ddp.SaveCheckpoint(ctx, path, m, opt, nil); err != nil {
			return err
		}
		// Every rank may read the file as soon as SaveCheckpoint returns.
		ts, meta, err := checkpoint.LoadFile(path)
		if err != nil {
			return err
		}
		for _, k := range []string{"model.0.weight", "model.2.bias", "optim.state.0.momentum_buffer", "optim.param_groups.0.lr"} {
			if ts[k] == nil {
				return fmt.Errorf("no %s in the checkpoint (keys %v)", k, keys(ts))
			}
		}
		if meta[ddp.MetaWorldSize] != "2" {
			return fmt.Errorf("metadata %v", meta)
		}
		return nil
	})
}

func keys(m map[string]*tensor.Tensor) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// wide is mlp with a different output layer.
func wide(seed uint64) *nn.Sequential {
	rng := tensor.NewRNG(seed)
	return nn.NewSequential(nn.NewLinear(rng, 6, 16, true), nn.NewTanh(), nn.NewLinear(rng, 16, 4, true))
}

// deeper is mlp with one more layer.
func deeper(seed uint64) *nn.Sequential {
	rng := tensor.NewRNG(seed)
	return nn.NewSequential(nn.NewLinear(rng, 6, 16, true), nn.NewTanh(), nn.NewLinear(rng, 16, 3, true), nn.NewTanh(), nn.NewLinear(rng, 3, 3, true))
}

func TestCheckpointErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.safetensors")
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		m, err := ddp.New(ctx, mlp(0), g, ddp.Options{})
		if err != nil {
			return err
		}
		opt := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.1, Momentum: 0.9})
		if err := ddp.SaveCheckpoint(ctx, path, m, opt, nil); err != nil {
			return err
		}

		expect := func(what string, err error, wants ...string) error {
			if err == nil {
				return fmt.Errorf("%s: no error", what)
			}
			for _, w := range wants {
				if !strings.Contains(err.Error(), w) {
					return fmt.Errorf("%s: error %q does not mention %q", what, err, w)
				}
			}
			return nil
		}
		load := func(net *nn.Sequential, o func(nn.Module) optim.Optimizer, p string) error {
			d, err := ddp.New(ctx, net, g, ddp.Options{})
			if err != nil {
				return err
			}
			var opt optim.Optimizer
			if o != nil {
				opt = o(d)
			}
			_, err = ddp.LoadCheckpoint(ctx, p, d, opt)
			return err
		}
		sgd := func(m nn.Module) optim.Optimizer { return optim.NewSGD(nn.Parameters(m), optim.SGDOptions{}) }
		adam := func(m nn.Module) optim.Optimizer { return optim.NewAdam(nn.Parameters(m), optim.AdamOptions{}) }

		if err := expect("shape mismatch", load(wide(0), sgd, path), "shape mismatch for 2.weight", "2.bias"); err != nil {
			return err
		}
		if err := expect("missing keys", load(deeper(0), sgd, path), "missing keys 4.weight, 4.bias"); err != nil {
			return err
		}
		if err := expect("another optimizer", load(mlp(0), adam, path), "optim.param_groups.0.beta1"); err != nil {
			return err
		}
		// The model alone loads with a nil optimizer.
		if err := load(mlp(0), nil, path); err != nil {
			return fmt.Errorf("model alone: %w", err)
		}
		// A file that only rank 1 cannot read: rank 1 reports why, rank 0
		// that rank 1 failed.
		p := path
		if g.Rank() == 1 {
			p = filepath.Join(dir, "missing.safetensors")
		}
		err = load(mlp(0), sgd, p)
		if g.Rank() == 1 {
			if err := expect("unreadable file", err, "rank 1", "missing.safetensors"); err != nil {
				return err
			}
		} else if err := expect("peer failed", err, "ranks [1] failed"); err != nil {
			return err
		}
		// Rank 0 cannot write: every rank hears of it.
		err = ddp.SaveCheckpoint(ctx, filepath.Join(dir, "no", "such", "dir", "c.safetensors"), m, opt, nil)
		return expect("unwritable path", err, "no/such/dir")
	})
}

// backwards registers its second layer first, so the order in which
// gradients become ready (b's, then a's) is not the reverse of
// registration order, and DDP's rebuilt bucket differs from its initial
// one. Where a bucket is all-reduced by the ring (over 1 MiB), an
// element's summation order depends on its place in the bucket: with
// 40,000 hidden units here and without the saved layout, the resumed run's
// first step (on the initial layout) differed in the last bits from the
// uninterrupted run's (on the rebuilt one), and the losses parted two
// steps later. The test keeps the model small and checks the layout, and
// the final state bit for bit; with 6,000 hidden units (a bucket of 217
// KiB) over TCP with shared memory, the bucket is reduced in place, each
// rank summing its own chunk: the layout decides the chunk, hence the
// order, too.
type backwards struct {
	nn.Base
	a, b *nn.Linear
}

func newBackwards(seed uint64, hidden int) *backwards {
	rng := tensor.NewRNG(seed)
	m := &backwards{b: nn.NewLinear(rng, hidden, 3, true), a: nn.NewLinear(rng, 6, hidden, true)}
	m.RegisterModule("b", m.b)
	m.RegisterModule("a", m.a)
	return m
}

func (m *backwards) Forward(x *autograd.Var) *autograd.Var {
	return nn.Call(m.b, autograd.Tanh(nn.Call(m.a, x)))
}

func TestCheckpointKeepsBucketLayout(t *testing.T) {
	for _, tc := range []struct {
		world, hidden int
		shm           bool
	}{{3, 100, false}, {4, 100, false}, {3, 6000, true}, {4, 6000, true}} {
		t.Run(fmt.Sprintf("world%d/hidden%d/shm=%v", tc.world, tc.hidden, tc.shm), func(t *testing.T) {
			testKeepsBucketLayout(t, tc.world, tc.hidden, tc.shm)
		})
	}
}

func testKeepsBucketLayout(t *testing.T, world, hidden int, shm bool) {
	path := filepath.Join(t.TempDir(), "ckpt.safetensors")
	disttest.SpawnWith(t, world, disttest.Options{TCP: shm, SharedMemory: shm}, func(_ *disttest.Job, g *dist.Group) error {
		ctx := context.Background()
		m, err := ddp.New(ctx, newBackwards(uint64(g.Rank()), hidden), g, ddp.Options{})
		if err != nil {
			return err
		}
		before := fmt.Sprint(m.Buckets())
		opt := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.05, Momentum: 0.9})
		_, pos, err := ckRun(ctx, g, m, opt, ddp.Position{}, 2)
		if err != nil {
			return err
		}
		if after := fmt.Sprint(m.Buckets()); after == before {
			return fmt.Errorf("buckets %s not rebuilt; the test needs a model whose ready order differs", after)
		}
		if err := ddp.SaveCheckpoint(ctx, path, m, opt, pos.Meta()); err != nil {
			return err
		}
		want, _, err := ckRun(ctx, g, m, opt, pos, 3)
		if err != nil {
			return err
		}
		m2, err := ddp.New(ctx, newBackwards(9, hidden), g, ddp.Options{})
		if err != nil {
			return err
		}
		opt2 := optim.NewSGD(nn.Parameters(m2), optim.SGDOptions{})
		if _, err := ddp.LoadCheckpoint(ctx, path, m2, opt2); err != nil {
			return err
		}
		if got, want := fmt.Sprint(m2.Buckets()), fmt.Sprint(m.Buckets()); got != want {
			return fmt.Errorf("buckets after loading %s, saved %s", got, want)
		}
		got, _, err := ckRun(ctx, g, m2, opt2, pos, 3)
		if err != nil {
			return err
		}
		for i := range want {
			if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
				return fmt.Errorf("resumed loss %d is %v, uninterrupted %v", i, got[i], want[i])
			}
		}
		for name, sd := range map[string][2]map[string]*tensor.Tensor{
			"parameter": {nn.StateDict(m), nn.StateDict(m2)},
			"optimizer": {opt.StateDict(), opt2.StateDict()},
		} {
			for k, w := range sd[0] {
				if !tensor.Equal(w, sd[1][k]) {
					return fmt.Errorf("%s state %s differs from the uninterrupted run's after the resumed steps", name, k)
				}
			}
		}
		return nil
	})
}
