package nn

import (
	"fmt"
	"math"
	"strconv"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// Linear is y = x·Wᵀ + b, as torch.nn.Linear. Weight is out×in.
type Linear struct {
	Base
	Weight, Bias *autograd.Var
}

// NewLinear returns a Linear layer initialised as PyTorch's: weight and bias
// uniform in ±1/√in.
func NewLinear(rng *tensor.RNG, in, out int, bias bool) *Linear {
	l := &Linear{Weight: autograd.Param(tensor.Zeros(out, in).KaimingUniform(rng, math.Sqrt(5)))}
	if bias {
		bound := 1 / math.Sqrt(float64(in))
		l.Bias = autograd.Param(tensor.Zeros(out).Uniform(rng, -bound, bound))
	}
	l.RegisterParameter("weight", l.Weight)
	l.RegisterParameter("bias", l.Bias)
	return l
}

// Forward applies the layer.
func (l *Linear) Forward(x *autograd.Var) *autograd.Var { return autograd.Linear(x, l.Weight, l.Bias) }

// Conv2d is a 2-D convolution, as torch.nn.Conv2d with groups=1.
type Conv2d struct {
	Base
	Weight, Bias *autograd.Var
	Params       tensor.Conv2dParams
}

// NewConv2d returns a Conv2d layer with a square kernel, initialised as
// PyTorch's (uniform in ±1/√(in·k·k)).
func NewConv2d(rng *tensor.RNG, in, out, kernel int, p tensor.Conv2dParams, bias bool) *Conv2d {
	c := &Conv2d{Weight: autograd.Param(tensor.Zeros(out, in, kernel, kernel).KaimingUniform(rng, math.Sqrt(5))), Params: p}
	if bias {
		bound := 1 / math.Sqrt(float64(in*kernel*kernel))
		c.Bias = autograd.Param(tensor.Zeros(out).Uniform(rng, -bound, bound))
	}
	c.RegisterParameter("weight", c.Weight)
	c.RegisterParameter("bias", c.Bias)
	return c
}

// Forward applies the layer.
func (c *Conv2d) Forward(x *autograd.Var) *autograd.Var {
	return autograd.Conv2d(x, c.Weight, c.Bias, c.Params)
}

// MaxPool2d takes the maximum over square windows; the stride defaults to
// the kernel size, as in PyTorch.
type MaxPool2d struct {
	Base
	Kernel int
	Params tensor.Conv2dParams
}

// NewMaxPool2d returns a max-pooling layer with stride = kernel.
func NewMaxPool2d(kernel int) *MaxPool2d {
	return &MaxPool2d{Kernel: kernel, Params: tensor.Conv2dParams{StrideH: kernel, StrideW: kernel}}
}

// Forward applies the layer.
func (m *MaxPool2d) Forward(x *autograd.Var) *autograd.Var {
	return autograd.MaxPool2d(x, m.Kernel, m.Kernel, m.Params)
}

// AvgPool2d averages over square windows; the stride defaults to the kernel
// size.
type AvgPool2d struct {
	Base
	Kernel int
	Params tensor.Conv2dParams
}

// NewAvgPool2d returns an average-pooling layer with stride = kernel.
func NewAvgPool2d(kernel int) *AvgPool2d {
	return &AvgPool2d{Kernel: kernel, Params: tensor.Conv2dParams{StrideH: kernel, StrideW: kernel}}
}

// Forward applies the layer.
func (m *AvgPool2d) Forward(x *autograd.Var) *autograd.Var {
	return autograd.AvgPool2d(x, m.Kernel, m.Kernel, m.Params)
}

// activation is a parameter-free layer.
type activation struct {
	Base
	f func(*autograd.Var) *autograd.Var
}

func (a *activation) Forward(x *autograd.Var) *autograd.Var { return a.f(x) }

// NewReLU returns a ReLU layer.
func NewReLU() Layer { return &activation{f: autograd.Relu} }

// NewTanh returns a Tanh layer.
func NewTanh() Layer { return &activation{f: autograd.Tanh} }

// NewSigmoid returns a Sigmoid layer.
func NewSigmoid() Layer { return &activation{f: autograd.Sigmoid} }

// NewGELU returns a GELU layer (exact form).
func NewGELU() Layer { return &activation{f: autograd.Gelu} }

// Flatten merges dimensions 1..end into one, as torch.nn.Flatten().
type Flatten struct{ Base }

// NewFlatten returns a Flatten layer.
func NewFlatten() *Flatten { return &Flatten{} }

// Forward applies the layer.
func (f *Flatten) Forward(x *autograd.Var) *autograd.Var { return autograd.Flatten(x, 1, -1) }

// Dropout zeroes elements with probability P in training mode and scales
// the rest by 1/(1-P); in evaluation mode it passes input through.
type Dropout struct {
	Base
	P   float64
	rng *tensor.RNG
}

// NewDropout returns a Dropout layer drawing its masks from rng.
func NewDropout(p float64, rng *tensor.RNG) *Dropout {
	if p < 0 || p > 1 {
		panic(fmt.Sprintf("nn: dropout probability %v", p))
	}
	return &Dropout{P: p, rng: rng}
}

// Forward applies the layer.
func (d *Dropout) Forward(x *autograd.Var) *autograd.Var {
	if !d.Training() || d.P == 0 {
		return x
	}
	mask := tensor.New(x.DType(), x.Shape()...)
	if d.P < 1 {
		scale := 1 / (1 - d.P)
		switch x.DType() {
		case tensor.Float32:
			m, s := mask.Float32s(), float32(scale)
			for i := range m {
				if d.rng.Float64() >= d.P {
					m[i] = s
				}
			}
		default:
			it := mask.Reshape(-1)
			for i := range it.Numel() {
				if d.rng.Float64() >= d.P {
					it.Set(scale, i)
				}
			}
		}
	}
	return autograd.Mul(x, autograd.Const(mask))
}

// Embedding maps int64 indices to rows of a table, as torch.nn.Embedding.
// Its input Var holds int64 indices.
type Embedding struct {
	Base
	Weight *autograd.Var
}

// NewEmbedding returns an Embedding with num rows of size dim, initialised
// standard normal as PyTorch's.
func NewEmbedding(rng *tensor.RNG, num, dim int) *Embedding {
	e := &Embedding{Weight: autograd.Param(tensor.Randn(rng, num, dim))}
	e.RegisterParameter("weight", e.Weight)
	return e
}

// Forward looks up the rows for the indices in x.
func (e *Embedding) Forward(x *autograd.Var) *autograd.Var {
	return autograd.Embedding(x.Value(), e.Weight)
}

// Hooked reports whether any of the layers has a forward hook or a
// forward pre-hook: one that may keep the layer's input or output, which
// then must not be marked transient (autograd.Var.MarkTransient).
func Hooked(layers ...Layer) bool {
	for _, l := range layers {
		if b := l.base(); len(b.preHooks) > 0 || len(b.postHooks) > 0 {
			return true
		}
	}
	return false
}

// Sequential runs layers in order; its children are named "0", "1", ... as
// in PyTorch, so state-dict names match torch.nn.Sequential's.
//
// The outputs of all its layers but the last are the Sequential's own:
// each feeds the next layer and nothing else, so Forward marks it
// transient (autograd.Var.MarkTransient) and the backward pass recycles
// its storage for the next step's activations. A forward hook of the
// layer that made an output, or a forward pre-hook of the layer it feeds,
// sees it and may keep it: then it is not marked. A layer inside a
// Sequential must not keep its input or its output past the backward pass
// in any other way (a field holding it for the next call, say); clone the
// value if it must.
type Sequential struct {
	Base
	Layers []Layer
}

// NewSequential returns a Sequential of the given layers.
func NewSequential(layers ...Layer) *Sequential {
	s := &Sequential{Layers: layers}
	for i, l := range layers {
		s.RegisterModule(strconv.Itoa(i), l)
	}
	return s
}

// Forward runs every layer (with its hooks) in order.
func (s *Sequential) Forward(x *autograd.Var) *autograd.Var {
	in := x
	for i, l := range s.Layers {
		y := Call(l, x)
		// x, made by the layer before, has now been used by the one
		// layer that needed it (unless that layer passed it on as is).
		if x != in && y != x && len(s.Layers[i-1].base().postHooks) == 0 && len(l.base().preHooks) == 0 {
			x.MarkTransient()
		}
		x = y
	}
	return x
}
