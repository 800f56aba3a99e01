package fsdp_test

import (
	"context"
	"fmt"
	"math"
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
	"github.com/godist/godist/parallel/fsdp"
	"github.com/godist/godist/tensor"
)

// outcome is what rank 0 saw in a training run.
type outcome struct {
	losses  []float64
	sd      map[string]*tensor.Tensor
	mem     fsdp.Memory
	traffic fsdp.Traffic
}

// train runs n steps of FSDP with opt at world (SGD with momentum,
// clipping at clipAt, as withFSDP); check, if set, runs on every rank
// right after New, to hook the module, and what it returns runs after
// the last step.
func train(t *testing.T, world, n int, opt fsdp.Options, check func(net *models.GPT) (verify func() error)) outcome {
	t.Helper()
	var mu sync.Mutex
	var out outcome
	disttest.SpawnWith(t, world, disttest.Options{Timeout: time.Minute}, func(_ *disttest.Job, g *dist.Group) error {
		ctx := context.Background()
		net := gpt(uint64(g.Rank()))
		m, err := fsdp.New(ctx, net, g, opt)
		if err != nil {
			return err
		}
		verify := func() error { return nil }
		if check != nil {
			verify = check(net)
		}
		o := newOpt(m.Parameters())
		var losses []float64
		for step := range n {
			x, y := tokens(g.Rank(), step)
			o.ZeroGrad(true)
			loss := models.Loss(nn.Call(m, autograd.Const(x)), y)
			if err := m.Backward(ctx, loss); err != nil {
				return err
			}
			if _, err := m.ClipGradNorm(ctx, clipAt); err != nil {
				return err
			}
			o.Step()
			losses = append(losses, loss.Value().Item())
		}
		if err := verify(); err != nil {
			return err
		}
		mem, traffic := m.Memory(), m.Traffic()
		sd, err := m.FullStateDict(ctx)
		if err != nil {
			return err
		}
		if g.Rank() == 0 {
			mu.Lock()
			out = outcome{losses: losses, sd: sd, mem: mem, traffic: traffic}
			mu.Unlock()
		}
		return nil
	})
	if out.losses == nil {
		t.FailNow()
	}
	return out
}

// representable reports whether every element of t is a value of d.
func representable(t *tensor.Tensor, d tensor.DType) bool {
	for _, v := range t.Contiguous().Float32s() {
		var back float32
		if d == tensor.BFloat16 {
			back = tensor.BFloat16ToFloat32(tensor.BFloat16FromFloat32(v))
		} else {
			back = tensor.Float16ToFloat32(tensor.Float16FromFloat32(v))
		}
		if math.Float32bits(back) != math.Float32bits(v) {
			return false
		}
	}
	return true
}

// computedOn checks, from a pre-hook on every block that runs after
// FSDP's own (it is registered later), that the parameters a block's
// forward sees (the block's and the root's) are values of d, and that
// some are not zero; and, from a hook on every Linear, that its output
// is too (its product computed in d).
func computedOn(d tensor.DType) func(net *models.GPT) func() error {
	return func(net *models.GPT) func() error {
		var bad []string
		for _, mod := range nn.NamedModules(net) {
			b, ok := mod.Value.(*nn.TransformerBlock)
			if !ok {
				continue
			}
			b.RegisterForwardPreHook(func(nn.Module, *autograd.Var) *autograd.Var {
				nonzero := false
				for _, p := range nn.NamedParameters(net) {
					if !representable(p.Value.Value(), d) {
						bad = append(bad, p.Name)
					}
					if strings.HasPrefix(p.Name, mod.Name+".") && slices.ContainsFunc(p.Value.Value().Contiguous().Float32s(), func(v float32) bool { return v != 0 }) {
						nonzero = true
					}
				}
				if !nonzero {
					bad = append(bad, mod.Name+" (all zeros: not gathered?)")
				}
				return nil
			})
		}
		// The products compute in d: a Linear's output is d's values
		// (a float32 product of d's values would not be).
		linears := 0
		for _, mod := range nn.NamedModules(net) {
			l, ok := mod.Value.(*nn.Linear)
			if !ok {
				continue
			}
			linears++
			l.RegisterForwardHook(func(_ nn.Module, _, y *autograd.Var) *autograd.Var {
				if !representable(y.Value(), d) {
					bad = append(bad, mod.Name+"'s output")
				}
				return nil
			})
		}
		if linears == 0 {
			bad = append(bad, "no Linear to watch")
		}
		return func() error {
			if len(bad) > 0 {
				return fmt.Errorf("forward computed on parameters that are not %v values: %v", d, bad[:min(len(bad), 5)])
			}
			return nil
		}
	}
}

