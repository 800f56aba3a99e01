package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/tensor"
)

// The shards. Each draws its initial weights from a generator of its own,
// tensor.NewTorchRNG(seed+index), which draws what PyTorch's does after
// torch.manual_seed(seed+index): so a shard is the same wherever it is
// built, here or on a worker, and tools/peers/rpc_pipeline.py builds the
// same weights.
const (
	shard1 = 1 // conv(1→8, 5×5), ReLU, max pool 2; conv(8→16, 5×5), ReLU, max pool 2
	shard2 = 2 // flatten, linear 256→120, ReLU, linear 120→10
)

// shard is one part of the model on its worker (the tutorial's
// ResNetShard1 and ResNetShard2). Micro-batches arrive concurrently; the
// lock runs their forwards one at a time, as the tutorial's self._lock.
type shard struct {
	mu   sync.Mutex
	seq  *nn.Sequential
	refs paramRefs
}

// newShard builds shard index (shard1 or shard2) from seed.
func newShard(index int, seed uint64) (*shard, error) {
	rng := tensor.NewTorchRNG(seed + uint64(index))
	switch index {
	case shard1:
		return &shard{seq: nn.NewSequential(
			nn.NewConv2d(rng, 1, 8, 5, tensor.Conv2dParams{}, true), nn.NewReLU(), nn.NewMaxPool2d(2),
			nn.NewConv2d(rng, 8, 16, 5, tensor.Conv2dParams{}, true), nn.NewReLU(), nn.NewMaxPool2d(2))}, nil
	case shard2:
		return &shard{seq: nn.NewSequential(nn.NewFlatten(),
			nn.NewLinear(rng, 16*4*4, 120, true), nn.NewReLU(),
			nn.NewLinear(rng, 120, 10, true))}, nil
	}
	return nil, fmt.Errorf("no shard %d (want %d or %d)", index, shard1, shard2)
}

// forward runs the shard on x.
func (s *shard) forward(x *autograd.Var) *autograd.Var {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq.Forward(x)
}

// paramRefs are RRefs to a shard's parameters, made on its owner once
// (the tutorial's parameter_rrefs). The owner's handles live as long as
// the shard; graceful Shutdown releases them.
type paramRefs struct {
	once sync.Once
	refs []*rpc.RRef[*autograd.Var]
}

func (p *paramRefs) get(a *rpc.Agent, m nn.Module) []*rpc.RRef[*autograd.Var] {
	p.once.Do(func() {
		for _, v := range nn.Parameters(m) {
			p.refs = append(p.refs, rpc.NewRRef(a, v))
		}
	})
	return p.refs
}

// microBatches splits x along dimension 0 into parts of ⌈n/m⌉ rows, the
// last one shorter if m does not divide n (torch.Tensor.split with that
// size, as the tutorial's xs.split(split_size)). The parts are views.
func microBatches(x *tensor.Tensor, m int) []*tensor.Tensor {
	n := x.Size(0)
	size := (n + m - 1) / m
	var parts []*tensor.Tensor
	for i := 0; i < n; i += size {
		parts = append(parts, x.Narrow(0, i, min(size, n-i)))
	}
	return parts
}

// lossOf is the loss of a batch whose micro-batches' logits are outs: the
// mean cross entropy of their concatenation (the tutorial concatenates
// the outputs, then takes the loss of the whole).
func lossOf(outs []*autograd.Var, y *tensor.Tensor) *autograd.Var {
	return nn.CrossEntropy(autograd.Cat(0, outs...), y)
}

// shardArgs are the constructor's arguments.
type shardArgs struct {
	Index int
	Seed  uint64
}

// funcs are the functions every worker registers.
type funcs struct {
	newShard rpc.Fn[shardArgs, *shard]
	// forward is both shards' forward: it fetches its input with ToHere
	// (the tutorial's x_rref.to_here()), inside the caller's distributed
	// autograd context, which the call carries.
	forward rpc.Method[*shard, *rpc.RRef[*distautograd.Var], *distautograd.Var]
	params  rpc.Method[*shard, struct{}, []*rpc.RRef[*autograd.Var]]
	// value copies a parameter's value (for the evaluation and the tests).
	value rpc.Method[*autograd.Var, struct{}, *tensor.Tensor]
}

