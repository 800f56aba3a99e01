package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/parallel/fsdp"
	"github.com/godist/godist/parallel/zero"
	"github.com/godist/godist/tensor"
)

// replica is how this rank trains the model: alone, under DDP or under
// FSDP.
type replica struct {
	gpt      *models.GPT
	model    nn.Layer           // what a training step calls
	eval     nn.Layer           // what evaluation calls
	groups   [2][]*autograd.Var // the optimizer's: decayed, not decayed
	fsdp     *fsdp.FSDP         // nil unless sharded
	ddp      *ddp.DDP           // nil unless plain DDP over more than one rank
	backward func(ctx context.Context, loss *autograd.Var) error
	// waited is the time DDP's Wait took after backward, summed over
	// the steps (the communication backward did not hide).
	waited time.Duration
	// clip clips the gradients to a global L2 norm (after DDP's
	// all-reduce, or over every rank's shards).
	clip func(ctx context.Context, max float64) error
	// full runs fn with the whole weights in the GPT (a collective).
	full func(ctx context.Context, fn func() error) error
	// stateDict returns the whole model's weights (a collective).
	stateDict func(ctx context.Context) (map[string]*tensor.Tensor, error)
	// scaler scales the loss with --autocast fp16 (disabled otherwise).
	scaler *optim.GradScaler
}

// memory is rank 0's training memory in bytes, after the last step.
type memory struct {
	Params     int `json:"params"`      // parameters held (FSDP: the shards)
	Grads      int `json:"grads"`       // their gradients
	OptimState int `json:"optim_state"` // the optimizer's state
	// PeakGathered is FSDP's most full parameters gathered at once.
	PeakGathered int `json:"peak_gathered,omitempty"`
}

func (r *replica) memory(opt optim.Optimizer) memory {
	m := memory{OptimState: optim.StateBytes(opt)}
	if z, ok := opt.(*zero.ZeRO); ok {
		m.OptimState = z.StateBytes() // this rank's share
	}
	if r.fsdp != nil {
		fm := r.fsdp.Memory()
		m.Params, m.Grads, m.PeakGathered = fm.Params, fm.Grads, fm.PeakGathered
		return m
	}
	for _, gr := range r.groups {
		for _, p := range gr {
			m.Params += p.Value().Numel() * p.DType().Size()
			if g := p.Grad(); g != nil {
				m.Grads += g.Numel() * g.DType().Size()
			}
		}
	}
	return m
}