// TestMixedPrecision: with bfloat16 (and float16) parameters and
// reductions the tied GPT's losses over 20 steps stay within 1% of
// float32 FSDP's, for every strategy; every parameter a block computes
// on is a value of the low precision while the float32 shards are not;
// the gathers and the reductions move half the bytes; and Memory counts
// half the gathered bytes, and apart the float32 copies the kernels use.
func TestMixedPrecision(t *testing.T) {
	const n = 20
	bf16 := fsdp.MixedPrecision{ParamDType: tensor.BFloat16}
	for _, c := range []struct {
		world int
		opt   fsdp.Options
	}{
		{2, fsdp.Options{Strategy: fsdp.FullShard, Wrap: isBlock}},
		{3, fsdp.Options{Strategy: fsdp.FullShard, Wrap: blockAndMLP, ForwardPrefetch: true}},
		{2, fsdp.Options{Strategy: fsdp.ShardGradOp, Wrap: isBlock}},
		{2, fsdp.Options{Strategy: fsdp.NoShard, Wrap: isBlock}},
		{4, fsdp.Options{Strategy: fsdp.HybridShard, ShardSize: 2, Wrap: isBlock}},
	} {
		t.Run(fmt.Sprintf("world%d/%v/units=%d", c.world, c.opt.Strategy, unitsOf(c.opt)), func(t *testing.T) {
			want := train(t, c.world, n, c.opt, nil)
			for _, mp := range []fsdp.MixedPrecision{bf16, {ParamDType: tensor.Float16}} {
				opt := c.opt
				opt.MixedPrecision = mp
				got := train(t, c.world, n, opt, computedOn(mp.ParamDType))
				worst, same := 0.0, true
				for i := range want.losses {
					worst = max(worst, math.Abs(got.losses[i]-want.losses[i])/math.Abs(want.losses[i]))
					same = same && got.losses[i] == want.losses[i]
				}
				t.Logf("%v: largest relative loss difference from float32 over %d steps %.2e (last loss %.5f, float32 %.5f)", mp.ParamDType, n, worst, got.losses[n-1], want.losses[n-1])
				if worst > 1e-2 || same {
					t.Errorf("%v: losses %v, float32's %v: want within 1%% and not identical", mp.ParamDType, got.losses, want.losses)
				}
				masters := false
				for _, v := range got.sd {
					masters = masters || !representable(v, mp.ParamDType)
				}
				if !masters {
					t.Errorf("%v: the full state dict holds %v values only: the float32 master shards were rounded", mp.ParamDType, mp.ParamDType)
				}
				if got.traffic.Gather*2 != want.traffic.Gather || got.traffic.Reduce*2 != want.traffic.Reduce {
					t.Errorf("%v: traffic %+v, float32's %+v: want half", mp.ParamDType, got.traffic, want.traffic)
				}
				gm, wm := got.mem, want.mem
				if gm.Params != wm.Params || gm.Grads != wm.Grads || gm.PeakGathered*2 != wm.PeakGathered || wm.PeakUpcast != 0 {
					t.Errorf("%v: memory %+v, float32's %+v: want the same shards and half the gathered bytes", mp.ParamDType, gm, wm)
				}
				// The float32 copies are made as gathers land: at most what
				// float32 FSDP gathers (its prefetches in flight are not
				// copied yet).
				if c.opt.Strategy != fsdp.NoShard && (gm.PeakUpcast == 0 || gm.PeakUpcast > wm.PeakGathered || gm.Gathered != 0 || gm.Upcast != 0) {
					t.Errorf("%v: memory %+v: want float32 copies of at most what float32 FSDP gathers (%d), none held after the step", mp.ParamDType, gm, wm.PeakGathered)
				}
			}
		})
	}
}

