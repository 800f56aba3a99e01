package nn

import (
	"fmt"
	"math"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// RNNOptions configure RNN and LSTM.
type RNNOptions struct {
	Layers     int  // stacked layers; 0 means 1
	BatchFirst bool // input and output are (batch, seq, feature)
	NoBias     bool
}

// recurrent holds the weights shared by RNN and LSTM, named as PyTorch
// names them: weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, ...
type recurrent struct {
	Base
	Input, Hidden, Layers, gates int
	BatchFirst                   bool
	wih, whh, bih, bhh           []*autograd.Var
}

func (r *recurrent) init(rng *tensor.RNG, input, hidden, gates int, opt RNNOptions) {
	r.Input, r.Hidden, r.Layers, r.gates, r.BatchFirst = input, hidden, max(opt.Layers, 1), gates, opt.BatchFirst
	bound := 1 / math.Sqrt(float64(hidden))
	u := func(shape ...int) *autograd.Var {
		return autograd.Param(tensor.Zeros(shape...).Uniform(rng, -bound, bound))
	}
	for l := range r.Layers {
		in := input
		if l > 0 {
			in = hidden
		}
		r.wih = append(r.wih, u(gates*hidden, in))
		r.whh = append(r.whh, u(gates*hidden, hidden))
		r.RegisterParameter(fmt.Sprintf("weight_ih_l%d", l), r.wih[l])
		r.RegisterParameter(fmt.Sprintf("weight_hh_l%d", l), r.whh[l])
		if opt.NoBias {
			r.bih, r.bhh = append(r.bih, nil), append(r.bhh, nil)
			continue
		}
		r.bih = append(r.bih, u(gates*hidden))
		r.bhh = append(r.bhh, u(gates*hidden))
		r.RegisterParameter(fmt.Sprintf("bias_ih_l%d", l), r.bih[l])
		r.RegisterParameter(fmt.Sprintf("bias_hh_l%d", l), r.bhh[l])
	}
}

// run applies cell to every layer and time step. x is (seq, batch, in) or
// batch-first; states are (layers, batch, hidden) or nil for zeros.
func (r *recurrent) run(x *autograd.Var, states []*autograd.Var, cell func(l int, xw *autograd.Var, st []*autograd.Var) []*autograd.Var) (*autograd.Var, []*autograd.Var) {
	if x.Value().Dim() != 3 {
		panic(fmt.Sprintf("nn: recurrent layer given input of shape %v; want 3-d", x.Shape()))
	}
	if r.BatchFirst {
		x = autograd.Transpose(x, 0, 1)
	}
	seq, batch := x.Value().Size(0), x.Value().Size(1)
	outStates := make([][]*autograd.Var, len(states))
	for l := range r.Layers {
		st := make([]*autograd.Var, len(states))
		for i, s := range states {
			if s == nil {
				st[i] = autograd.Const(tensor.New(x.DType(), batch, r.Hidden))
			} else {
				st[i] = autograd.Select(s, 0, l)
			}
		}
		// The input projection of all time steps is one matrix product.
		xw := autograd.Linear(x, r.wih[l], r.bih[l])
		hs := make([]*autograd.Var, seq)
		for t := range seq {
			st = cell(l, autograd.Select(xw, 0, t), st)
			hs[t] = st[0]
		}
		for i := range st {
			outStates[i] = append(outStates[i], st[i])
		}
		if seq == 0 {
			x = autograd.Const(tensor.New(x.DType(), 0, batch, r.Hidden))
		} else {
			x = autograd.Stack(0, hs...)
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
	out, st := r.run(x, []*autograd.Var{h0}, func(l int, xw *autograd.Var, st []*autograd.Var) []*autograd.Var {
		return []*autograd.Var{autograd.Tanh(autograd.Add(xw, autograd.Linear(st[0], r.whh[l], r.bhh[l])))}
	})
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
	out, st := r.run(x, []*autograd.Var{h0, c0}, func(l int, xw *autograd.Var, st []*autograd.Var) []*autograd.Var {
		gates := autograd.Add(xw, autograd.Linear(st[0], r.whh[l], r.bhh[l]))
		g := autograd.Chunk(gates, 1, 4)
		i, f, c, o := autograd.Sigmoid(g[0]), autograd.Sigmoid(g[1]), autograd.Tanh(g[2]), autograd.Sigmoid(g[3])
		cell := autograd.Add(autograd.Mul(f, st[1]), autograd.Mul(i, c))
		h := autograd.Mul(o, autograd.Tanh(cell))
		return []*autograd.Var{h, cell}
	})
	return out, st[0], st[1]
}
