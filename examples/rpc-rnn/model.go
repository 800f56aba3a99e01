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

// vocab is the number of tokens: the corpus is read byte by byte.
const vocab = 256

// sizes are the model's dimensions.
type sizes struct {
	Emb, Hidden, Layers int
	Dropout             float64 // of the embedding table's output and the decoder's input
}

// The parts' seeds: each part draws its initial weights (and the embedding
// table and the decoder their dropout masks) from a generator of its own,
// so a part is the same wherever it is built.
const (
	tableSeed = iota
	rnnSeed
	decoderSeed
)

// embeddingTable is the tutorial's EmbeddingTable: an embedding whose
// weights are uniform in ±0.1, then dropout.
type embeddingTable struct {
	nn.Base
	enc  *nn.Embedding
	drop *nn.Dropout
	refs paramRefs
}

func newEmbeddingTable(seed uint64, s sizes) *embeddingTable {
	rng := tensor.NewRNG(seed + tableSeed)
	t := &embeddingTable{enc: nn.NewEmbedding(rng, vocab, s.Emb), drop: nn.NewDropout(s.Dropout, rng)}
	t.enc.Weight.Value().Uniform(rng, -0.1, 0.1)
	t.RegisterModule("encoder", t.enc)
	return t
}

// forward looks up the rows of the int64 indices x.
func (t *embeddingTable) forward(x *tensor.Tensor) *autograd.Var {
	return t.drop.Forward(t.enc.Forward(autograd.Const(x)))
}

// decoder is the tutorial's Decoder: dropout, then a linear layer whose
// weights are uniform in ±0.1 and whose bias is zero.
type decoder struct {
	nn.Base
	dec  *nn.Linear
	drop *nn.Dropout
	refs paramRefs
}

func newDecoder(seed uint64, s sizes) *decoder {
	rng := tensor.NewRNG(seed + decoderSeed)
	d := &decoder{dec: nn.NewLinear(rng, s.Hidden, vocab, true), drop: nn.NewDropout(s.Dropout, rng)}
	d.dec.Weight.Value().Uniform(rng, -0.1, 0.1)
	d.dec.Bias.Value().Zero()
	d.RegisterModule("decoder", d.dec)
	return d
}

// forward maps the LSTM's output to logits over the vocabulary.
func (d *decoder) forward(h *autograd.Var) *autograd.Var {
	return d.dec.Forward(d.drop.Forward(h))
}

// newRNN is the LSTM between them, batch first.
func newRNN(seed uint64, s sizes) *nn.LSTM {
	return nn.NewLSTM(tensor.NewRNG(seed+rnnSeed), s.Emb, s.Hidden, nn.RNNOptions{Layers: s.Layers, BatchFirst: true})
}

// paramRefs are RRefs to a module's parameters, made on its owner once.
// The owner's own handles live as long as the module; graceful Shutdown
// releases them.
type paramRefs struct {
	once sync.Once
	refs []*rpc.RRef[*autograd.Var]
}

// get returns RRefs to m's parameters (the tutorial's _parameter_rrefs).
func (p *paramRefs) get(a *rpc.Agent, m nn.Module) []*rpc.RRef[*autograd.Var] {
	p.once.Do(func() { p.refs = parameterRRefs(a, m) })
	return p.refs
}

func parameterRRefs(a *rpc.Agent, m nn.Module) []*rpc.RRef[*autograd.Var] {
	var refs []*rpc.RRef[*autograd.Var]
	for _, p := range nn.Parameters(m) {
		refs = append(refs, rpc.NewRRef(a, p))
	}
	return refs
}

// model is the tutorial's RNNModel: embedding table, LSTM, decoder. The
// table and the decoder sit behind functions, remote calls in the
// distributed model and plain calls in the one-process reference, so that
// both run this code.
type model struct {
	embed  func(ctx context.Context, x *tensor.Tensor) (*autograd.Var, error)
	rnn    *nn.LSTM
	decode func(ctx context.Context, h *autograd.Var) (*autograd.Var, error)
}

// loss runs the model over the windows x (batch×block int64) and returns
// the mean cross entropy of its predictions of y. Each window starts from
// a zero state: the windows are drawn at random, so there is no state to
// carry over from the last batch, as the tutorial does for its
// consecutive ones.
func (m *model) loss(ctx context.Context, x, y *tensor.Tensor) (*autograd.Var, error) {
	emb, err := m.embed(ctx, x)
	if err != nil {
		return nil, fmt.Errorf("embedding: %w", err)
	}
	out, _, _ := m.rnn.Forward(emb, nil, nil)
	logits, err := m.decode(ctx, out)
	if err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	return nn.CrossEntropy(autograd.Reshape(logits, -1, vocab), y.Reshape(-1)), nil
}

// The registered functions' arguments.
type partArgs struct {
	Seed  uint64
	Sizes sizes
}