// TestMixedPrecisionReduce: bfloat16 parameters with float32 reductions
// reduce as many bytes as float32 FSDP; a dtype FSDP cannot use is an
// error from New.
func TestMixedPrecisionReduce(t *testing.T) {
	opt := fsdp.Options{Wrap: isBlock}
	want := train(t, 2, 2, opt, nil)
	opt.MixedPrecision = fsdp.MixedPrecision{ParamDType: tensor.BFloat16, ReduceDType: tensor.Float32}
	got := train(t, 2, 2, opt, computedOn(tensor.BFloat16))
	if got.traffic.Reduce != want.traffic.Reduce || got.traffic.Gather*2 != want.traffic.Gather {
		t.Errorf("traffic %+v, float32's %+v: want the same reductions and half the gathers", got.traffic, want.traffic)
	}
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		_, err := fsdp.New(context.Background(), gpt(0), g, fsdp.Options{MixedPrecision: fsdp.MixedPrecision{ReduceDType: tensor.Int64}})
		if err == nil || !strings.Contains(err.Error(), "int64") {
			return fmt.Errorf("New with an int64 ReduceDType: %v, want an error naming it", err)
		}
		return nil
	})
}

// TestLimitAllGathers: with nested units (each block and its first MLP
// layer) and both prefetches, a prefetch may gather a third module while
// a block and its MLP layer compute; LimitAllGathers 2 (the default)
// holds it back until one is freed, and 1 until only the root is left.
// The peak gathered memory goes down accordingly, and the training is
// bit for bit the same.
func TestLimitAllGathers(t *testing.T) {
	base := fsdp.Options{Wrap: blockAndMLP, ForwardPrefetch: true}
	peaks := map[int]int{}
	var want outcome
	for _, limit := range []int{-1, 0, 2, 1} {
		opt := base
		opt.LimitAllGathers = limit
		got := train(t, 2, 3, opt, nil)
		peaks[limit] = got.mem.PeakGathered
		if limit == -1 {
			want = got
			continue
		}
		if !slices.Equal(got.losses, want.losses) {
			t.Errorf("limit %d: losses %v, without a limit %v", limit, got.losses, want.losses)
		}
		for k, v := range want.sd {
			if !slices.Equal(got.sd[k].Values(), v.Values()) {
				t.Errorf("limit %d: %s differs from the run without a limit", limit, k)
			}
		}
	}
	// The flat parameters' bytes, padded to the world of 2.
	padded := func(n int) int { return 4 * ((n + 1) / 2 * 2) }
	block := nn.NewTransformerBlock(tensor.NewRNG(0), cfg.Dim, cfg.Heads, 4*cfg.Dim, 0, true)
	mlp := nn.NumParameters(block.Linear1)
	root := padded(nn.NumParameters(gpt(0)) - cfg.Layers*nn.NumParameters(block))
	rest, l1 := padded(nn.NumParameters(block)-mlp), padded(mlp)
	t.Logf("peak gathered bytes by limit: %v (root %d, a block without its MLP layer %d, the layer %d)", peaks, root, rest, l1)
	for limit, want := range map[int]int{
		-1: root + 2*rest + l1, // a block, its MLP layer and the next block
		2:  root + 2*rest,      // a block and the next; or a block and its layer
		0:  root + 2*rest,
		1:  root + rest + l1, // what computation needs, no more
	} {
		if peaks[limit] != want {
			t.Errorf("limit %d: peak gathered %d bytes, want %d", limit, peaks[limit], want)
		}
	}
}
