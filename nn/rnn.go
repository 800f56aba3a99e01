package nn

import (
	"fmt"
	"math"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// RNNOptions configure RNN, LSTM and GRU, with PyTorch's meanings.
type RNNOptions struct {
	Layers     int  // stacked layers; 0 means 1
	BatchFirst bool // input and output are (batch, seq, feature)
	NoBias     bool
	// Bidirectional runs a second set of weights over the reversed
	// sequence in every layer (names with the suffix "_reverse"); a
	// layer's output is both directions' hidden states concatenated, and
	// the final states hold layers×2 entries, layer by layer, forward
	// first.
	Bidirectional bool
	// Dropout, in training mode, drops each output of every layer but the
	// last with this probability (scaling the rest by 1/(1-p)), as
	// torch.nn.LSTM's dropout; masks are drawn from DropoutRNG.
	Dropout    float64
	DropoutRNG *tensor.RNG
}

// recurrent holds the weights shared by RNN, LSTM and GRU, named as
// PyTorch names them: weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0,
// ..., and with the "_reverse" suffix for the reverse direction. Index
// k = layer×directions + direction.
type recurrent struct {
	Base
	Input, Hidden, Layers, gates int
	BatchFirst, Bidirectional    bool
	Dropout                      float64
	dropRNG                      *tensor.RNG
	wih, whh, bih, bhh           []*autograd.Var
	// unfused makes LSTM and GRU record their cells step by step, the
	// form the tests hold the fused layers to.
	unfused bool
}

func (r *recurrent) dirs() int {
	if r.Bidirectional {
		return 2
	}
	return 1
}

func (r *recurrent) init(rng *tensor.RNG, input, hidden, gates int, opt RNNOptions) {
	if opt.Dropout < 0 || opt.Dropout >= 1 || opt.Dropout > 0 && opt.DropoutRNG == nil {
		panic(fmt.Sprintf("nn: recurrent dropout %v: want 0 <= p < 1, and a DropoutRNG when p > 0", opt.Dropout))
	}
	r.Input, r.Hidden, r.Layers, r.gates, r.BatchFirst = input, hidden, max(opt.Layers, 1), gates, opt.BatchFirst
	r.Bidirectional, r.Dropout, r.dropRNG = opt.Bidirectional, opt.Dropout, opt.DropoutRNG
	bound := 1 / math.Sqrt(float64(hidden))
	u := func(shape ...int) *autograd.Var {
		return autograd.Param(tensor.Zeros(shape...).Uniform(rng, -bound, bound))
	}
	// PyTorch's order: per layer, per direction, w_ih, w_hh, b_ih, b_hh.
	for l := range r.Layers {
		in := input
		if l > 0 {
			in = hidden * r.dirs()
		}
		for d := range r.dirs() {
			sfx := fmt.Sprintf("_l%d", l)
			if d == 1 {
				sfx += "_reverse"
			}
			k := len(r.wih)
			r.wih = append(r.wih, u(gates*hidden, in))
			r.whh = append(r.whh, u(gates*hidden, hidden))
			r.RegisterParameter("weight_ih"+sfx, r.wih[k])
			r.RegisterParameter("weight_hh"+sfx, r.whh[k])
			if opt.NoBias {
				r.bih, r.bhh = append(r.bih, nil), append(r.bhh, nil)
				continue
			}
			r.bih = append(r.bih, u(gates*hidden))
			r.bhh = append(r.bhh, u(gates*hidden))
			r.RegisterParameter("bias_ih"+sfx, r.bih[k])
			r.RegisterParameter("bias_hh"+sfx, r.bhh[k])
		}
	}
}

// layerFunc runs one direction of one layer (weights k) over x (seq,
// batch, in), from the initial states st (batch, hidden each), and returns
// the hidden states of every step (seq, batch, hidden) and the final
// states.
type layerFunc func(k int, x *autograd.Var, st []*autograd.Var, reverse bool) (*autograd.Var, []*autograd.Var)

// run applies layer to every layer and direction. x is (seq, batch, in) or
// batch-first; states are (layers×directions, batch, hidden) or nil for
// zeros.
func (r *recurrent) run(x *autograd.Var, states []*autograd.Var, layer layerFunc) (*autograd.Var, []*autograd.Var) {
	if x.Value().Dim() != 3 {
		panic(fmt.Sprintf("nn: recurrent layer given input of shape %v; want 3-d", x.Shape()))
	}
	if r.BatchFirst {
		x = autograd.Transpose(x, 0, 1)
	}
	batch := x.Value().Size(1)
	outStates := make([][]*autograd.Var, len(states))
	for l := range r.Layers {
		outs := make([]*autograd.Var, r.dirs())
		for d := range r.dirs() {
			k := l*r.dirs() + d
			st := make([]*autograd.Var, len(states))
			for i, s := range states {
				if s == nil {
					st[i] = autograd.Const(tensor.New(x.DType(), batch, r.Hidden))
				} else {
					st[i] = autograd.Select(s, 0, k)
				}
			}
			var fin []*autograd.Var
			outs[d], fin = layer(k, x, st, d == 1)
			for i := range fin {
				outStates[i] = append(outStates[i], fin[i])
			}
		}
		x = outs[0]
		if len(outs) > 1 {
			x = autograd.Cat(2, outs...)
		}
		if l < r.Layers-1 && r.Dropout > 0 && r.Training() {
			x = dropout(x, r.Dropout, r.dropRNG)
		}
	}
	if r.BatchFirst {
		x = autograd.Transpose(x, 0, 1)
	}
	finals := make([]*autograd.Var, len(states))
	for i := range finals {
		finals[i] = autograd.Stack(0, outStates[i]...)
	}
	return x, finals
}

// stepwise returns the layerFunc that records cell (for weights k) at
// every time step: the input projection of all steps as one product, then
// cell from it and the states of the step before.
func (r *recurrent) stepwise(cell func(k int, xw *autograd.Var, st []*autograd.Var) []*autograd.Var) layerFunc {
	return func(k int, x *autograd.Var, st []*autograd.Var, reverse bool) (*autograd.Var, []*autograd.Var) {
		seq, batch := x.Value().Size(0), x.Value().Size(1)
		xw := autograd.Linear(x, r.wih[k], r.bih[k])
		hs := make([]*autograd.Var, seq)
		for i := range seq {
			t := i
			if reverse {
				t = seq - 1 - i // the reverse direction reads the sequence backwards
			}
			st = cell(k, autograd.Select(xw, 0, t), st)
			hs[t] = st[0]
		}
		if seq == 0 {
			return autograd.Const(tensor.New(x.DType(), 0, batch, r.Hidden)), st
		}
		return autograd.Stack(0, hs...), st
	}
}

// fused reports whether LSTM and GRU run x through their fused layers
// (lstmLayer, gruLayer): for every float32 or float64 input with
// elements, unless a test asked for the step-by-step form.
func (r *recurrent) fused(x *autograd.Var) bool {
	return !r.unfused && x.Value().Dim() == 3 && x.Value().Numel() > 0 &&
		(x.DType() == tensor.Float32 || x.DType() == tensor.Float64)
}

// RNN is an Elman RNN with tanh, h' = tanh(x·W_ihᵀ + b_ih + h·W_hhᵀ + b_hh),
// as torch.nn.RNN.
type RNN struct{ recurrent }

// NewRNN returns an RNN initialised as PyTorch's (uniform ±1/√hidden).
func NewRNN(rng *tensor.RNG, input, hidden int, opt RNNOptions) *RNN {
	r := &RNN{}
	r.init(rng, input, hidden, 1, opt)
	return r
}

// Forward runs the RNN over x from initial state h0 ((layers, batch,
// hidden), nil for zeros) and returns the output of the last layer at every
// step and the final hidden state of every layer.
func (r *RNN) Forward(x, h0 *autograd.Var) (out, hn *autograd.Var) {
	out, st := r.run(x, []*autograd.Var{h0}, r.stepwise(func(k int, xw *autograd.Var, st []*autograd.Var) []*autograd.Var {
		return []*autograd.Var{autograd.Tanh(autograd.Add(xw, autograd.Linear(st[0], r.whh[k], r.bhh[k])))}
	}))
	return out, st[0]
}

// LSTM is a long short-term memory network, as torch.nn.LSTM (gate order
// input, forget, cell, output).
type LSTM struct{ recurrent }

// NewLSTM returns an LSTM initialised as PyTorch's (uniform ±1/√hidden).
func NewLSTM(rng *tensor.RNG, input, hidden int, opt RNNOptions) *LSTM {
	r := &LSTM{}
	r.init(rng, input, hidden, 4, opt)
	return r
}

// Forward runs the LSTM over x from (h0, c0) ((layers, batch, hidden), nil
// for zeros) and returns the output of the last layer at every step and
// the final hidden and cell states of every layer.
func (r *LSTM) Forward(x, h0, c0 *autograd.Var) (out, hn, cn *autograd.Var) {
	layer := r.stepwise(func(k int, xw *autograd.Var, st []*autograd.Var) []*autograd.Var {
		gates := autograd.Add(xw, autograd.Linear(st[0], r.whh[k], r.bhh[k]))
		h, cell := lstmStep(gates, st[1], r.Hidden)
		return []*autograd.Var{h, cell}
	})
	if r.fused(x) {
		layer = func(k int, x *autograd.Var, st []*autograd.Var, reverse bool) (*autograd.Var, []*autograd.Var) {
			out, h, c := lstmLayerForward(x, st[0], st[1], r.wih[k], r.whh[k], r.bih[k], r.bhh[k], r.Hidden, reverse)
			return out, []*autograd.Var{h, c}
		}
	}
	out, st := r.run(x, []*autograd.Var{h0, c0}, layer)
	return out, st[0], st[1]
}

// GRU is a gated recurrent unit network, as torch.nn.GRU (gate order
// reset, update, new):
//
//	r = σ(x·W_irᵀ + b_ir + h·W_hrᵀ + b_hr)
//	z = σ(x·W_izᵀ + b_iz + h·W_hzᵀ + b_hz)
//	n = tanh(x·W_inᵀ + b_in + r ⊙ (h·W_hnᵀ + b_hn))
//	h' = (1 − z) ⊙ n + z ⊙ h
type GRU struct{ recurrent }

// NewGRU returns a GRU initialised as PyTorch's (uniform ±1/√hidden).
func NewGRU(rng *tensor.RNG, input, hidden int, opt RNNOptions) *GRU {
	r := &GRU{}
	r.init(rng, input, hidden, 3, opt)
	return r
}

// Forward runs the GRU over x from h0 ((layers×directions, batch,
// hidden), nil for zeros) and returns the output of the last layer at
// every step and the final hidden state of every layer and direction.
func (r *GRU) Forward(x, h0 *autograd.Var) (out, hn *autograd.Var) {
	layer := r.stepwise(func(k int, xw *autograd.Var, st []*autograd.Var) []*autograd.Var {
		h := st[0]
		hw := autograd.Linear(h, r.whh[k], r.bhh[k])
		xg, hg := autograd.Chunk(xw, 1, 3), autograd.Chunk(hw, 1, 3)
		reset := autograd.Sigmoid(autograd.Add(xg[0], hg[0]))
		update := autograd.Sigmoid(autograd.Add(xg[1], hg[1]))
		n := autograd.Tanh(autograd.Add(xg[2], autograd.Mul(reset, hg[2])))
		// h' = n + z ⊙ (h − n): the same value as (1 − z) ⊙ n + z ⊙ h,
		// with one operation fewer.
		return []*autograd.Var{autograd.Add(n, autograd.Mul(update, autograd.Sub(h, n)))}
	})
	if r.fused(x) {
		layer = func(k int, x *autograd.Var, st []*autograd.Var, reverse bool) (*autograd.Var, []*autograd.Var) {
			out, h := gruLayerForward(x, st[0], r.wih[k], r.whh[k], r.bih[k], r.bhh[k], r.Hidden, reverse)
			return out, []*autograd.Var{h}
		}
	}
	out, st := r.run(x, []*autograd.Var{h0}, layer)
	return out, st[0]
}

// dropout zeroes each element of x with probability p and scales the
// rest by 1/(1-p), drawing from rng.
func dropout(x *autograd.Var, p float64, rng *tensor.RNG) *autograd.Var {
	d := NewDropout(p, rng)
	return d.Forward(x)
}