// register registers the functions in reg.
func register(reg *rpc.Registry) (*funcs, error) {
	f := &funcs{}
	var errs [4]error
	f.newShard, errs[0] = rpc.Register(reg, "pipeline.Shard", func(_ context.Context, a shardArgs) (*shard, error) {
		return newShard(a.Index, a.Seed)
	})
	f.forward, errs[1] = rpc.RegisterMethod(reg, "pipeline.Shard.forward", func(ctx context.Context, s *shard, in *rpc.RRef[*distautograd.Var]) (*distautograd.Var, error) {
		// The handle is done with once its value is here: released now,
		// not when a collection finds it.
		defer in.Release()
		x, err := in.ToHere(ctx)
		if err != nil {
			return nil, err
		}
		return distautograd.Wrap(s.forward(x.Var)), nil
	})
	f.params, errs[2] = rpc.RegisterMethod(reg, "pipeline.Shard.parameter_rrefs", func(ctx context.Context, s *shard, _ struct{}) ([]*rpc.RRef[*autograd.Var], error) {
		a, _ := rpc.AgentFrom(ctx)
		return s.refs.get(a, s.seq), nil
	})
	f.value, errs[3] = rpc.RegisterMethod(reg, "pipeline.Parameter.value", func(_ context.Context, p *autograd.Var, _ struct{}) (*tensor.Tensor, error) {
		return p.Value().Clone(), nil
	})
	return f, errors.Join(errs[:]...)
}

// distModel is the tutorial's DistResNet50 on the master: RRefs to the two
// shards, which live on the workers.
type distModel struct {
	a            *rpc.Agent
	f            *funcs
	microBatches int
	p1, p2       *rpc.RRef[*shard]
}

// newDistModel creates the shards on workers w1 and w2 with Remote.
func newDistModel(ctx context.Context, a *rpc.Agent, f *funcs, w1, w2 string, seed uint64, microBatches int) (*distModel, error) {
	m := &distModel{a: a, f: f, microBatches: microBatches}
	var err error
	if m.p1, err = f.newShard.Remote(ctx, a, w1, shardArgs{shard1, seed}); err != nil {
		return nil, err
	}
	if m.p2, err = f.newShard.Remote(ctx, a, w2, shardArgs{shard2, seed}); err != nil {
		m.p1.Release()
		return nil, err
	}
	return m, nil
}

// forward runs the batch x through the pipeline (the tutorial's
// DistResNet50.forward): for each micro-batch, an RRef to it, shard 1's
// output made with Remote (an RRef, staying on shard 1), and shard 2's
// forward on that RRef started with Go; every micro-batch is in flight
// at once. It returns the logits of each micro-batch, in order.
func (m *distModel) forward(ctx context.Context, x *tensor.Tensor) (outs []*autograd.Var, err error) {
	parts := microBatches(x, m.microBatches)
	futs := make([]*rpc.Future[*distautograd.Var], 0, len(parts))
	var refs []interface{ Release() }
	defer func() {
		for _, r := range refs {
			r.Release()
		}
	}()
	for _, xb := range parts {
		xRef := rpc.NewRRef(m.a, distautograd.Wrap(autograd.Const(xb)))
		refs = append(refs, xRef)
		yRef, err := m.f.forward.Remote(ctx, m.a, m.p1, xRef)
		if err != nil {
			return nil, err
		}
		refs = append(refs, yRef)
		futs = append(futs, m.f.forward.Go(ctx, m.a, m.p2, yRef))
	}
	zs, err := rpc.WaitAll(ctx, futs)
	if err != nil {
		return nil, err
	}
	outs = make([]*autograd.Var, len(zs))
	for i, z := range zs {
		outs[i] = z.Var
	}
	return outs, nil
}

// parameterRRefs returns RRefs to both shards' parameters, shard 1's
// first (the tutorial's parameter_rrefs).
func (m *distModel) parameterRRefs(ctx context.Context) ([]*rpc.RRef[*autograd.Var], error) {
	r1, err := m.f.params.Call(ctx, m.a, m.p1, struct{}{})
	if err != nil {
		return nil, err
	}
	r2, err := m.f.params.Call(ctx, m.a, m.p2, struct{}{})
	if err != nil {
		return nil, err
	}
	return append(r1, r2...), nil
}

// release drops the shards.
func (m *distModel) release() {
	m.p1.Release()
	m.p2.Release()
}
