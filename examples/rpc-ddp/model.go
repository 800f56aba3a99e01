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
	"github.com/godist/godist/rpc/distoptim"
	"github.com/godist/godist/tensor"
)

// classes is the linear layer's output size: the tutorial's
// nn.Linear(16, 8) and its targets in [0, 8).
const classes = 8

// maxBag is the longest bag: the tutorial's offsets step by
// random.randint(1, 10).
const maxBag = 10

// sizes are the embedding table's.
type sizes struct {
	Rows, Dim int
}

// The parts' seeds: the table and each trainer's linear layer draw their
// initial weights from generators of their own, so that a part is the
// same wherever it is built (DDP then broadcasts trainer 0's layer).
const (
	tableSeed = iota
	linearSeed
)

// embeddingBag is the tutorial's nn.EmbeddingBag(mode="sum") on the
// parameter server: a table of Rows rows of size Dim, standard normal as
// PyTorch's, whose forward sums the rows of each bag.
type embeddingBag struct {
	nn.Base
	emb *nn.Embedding

	refsOnce sync.Once
	refs     []*rpc.RRef[*autograd.Var]
}

func newEmbeddingBag(seed uint64, s sizes) *embeddingBag {
	t := &embeddingBag{emb: nn.NewEmbedding(tensor.NewRNG(seed+tableSeed), s.Rows, s.Dim)}
	t.RegisterModule("embedding", t.emb)
	return t
}

// forward is EmbeddingBag's forward in sum mode: bag b holds
// indices[offsets[b]:offsets[b+1]] (the last bag runs to the end), and row
// b of the len(offsets)×Dim result is the sum of those rows of the table
// (zeros for an empty bag). It is built from autograd.Embedding, one
// Narrow and Sum a bag and a Stack, so the table's gradient is the
// embedding's. Indices out of range and offsets that do not start at 0,
// go down or pass the end are an error, not a panic: they come from
// another worker.
func (t *embeddingBag) forward(indices, offsets []int64) (*autograd.Var, error) {
	rows, dim := t.emb.Weight.Value().Size(0), t.emb.Weight.Value().Size(1)
	switch {
	case len(indices) == 0 || len(offsets) == 0:
		return nil, fmt.Errorf("embedding bag: %d indices in %d bags: want at least one of each", len(indices), len(offsets))
	case offsets[0] != 0:
		return nil, fmt.Errorf("embedding bag: the first offset is %d: want 0", offsets[0])
	}
	for b := 1; b < len(offsets); b++ {
		if offsets[b] < offsets[b-1] || offsets[b] > int64(len(indices)) {
			return nil, fmt.Errorf("embedding bag: offset %d is %d after %d, of %d indices: want offsets non-decreasing and at most the number of indices",
				b, offsets[b], offsets[b-1], len(indices))
		}
	}
	for i, id := range indices {
		if id < 0 || id >= int64(rows) {
			return nil, fmt.Errorf("embedding bag: index %d is %d: want [0, %d)", i, id, rows)
		}
	}
	// The rows are copied out while no trainer's optimizer steps the
	// table (the other trainer's may, as in the tutorial); backward reads
	// no weights.
	var e *autograd.Var
	distoptim.ReadParams(func() { e = t.emb.Forward(autograd.Const(tensor.FromInt64(indices, len(indices)))) })
	bags := make([]*autograd.Var, len(offsets))
	for b, start := range offsets {
		end := int64(len(indices))
		if b+1 < len(offsets) {
			end = offsets[b+1]
		}
		if end == start {
			bags[b] = autograd.Const(tensor.Zeros(dim))
			continue
		}
		bags[b] = autograd.Sum(autograd.Narrow(e, 0, int(start), int(end-start)), 0, false)
	}
	return autograd.Stack(0, bags...), nil
}

// parameterRRefs returns RRefs to the table's parameters, made on its
// owner once (the tutorial's RemoteModule.remote_parameters). The owner's
// own handles live as long as the table; graceful Shutdown releases them.
func (t *embeddingBag) parameterRRefs(a *rpc.Agent) []*rpc.RRef[*autograd.Var] {
	t.refsOnce.Do(func() { t.refs = distoptim.ParameterRRefs(a, t) })
	return t.refs
}

// newLinear is trainer r's linear layer, Dim→classes.
func newLinear(seed uint64, s sizes, trainer int) *nn.Linear {
	return nn.NewLinear(tensor.NewRNG(seed+linearSeed+uint64(trainer)), s.Dim, classes, true)
}