// replicate wraps gpt for c.Strategy.
func replicate(ctx context.Context, gpt *models.GPT, g *dist.Group, c config) (*replica, error) {
	r := &replica{gpt: gpt, model: gpt, eval: gpt,
		full:      func(_ context.Context, fn func() error) error { return fn() },
		stateDict: func(context.Context) (map[string]*tensor.Tensor, error) { return nn.StateDict(gpt), nil },
	}
	scaling := optim.GradScalerOptions{Disabled: c.Autocast != "fp16", InitScale: c.InitScale}
	r.scaler = optim.NewGradScaler(scaling)
	isBlock := func(_ string, m nn.Module) bool { _, ok := m.(*nn.TransformerBlock); return ok }
	var strategy fsdp.Strategy
	switch c.Strategy {
	case "", "ddp", "zero":
		for _, gr := range optim.DecayGroups(nn.NamedParameters(gpt), c.WeightDecay, noDecay)[:2] {
			if gr.WeightDecay != 0 {
				r.groups[0] = gr.Params
			} else {
				r.groups[1] = gr.Params
			}
		}
		params := nn.Parameters(gpt)
		r.backward = func(_ context.Context, loss *autograd.Var) error { return loss.Backward(nil) }
		r.clip = func(_ context.Context, max float64) error { nn.ClipGradNorm(params, max); return nil }
		if g.Size() == 1 {
			return r, nil
		}
		d, err := ddp.New(ctx, gpt, g, ddp.Options{GradientAsBucketView: true, BucketCapMB: c.BucketCapMB, FirstBucketCapMB: c.FirstBucketCapMB, AutoBucketCaps: c.AutoBucketCaps})
		if err != nil {
			return nil, err
		}
		// The gradients are the same on every rank after the
		// all-reduce: the local norm is the global one.
		r.model, r.ddp = d, d
		r.backward = func(ctx context.Context, loss *autograd.Var) error {
			if err := loss.Backward(nil); err != nil {
				return err
			}
			t := time.Now()
			err := d.Wait(ctx)
			r.waited += time.Since(t)
			return err
		}
		return r, nil
	case "fsdp":
		strategy = fsdp.FullShard
	case "fsdp-grad-op":
		strategy = fsdp.ShardGradOp
	case "no-shard":
		strategy = fsdp.NoShard
	case "hybrid":
		strategy = fsdp.HybridShard // ShardSize 0: each host shards, hosts replicate
	default:
		return nil, fmt.Errorf("--strategy %q: want ddp, zero, fsdp, fsdp-grad-op, no-shard or hybrid", c.Strategy)
	}
	f, err := fsdp.New(ctx, gpt, g, fsdp.Options{Strategy: strategy, ShardSize: c.ShardSize, Wrap: isBlock,
		ForwardPrefetch: c.ForwardPrefetch, NoBackwardPrefetch: c.NoBackwardPrefetch,
		Group: func(name string, p *autograd.Var) int {
			if p.Value().Dim() >= 2 && !noDecay(name) {
				return 0
			}
			return 1
		}})
	if err != nil {
		return nil, err
	}
	groups := f.ParamGroups()
	copy(r.groups[:], groups)
	// Each rank holds a shard of the gradients: every rank must skip the
	// steps where any shard overflowed.
	scaling.AgreeFoundInf = func(ctx context.Context, found bool) (bool, error) {
		t := tensor.FromFloat32([]float32{0})
		if found {
			t.Float32s()[0] = 1
		}
		err := g.AllReduce(ctx, t, dist.Max)
		return t.Float32s()[0] != 0, err
	}
	r.scaler = optim.NewGradScaler(scaling)
	r.model, r.eval, r.fsdp, r.backward = f, f, f, f.Backward
	r.clip = func(ctx context.Context, max float64) error { _, err := f.ClipGradNorm(ctx, max); return err }
	r.full = f.SummonFullParams
	r.stateDict = f.FullStateDict
	return r, nil
}

// optimizer is AdamW over the two groups, decayed and not; with --strategy
// zero a ZeroRedundancyOptimizer whose ranks each keep the state of their
// share of the parameters, taken in the groups' order so that its state
// dict is laid out as the plain optimizer's.
func (r *replica) optimizer(g *dist.Group, c config) (optim.Optimizer, error) {
	adamW := func(decay, rest []*autograd.Var) *optim.Adam {
		return optim.NewAdamWGroups([]optim.ParamGroup{{Params: decay, WeightDecay: c.WeightDecay}, {Params: rest}},
			optim.AdamOptions{LR: c.LR, Beta1: 0.9, Beta2: c.Beta2, Eps: 1e-8})
	}
	if c.Strategy != "zero" {
		return adamW(r.groups[0], r.groups[1]), nil
	}
	decays := map[*autograd.Var]bool{}
	for _, p := range r.groups[0] {
		decays[p] = true
	}
	all := append(slices.Clone(r.groups[0]), r.groups[1]...)
	return zero.New(all, func(ps []*autograd.Var) optim.Optimizer {
		var decay, rest []*autograd.Var
		for _, p := range ps {
			if decays[p] {
				decay = append(decay, p)
			} else {
				rest = append(rest, p)
			}
		}
		return adamW(decay, rest)
	}, g, zero.Options{})
}

// consolidate brings a ZeroRedundancyOptimizer's state to rank 0, where
// StateDict then has it (a collective; nothing for other optimizers).
func consolidate(ctx context.Context, opt optim.Optimizer) error {
	if z, ok := opt.(*zero.ZeRO); ok {
		return z.ConsolidateStateDict(ctx, 0)
	}
	return nil
}

// noDecay names the parameters besides biases and LayerNorms (which have
// one dimension) that get no weight decay: the embeddings.
func noDecay(name string) bool { return name == "wte.weight" || name == "wpe.weight" }
