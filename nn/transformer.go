package nn

import (
	"fmt"
	"math"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// MultiheadAttention is multi-head self-attention, as
// torch.nn.MultiheadAttention(embed, heads, batch_first=True) called with
// the same tensor as query, key and value: its parameters are PyTorch's
// (in_proj_weight, 3E×E, rows ordered query, key, value; in_proj_bias;
// out_proj.weight and out_proj.bias), so state dicts move between the two.
// With Causal, token i attends to tokens 0..i only (PyTorch's
// attn_mask of -inf above the diagonal).
//
// Its input is (B, T, E). The heads are read from the in-projection's
// output and written into the out-projection's input in place
// (tensor.Attention): no copy splits or merges them.
type MultiheadAttention struct {
	Base
	InProjWeight, InProjBias *autograd.Var
	OutProj                  *Linear
	Heads                    int
	Causal                   bool
}

// NewMultiheadAttention returns self-attention over embed features with
// the given heads (embed must be divisible by heads), initialised as
// PyTorch's: in_proj_weight Xavier-uniform, biases zero, out_proj.weight
// as a Linear's.
func NewMultiheadAttention(rng *tensor.RNG, embed, heads int, causal bool) *MultiheadAttention {
	if heads < 1 || embed%heads != 0 {
		panic(fmt.Sprintf("nn: MultiheadAttention of %d features with %d heads: the features must divide into the heads", embed, heads))
	}
	bound := math.Sqrt(6 / float64(embed+3*embed)) // xavier_uniform_ on 3E×E
	m := &MultiheadAttention{
		InProjWeight: autograd.Param(tensor.Zeros(3*embed, embed).Uniform(rng, -bound, bound)),
		InProjBias:   autograd.Param(tensor.Zeros(3 * embed)),
		OutProj:      NewLinear(rng, embed, embed, true),
		Heads:        heads,
		Causal:       causal,
	}
	m.OutProj.Bias.Value().Zero()
	m.RegisterParameter("in_proj_weight", m.InProjWeight)
	m.RegisterParameter("in_proj_bias", m.InProjBias)
	m.RegisterModule("out_proj", m.OutProj)
	return m
}

// Forward attends over x (B, T, E) and returns (B, T, E).
func (m *MultiheadAttention) Forward(x *autograd.Var) *autograd.Var {
	if x.Value().Dim() != 3 || x.Value().Size(2) != m.InProjWeight.Value().Size(1) {
		panic(fmt.Sprintf("nn: MultiheadAttention of %d features given input of shape %v; want (batch, time, %d)",
			m.InProjWeight.Value().Size(1), x.Shape(), m.InProjWeight.Value().Size(1)))
	}
	qkv := autograd.Linear(x, m.InProjWeight, m.InProjBias)
	heads := autograd.Attention(qkv, m.Heads, m.Causal)
	out := Call(m.OutProj, heads)
	// qkv and the heads each fed one operation: the backward pass may
	// recycle them (Transient), unless a hook of the out-projection saw
	// its input.
	qkv.MarkTransient()
	if !Hooked(m.OutProj) {
		heads.MarkTransient()
	}
	return out
}

// TransformerBlock is a pre-LayerNorm transformer layer: x + attention(
// norm1(x)), then x + MLP(norm2(x)) with a GELU MLP of width Hidden. Its
// parameter names are those of torch.nn.TransformerEncoderLayer(embed,
// heads, hidden, activation="gelu", batch_first=True, norm_first=True):
// self_attn.*, linear1.*, linear2.*, norm1.*, norm2.*; with Causal it is
// that layer called with a causal src_mask. Dropout (P, one rng) is applied
// where PyTorch's layer applies it: after the GELU, and to each branch
// before its residual addition.
type TransformerBlock struct {
	Base
	SelfAttn             *MultiheadAttention
	Linear1, Linear2     *Linear
	Norm1, Norm2         *LayerNorm
	Dropout, Dropout1    *Dropout
	Dropout2             *Dropout
	Embed, Heads, Hidden int
}

// NewTransformerBlock returns a block over embed features with the given
// heads, MLP width hidden and dropout probability p (drawn from rng).
func NewTransformerBlock(rng *tensor.RNG, embed, heads, hidden int, p float64, causal bool) *TransformerBlock {
	b := &TransformerBlock{
		SelfAttn: NewMultiheadAttention(rng, embed, heads, causal),
		Linear1:  NewLinear(rng, embed, hidden, true),
		Linear2:  NewLinear(rng, hidden, embed, true),
		Norm1:    NewLayerNorm(embed),
		Norm2:    NewLayerNorm(embed),
		Dropout:  NewDropout(p, rng),
		Dropout1: NewDropout(p, rng),
		Dropout2: NewDropout(p, rng),
		Embed:    embed, Heads: heads, Hidden: hidden,
	}
	b.RegisterModule("self_attn", b.SelfAttn)
	b.RegisterModule("linear1", b.Linear1)
	b.RegisterModule("dropout", b.Dropout)
	b.RegisterModule("linear2", b.Linear2)
	b.RegisterModule("norm1", b.Norm1)
	b.RegisterModule("norm2", b.Norm2)
	b.RegisterModule("dropout1", b.Dropout1)
	b.RegisterModule("dropout2", b.Dropout2)
	return b
}

// Forward applies the block to x (B, T, embed).
//
// The values inside the block feed only the block's next operations, so
// it marks them transient (autograd.Var.MarkTransient) and the backward
// pass recycles their storage, as nn.Sequential does for its inner
// outputs; not when a hook on one of its layers may have kept one.
func (b *TransformerBlock) Forward(x *autograd.Var) *autograd.Var {
	n1 := Call(b.Norm1, x)
	a := Call(b.Dropout1, Call(b.SelfAttn, n1))
	x2 := autograd.Add(x, a)
	n2 := Call(b.Norm2, x2)
	l1 := Call(b.Linear1, n2)
	g := autograd.Gelu(l1)
	h := Call(b.Dropout, g)
	l2 := Call(b.Dropout2, Call(b.Linear2, h))
	out := autograd.Add(x2, l2)
	if !Hooked(b.Norm1, b.SelfAttn, b.SelfAttn.OutProj, b.Dropout1, b.Norm2, b.Linear1, b.Dropout, b.Linear2, b.Dropout2) {
		for _, v := range []*autograd.Var{n1, a, x2, n2, l1, g, h, l2} {
			v.MarkTransient() // each made here, none the caller's x
		}
	}
	return out
}
