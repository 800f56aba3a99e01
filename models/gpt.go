package models

import (
	"fmt"
	"math"
	"strconv"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// GPTConfig is the shape of a GPT: a byte-level (Vocab 256) decoder-only
// transformer in the style of GPT-2.
type GPTConfig struct {
	Vocab, Block       int // vocabulary size, longest context
	Layers, Heads, Dim int // transformer blocks, attention heads, model width
	Dropout            float64
}

// GPT is a decoder-only transformer: token and position embeddings (wte,
// wpe), Layers pre-LayerNorm causal TransformerBlocks (h.0, h.1, ...), a
// final LayerNorm (ln_f) and an output head that shares the token
// embedding's weight (weight tying: the head's logits are x·wteᵀ, so
// wte.weight gets the sum of the gradients of both uses).
//
// It is an nn.Layer: its input Var holds int64 token indices (B, T) with
// T ≤ Block, its output the logits (B, T, Vocab).
type GPT struct {
	nn.Base
	Config GPTConfig
	Wte    *nn.Embedding
	Wpe    *nn.Embedding
	Drop   *nn.Dropout
	Blocks []*nn.TransformerBlock
	LnF    *nn.LayerNorm
}

// NewGPT returns a GPT initialised as GPT-2: weights normal with standard
// deviation 0.02 (the projections into the residual stream, out_proj and
// linear2, 0.02/√(2·Layers)), biases zero, LayerNorms one and zero.
func NewGPT(rng *tensor.RNG, c GPTConfig) (*GPT, error) {
	if c.Vocab < 1 || c.Block < 1 || c.Layers < 1 || c.Heads < 1 || c.Dim < 1 || c.Dim%c.Heads != 0 || c.Dropout < 0 || c.Dropout >= 1 {
		return nil, fmt.Errorf("models: GPT config %+v: want positive sizes, a width divisible by the heads and dropout in [0, 1)", c)
	}
	m := &GPT{
		Config: c,
		Wte:    nn.NewEmbedding(rng, c.Vocab, c.Dim),
		Wpe:    nn.NewEmbedding(rng, c.Block, c.Dim),
		Drop:   nn.NewDropout(c.Dropout, rng),
		LnF:    nn.NewLayerNorm(c.Dim),
	}
	m.RegisterModule("wte", m.Wte)
	m.RegisterModule("wpe", m.Wpe)
	m.RegisterModule("drop", m.Drop)
	h := &nn.Base{}
	for i := range c.Layers {
		b := nn.NewTransformerBlock(rng, c.Dim, c.Heads, 4*c.Dim, c.Dropout, true)
		m.Blocks = append(m.Blocks, b)
		h.RegisterModule(strconv.Itoa(i), b)
	}
	m.RegisterModule("h", h)
	m.RegisterModule("ln_f", m.LnF)
	resid := 0.02 / math.Sqrt(float64(2*c.Layers))
	for _, p := range nn.NamedParameters(m) {
		v := p.Value.Value()
		switch {
		case v.Dim() < 2:
			// biases zero; LayerNorm weights stay one
			if !isLayerNormWeight(p.Name) {
				v.Zero()
			}
		case hasSuffix(p.Name, "out_proj.weight"), hasSuffix(p.Name, "linear2.weight"):
			v.Normal(rng, 0, resid)
		default:
			v.Normal(rng, 0, 0.02)
		}
	}
	return m, nil
}

func hasSuffix(s, suffix string) bool {
	return len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix
}

func isLayerNormWeight(name string) bool {
	return hasSuffix(name, "norm1.weight") || hasSuffix(name, "norm2.weight") || name == "ln_f.weight"
}

// Forward returns the logits (B, T, Vocab) for token indices x (B, T).
func (m *GPT) Forward(x *autograd.Var) *autograd.Var {
	h := m.embed(x)
	var made nn.Layer = m.Drop // h's maker
	for _, b := range m.Blocks {
		next := nn.Call(b, h)
		m.inner(h, made, b)
		h, made = next, b
	}
	y := m.head(h, m.Wte.Weight) // the tied head
	m.inner(h, made, m.LnF)
	return y
}

// inner marks h, made by layer made and fed to layer next only, transient
// (nn.Sequential's rule): the backward pass may recycle it, unless a hook
// of either layer saw it.
func (m *GPT) inner(h *autograd.Var, made, next nn.Layer) {
	if !nn.Hooked(made, next) {
		h.MarkTransient()
	}
}

func (m *GPT) embed(x *autograd.Var) *autograd.Var {
	idx := x.Value()
	if idx.DType() != tensor.Int64 || idx.Dim() != 2 || idx.Size(1) > m.Config.Block || idx.Size(1) < 1 {
		panic(fmt.Sprintf("models: GPT input %v%v; want int64 (batch, time) with 1 ≤ time ≤ %d", idx.DType(), idx.Shape(), m.Config.Block))
	}
	t := idx.Size(1)
	pos := tensor.New(tensor.Int64, t)
	for i := range t {
		pos.Set(float64(i), i)
	}
	h := autograd.Add(autograd.Embedding(idx, m.Wte.Weight), autograd.Embedding(pos, m.Wpe.Weight))
	return nn.Call(m.Drop, h)
}

func (m *GPT) head(h, weight *autograd.Var) *autograd.Var {
	n := nn.Call(m.LnF, h)
	if n != h && !nn.Hooked(m.LnF) {
		n.MarkTransient()
	}
	return autograd.Linear(n, weight, nil)
}

// PipelineLayers returns the GPT as the sequence of layers a pipeline cuts
// into stages: the embeddings (wte, wpe, dropout), each block, and the
// head (ln_f and the output projection). Run in order they compute
// Forward, operation for operation. head is the head's weight: the token
// embedding's (nil), as in Forward, or a copy of it for a head on another
// stage than the embedding, tied by the pipeline (pipeline.Tie).
func (m *GPT) PipelineLayers(head *autograd.Var) []nn.Layer {
	if head == nil {
		head = m.Wte.Weight
	}
	e := &gptEmbed{m: m}
	e.RegisterModule("wte", m.Wte)
	e.RegisterModule("wpe", m.Wpe)
	e.RegisterModule("drop", m.Drop)
	layers := []nn.Layer{e}
	for _, b := range m.Blocks {
		layers = append(layers, b)
	}
	h := &gptHead{m: m, weight: head}
	h.RegisterModule("ln_f", m.LnF)
	h.RegisterParameter("weight", head)
	return append(layers, h)
}

type gptEmbed struct {
	nn.Base
	m *GPT
}

func (e *gptEmbed) Forward(x *autograd.Var) *autograd.Var { return e.m.embed(x) }

type gptHead struct {
	nn.Base
	m      *GPT
	weight *autograd.Var
}

func (h *gptHead) Forward(x *autograd.Var) *autograd.Var { return h.m.head(x, h.weight) }

// Loss returns the mean cross-entropy of the logits (B, T, Vocab) against
// the next tokens y (int64, B×T).
func Loss(logits *autograd.Var, y *tensor.Tensor) *autograd.Var {
	v := logits.Value().Size(-1)
	return nn.CrossEntropy(autograd.Reshape(logits, -1, v), y.Reshape(-1))
}