// funcs are the functions every worker registers: the remote modules'
// constructors and methods.
type funcs struct {
	newTable    rpc.Fn[partArgs, *embeddingTable]
	newDecoder  rpc.Fn[partArgs, *decoder]
	embed       rpc.Method[*embeddingTable, *distautograd.Var, *distautograd.Var]
	decode      rpc.Method[*decoder, *distautograd.Var, *distautograd.Var]
	tableParams rpc.Method[*embeddingTable, struct{}, []*rpc.RRef[*autograd.Var]]
	decParams   rpc.Method[*decoder, struct{}, []*rpc.RRef[*autograd.Var]]
	// value copies a parameter's value. (ToHere cannot: an autograd.Var
	// has no exported fields, so it would arrive empty.)
	value rpc.Method[*autograd.Var, struct{}, *tensor.Tensor]
}

// register registers the functions in reg.
func register(reg *rpc.Registry) (*funcs, error) {
	f := &funcs{}
	var errs [7]error
	f.newTable, errs[0] = rpc.Register(reg, "rnn.EmbeddingTable", func(_ context.Context, a partArgs) (*embeddingTable, error) {
		return newEmbeddingTable(a.Seed, a.Sizes), nil
	})
	f.newDecoder, errs[1] = rpc.Register(reg, "rnn.Decoder", func(_ context.Context, a partArgs) (*decoder, error) {
		return newDecoder(a.Seed, a.Sizes), nil
	})
	// The indices travel in a Var, which needs no gradient but carries the
	// distributed autograd context, so that the lookup's result is
	// recorded in it and the table gets its gradient.
	f.embed, errs[2] = rpc.RegisterMethod(reg, "rnn.EmbeddingTable.forward", func(_ context.Context, t *embeddingTable, x *distautograd.Var) (*distautograd.Var, error) {
		return distautograd.Wrap(t.forward(x.Value())), nil
	})
	f.decode, errs[3] = rpc.RegisterMethod(reg, "rnn.Decoder.forward", func(_ context.Context, d *decoder, h *distautograd.Var) (*distautograd.Var, error) {
		return distautograd.Wrap(d.forward(h.Var)), nil
	})
	f.tableParams, errs[4] = rpc.RegisterMethod(reg, "rnn.EmbeddingTable.parameter_rrefs", func(ctx context.Context, t *embeddingTable, _ struct{}) ([]*rpc.RRef[*autograd.Var], error) {
		a, _ := rpc.AgentFrom(ctx)
		return t.refs.get(a, t), nil
	})
	f.decParams, errs[5] = rpc.RegisterMethod(reg, "rnn.Decoder.parameter_rrefs", func(ctx context.Context, d *decoder, _ struct{}) ([]*rpc.RRef[*autograd.Var], error) {
		a, _ := rpc.AgentFrom(ctx)
		return d.refs.get(a, d), nil
	})
	f.value, errs[6] = rpc.RegisterMethod(reg, "rnn.Parameter.value", func(_ context.Context, p *autograd.Var, _ struct{}) (*tensor.Tensor, error) {
		return p.Value().Clone(), nil
	})
	return f, errors.Join(errs[:]...)
}

// remoteModel is the distributed RNNModel on the trainer: RRefs to the
// embedding table and the decoder, which the parameter server holds, and
// the LSTM here.
type remoteModel struct {
	model
	a     *rpc.Agent
	table *rpc.RRef[*embeddingTable]
	dec   *rpc.RRef[*decoder]
}

// newRemoteModel creates the embedding table and the decoder on ps with
// Remote and the LSTM here.
func newRemoteModel(ctx context.Context, a *rpc.Agent, f *funcs, ps string, seed uint64, s sizes) (*remoteModel, error) {
	m := &remoteModel{a: a}
	var err error
	if m.table, err = f.newTable.Remote(ctx, a, ps, partArgs{seed, s}); err != nil {
		return nil, err
	}
	if m.dec, err = f.newDecoder.Remote(ctx, a, ps, partArgs{seed, s}); err != nil {
		m.table.Release()
		return nil, err
	}
	m.rnn = newRNN(seed, s)
	m.embed = func(ctx context.Context, x *tensor.Tensor) (*autograd.Var, error) {
		e, err := f.embed.Call(ctx, a, m.table, distautograd.Wrap(autograd.Const(x)))
		if err != nil {
			return nil, err
		}
		return e.Var, nil
	}
	m.decode = func(ctx context.Context, h *autograd.Var) (*autograd.Var, error) {
		d, err := f.decode.Call(ctx, a, m.dec, distautograd.Wrap(h))
		if err != nil {
			return nil, err
		}
		return d.Var, nil
	}
	return m, nil
}

// parameterRRefs returns RRefs to every parameter of the model, in the
// tutorial's order: the embedding table's (on the parameter server), the
// LSTM's (here), the decoder's (on the parameter server).
func (m *remoteModel) parameterRRefs(ctx context.Context, a *rpc.Agent, f *funcs) ([]*rpc.RRef[*autograd.Var], error) {
	refs, err := f.tableParams.Call(ctx, a, m.table, struct{}{})
	if err != nil {
		return nil, err
	}
	refs = append(refs, parameterRRefs(a, m.rnn)...)
	dec, err := f.decParams.Call(ctx, a, m.dec, struct{}{})
	if err != nil {
		return nil, err
	}
	return append(refs, dec...), nil
}

// release drops the remote modules.
func (m *remoteModel) release() {
	m.table.Release()
	m.dec.Release()
}