// batch is trainer's random batch of the given step, as the tutorial's
// get_next_batch draws it but with a fixed number of bags: bags bags of 1
// to maxBag indices each, uniform in [0, rows), and a target class a bag.
// It depends only on the seed, the trainer and the step, so that a
// reference can rebuild it.
func batch(seed uint64, trainer, step, bags, rows int) (indices, offsets []int64, target *tensor.Tensor) {
	rng := tensor.NewRNG(seed ^ (uint64(trainer+1)<<40 | uint64(step)<<1 | 1))
	offsets = make([]int64, bags)
	for b := range bags {
		offsets[b] = int64(len(indices))
		for range 1 + rng.IntN(maxBag) {
			indices = append(indices, int64(rng.IntN(rows)))
		}
	}
	t := make([]int64, bags)
	for b := range t {
		t[b] = int64(rng.IntN(classes))
	}
	return indices, offsets, tensor.FromInt64(t, bags)
}

// hybrid is the tutorial's HybridModel: the bags' sums from the embedding
// table, then the linear layer. The table sits behind a function, a
// remote call in the distributed model and a plain call in the
// one-process reference, so that both run this code.
type hybrid struct {
	embed func(ctx context.Context, indices, offsets []int64) (*autograd.Var, error)
	fc    nn.Layer // the DDP-wrapped linear layer, or the plain one
}

// loss returns the cross entropy of the model's logits for the bags
// against target (the tutorial's CrossEntropyLoss).
func (m *hybrid) loss(ctx context.Context, indices, offsets []int64, target *tensor.Tensor) (*autograd.Var, error) {
	e, err := m.embed(ctx, indices, offsets)
	if err != nil {
		return nil, fmt.Errorf("embedding bag: %w", err)
	}
	return nn.CrossEntropy(m.fc.Forward(e), target), nil
}

// The registered functions' arguments and results.
type (
	tableArgs struct {
		Seed  uint64
		Sizes sizes
	}
	bagArgs struct {
		Indices, Offsets []int64
	}
	trainerArgs struct {
		Table   *rpc.RRef[*embeddingBag]
		Trainer int
	}
	// trainerResult is what a trainer's loop returns to the master.
	trainerResult struct {
		Losses  []float64
		Samples int // bags
		// With keepParams, the linear layer's final values.
		Weight, Bias *tensor.Tensor
	}
)

// funcs are the functions every worker registers: the table's
// constructor and methods, and the trainers' loop.
type funcs struct {
	newTable    rpc.Fn[tableArgs, *embeddingBag]
	lookup      rpc.Method[*embeddingBag, bagArgs, *distautograd.Var]
	tableParams rpc.Method[*embeddingBag, struct{}, []*rpc.RRef[*autograd.Var]]
	// tableValue copies the table's weights (ToHere cannot: a module has
	// no exported fields).
	tableValue rpc.Method[*embeddingBag, struct{}, *tensor.Tensor]
	runTrainer rpc.Fn[trainerArgs, *trainerResult]
}

// register registers the functions in reg; trainer is this worker's
// loop, which only the trainers are called for.
func register(reg *rpc.Registry, trainer func(ctx context.Context, args trainerArgs) (*trainerResult, error)) (*funcs, error) {
	f := &funcs{}
	var errs [5]error
	f.newTable, errs[0] = rpc.Register(reg, "rpc-ddp.EmbeddingBag", func(_ context.Context, a tableArgs) (*embeddingBag, error) {
		if a.Sizes.Rows < 1 || a.Sizes.Dim < 1 {
			return nil, fmt.Errorf("embedding bag of %d×%d: want at least 1×1", a.Sizes.Rows, a.Sizes.Dim)
		}
		return newEmbeddingBag(a.Seed, a.Sizes), nil
	})
	// Plain []int64 arguments: a call made in a distributed autograd
	// context carries it, so the result is recorded there and the table
	// gets its gradient in the caller's context.
	f.lookup, errs[1] = rpc.RegisterMethod(reg, "rpc-ddp.EmbeddingBag.forward", func(_ context.Context, t *embeddingBag, a bagArgs) (*distautograd.Var, error) {
		v, err := t.forward(a.Indices, a.Offsets)
		if err != nil {
			return nil, err
		}
		return distautograd.Wrap(v), nil
	})
	f.tableParams, errs[2] = rpc.RegisterMethod(reg, "rpc-ddp.EmbeddingBag.remote_parameters", func(ctx context.Context, t *embeddingBag, _ struct{}) ([]*rpc.RRef[*autograd.Var], error) {
		a, _ := rpc.AgentFrom(ctx)
		return t.parameterRRefs(a), nil
	})
	f.tableValue, errs[3] = rpc.RegisterMethod(reg, "rpc-ddp.EmbeddingBag.weight", func(_ context.Context, t *embeddingBag, _ struct{}) (*tensor.Tensor, error) {
		var w *tensor.Tensor
		distoptim.ReadParams(func() { w = t.emb.Weight.Value().Clone() })
		return w, nil
	})
	f.runTrainer, errs[4] = rpc.Register(reg, "rpc-ddp.run_trainer", trainer)
	return f, errors.Join(errs[:]...)
}
