package autograd

import (
	"fmt"

	"github.com/godist/godist/tensor"
)

func nt() *tensor.Tensor { return new(tensor.Tensor) }

// reduceTo sums a broadcast gradient back to the shape of the input.
func reduceTo(g *tensor.Tensor, shape []int) *tensor.Tensor {
	if equal(g.Shape(), shape) {
		return g
	}
	return nt().SumTo(g, shape)
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// arithmetic

// Add returns a + b with broadcasting.
func Add(a, b *Var) *Var {
	return record("Add", nt().Add(a.value, b.value), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{reduceTo(g, a.Shape()), reduceTo(g, b.Shape())}
	}, a, b)
}

// Sub returns a - b with broadcasting.
func Sub(a, b *Var) *Var {
	return record("Sub", nt().Sub(a.value, b.value), func(g *tensor.Tensor) []*tensor.Tensor {
		var gb *tensor.Tensor
		if b.wants() {
			gb = reduceTo(nt().Neg(g), b.Shape())
		}
		return []*tensor.Tensor{reduceTo(g, a.Shape()), gb}
	}, a, b)
}

// Mul returns a * b elementwise with broadcasting.
func Mul(a, b *Var) *Var {
	return maskable(record("Mul", nt().Mul(a.value, b.value), func(g *tensor.Tensor) []*tensor.Tensor {
		var ga, gb *tensor.Tensor
		if a.wants() {
			ga = reduceTo(nt().Mul(g, b.value), a.Shape())
		}
		if b.wants() {
			gb = reduceTo(nt().Mul(g, a.value), b.Shape())
		}
		return []*tensor.Tensor{ga, gb}
	}, a, b))
}

// Div returns a / b elementwise with broadcasting.
func Div(a, b *Var) *Var {
	out := nt().Div(a.value, b.value)
	return maskable(record("Div", out, func(g *tensor.Tensor) []*tensor.Tensor {
		var ga, gb *tensor.Tensor
		if a.wants() {
			ga = reduceTo(nt().Div(g, b.value), a.Shape())
		}
		if b.wants() {
			// d(a/b)/db = -out/b
			t := nt().Div(out, b.value)
			gb = reduceTo(nt().Neg(t.Mul(t, g)), b.Shape())
		}
		return []*tensor.Tensor{ga, gb}
	}, a, b))
}

// AddScalar returns a + s.
func AddScalar(a *Var, s float64) *Var {
	return record("AddScalar", nt().AddScalar(a.value, s), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{g}
	}, a)
}

// MulScalar returns a * s.
func MulScalar(a *Var, s float64) *Var {
	return record("MulScalar", nt().MulScalar(a.value, s), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{nt().MulScalar(g, s)}
	}, a)
}

// Neg returns -a.
func Neg(a *Var) *Var {
	return record("Neg", nt().Neg(a.value), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{nt().Neg(g)}
	}, a)
}

// Square returns a².
func Square(a *Var) *Var {
	return record("Square", nt().Square(a.value), func(g *tensor.Tensor) []*tensor.Tensor {
		t := nt().Mul(g, a.value)
		return []*tensor.Tensor{t.Scale(2)}
	}, a)
}

// Sqrt returns √a.
func Sqrt(a *Var) *Var {
	out := nt().Sqrt(a.value)
	return record("Sqrt", out, func(g *tensor.Tensor) []*tensor.Tensor {
		t := nt().Div(g, out)
		return []*tensor.Tensor{t.Scale(0.5)}
	}, a)
}

// Exp returns exp(a).
func Exp(a *Var) *Var {
	out := nt().Exp(a.value)
	return record("Exp", out, func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{nt().Mul(g, out)}
	}, a)
}

// Log returns ln(a).
func Log(a *Var) *Var {
	return record("Log", nt().Log(a.value), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{nt().Div(g, a.value)}
	}, a)
}

// Tanh returns tanh(a).
func Tanh(a *Var) *Var {
	out := nt().Tanh(a.value)
	return record("Tanh", out, func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{nt().TanhBackward(g, out)}
	}, a)
}

// Sigmoid returns 1/(1+exp(-a)).
func Sigmoid(a *Var) *Var {
	out := nt().Sigmoid(a.value)
	return record("Sigmoid", out, func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{nt().SigmoidBackward(g, out)}
	}, a)
}

// Relu returns max(a, 0).
func Relu(a *Var) *Var {
	out := nt().Relu(a.value)
	return record("Relu", out, func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{nt().ReluBackward(g, out)}
	}, a)
}

// Gelu returns a·Φ(a), the exact GELU.
func Gelu(a *Var) *Var {
	return record("Gelu", nt().Gelu(a.value), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{nt().GeluBackward(g, a.value)}
	}, a)
}

// reductions

// Sum returns the sum of a over dim.
func Sum(a *Var, dim int, keepdim bool) *Var {
	return record("Sum", nt().Sum(a.value, dim, keepdim), func(g *tensor.Tensor) []*tensor.Tensor {
		if !keepdim {
			g = g.Unsqueeze(normDim(dim, a.value.Dim()))
		}
		return []*tensor.Tensor{g.Expand(a.Shape()...).Contiguous()}
	}, a)
}

// Mean returns the mean of a over dim.
func Mean(a *Var, dim int, keepdim bool) *Var {
	n := float64(a.value.Size(dim))
	return record("Mean", nt().Mean(a.value, dim, keepdim), func(g *tensor.Tensor) []*tensor.Tensor {
		if !keepdim {
			g = g.Unsqueeze(normDim(dim, a.value.Dim()))
		}
		return []*tensor.Tensor{nt().MulScalar(g.Expand(a.Shape()...), 1/n)}
	}, a)
}

// SumAll returns the sum of all elements as a 0-d Var.
func SumAll(a *Var) *Var {
	return record("SumAll", nt().SumAll(a.value), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{g.Expand(a.Shape()...).Contiguous()}
	}, a)
}

// MeanAll returns the mean of all elements as a 0-d Var.
func MeanAll(a *Var) *Var {
	n := float64(a.value.Numel())
	return record("MeanAll", nt().MeanAll(a.value), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{nt().MulScalar(g.Expand(a.Shape()...), 1/n)}
	}, a)
}

// Max returns the maximum of a over dim; the gradient flows to the first
// maximal element, as torch.max(a, dim).
func Max(a *Var, dim int, keepdim bool) *Var {
	vals, idx := tensor.MaxDim(a.value, dim, keepdim)
	d := normDim(dim, a.value.Dim())
	return record("Max", vals, func(g *tensor.Tensor) []*tensor.Tensor {
		if !keepdim {
			g, idx = g.Unsqueeze(d), idx.Unsqueeze(d)
		}
		return []*tensor.Tensor{scatterDim(g, idx, a.Shape(), d)}
	}, a)
}

// scatterDim returns a zero tensor of shape with g[..., 0, ...] added at
// position idx along dim.
func scatterDim(g, idx *tensor.Tensor, shape []int, dim int) *tensor.Tensor {
	out := tensor.New(g.DType(), shape...)
	gs := g.Shape()
	pos := make([]int, len(gs))
	var walk func(d int)
	walk = func(d int) {
		if d == len(gs) {
			at := append([]int(nil), pos...)
			at[dim] = int(idx.At(pos...))
			out.Set(out.At(at...)+g.At(pos...), at...)
			return
		}
		for i := range gs[d] {
			pos[d] = i
			walk(d + 1)
		}
	}
	walk(0)
	return out
}

func normDim(d, n int) int {
	if d < 0 {
		return d + n
	}
	return d
}

// Softmax returns softmax(a) over dim.
func Softmax(a *Var, dim int) *Var {
	out := nt().Softmax(a.value, dim)
	return record("Softmax", out, func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{nt().SoftmaxBackward(g, out, dim)}
	}, a)
}

// LogSoftmax returns log(softmax(a)) over dim.
func LogSoftmax(a *Var, dim int) *Var {
	out := nt().LogSoftmax(a.value, dim)
	return record("LogSoftmax", out, func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{nt().LogSoftmaxBackward(g, out, dim)}
	}, a)
}

// products

// MatMul returns a·b (see tensor.MatMul for the shapes). Under Autocast
// the product of float32 operands runs in bfloat16.
func MatMul(a, b *Var) *Var {
	if d, ok := autocastTo(a, b); ok {
		return rounded(matMul(rounded(a, d), rounded(b, d)), d)
	}
	return matMul(a, b)
}

func matMul(a, b *Var) *Var {
	return maskable(record("MatMul", nt().MatMul(a.value, b.value), func(g *tensor.Tensor) []*tensor.Tensor {
		var ga, gb *tensor.Tensor
		if a.wants() {
			ga = nt().MatMul(g, b.value.Transpose(-1, -2))
		}
		if b.wants() {
			if b.value.Dim() == 2 && a.value.Dim() > 2 {
				// b was shared by the whole batch: fold the batch.
				k := a.value.Size(-1)
				gb = nt().MatMul(a.value.Reshape(-1, k).T(), g.Reshape(-1, g.Size(-1)))
			} else {
				gb = nt().MatMul(a.value.Transpose(-1, -2), g)
			}
		}
		return []*tensor.Tensor{ga, gb}
	}, a, b))
}

// Linear returns x·wᵀ + b for x (..., in), w (out, in) and b (out) or nil,
// as torch.nn.functional.linear. Under Autocast the layer of float32
// operands runs in bfloat16.
func Linear(x, w, b *Var) *Var {
	if d, ok := autocastTo(x, w, b); ok && (b == nil || b.value.Dim() == 1) && x.value.Dim() >= 2 {
		return rounded(linear(rounded(x, d), rounded(w, d), rounded(b, d)), d)
	}
	return linear(x, w, b)
}

func linear(x, w, b *Var) *Var {
	var out *tensor.Tensor
	if b != nil && b.value.Dim() == 1 && x.value.Dim() >= 2 {
		// The GEMM adds the bias as it stores the product: one pass over
		// the output.
		out = nt().MatMulBias(x.value, w.value.T(), b.value)
	} else {
		out = nt().MatMul(x.value, w.value.T())
		if b != nil {
			out.Add(out, b.value)
		}
	}
	return maskable(record("Linear", out, func(g *tensor.Tensor) []*tensor.Tensor {
		var gx, gw, gb *tensor.Tensor
		g2 := g.Reshape(-1, g.Size(-1))
		if x.wants() {
			gx = nt().MatMul(g, w.value)
		}
		if w.wants() {
			gw = w.gradOut().MatMul(g2.T(), x.value.Reshape(-1, x.value.Size(-1)))
		}
		if b != nil && b.wants() {
			gb = sumRows(b.gradOut(), g2)
		}
		return []*tensor.Tensor{gx, gw, gb}
	}, x, w, b))
}

// Conv2d returns the 2-D convolution of x (N×C×H×W) with w (OC×C×KH×KW)
// plus b (OC, or nil).
func Conv2d(x, w, b *Var, p tensor.Conv2dParams) *Var {
	var bv *tensor.Tensor
	if b != nil {
		bv = b.value
	}
	out, cols := tensor.Conv2dCols(x.value, w.value, bv, p)
	if !GradEnabled() || !w.requiresGrad {
		cols.Release() // no weight gradient will need them
		cols = nil
	}
	v := maskable(record("Conv2d", out, func(g *tensor.Tensor) []*tensor.Tensor {
		var gx, gw, gb *tensor.Tensor
		if x.wants() {
			gx = nt()
		}
		if w.wants() {
			gw = w.gradOut()
		}
		if b != nil && b.wants() {
			gb = b.gradOut()
		}
		gx, gw, gb = tensor.Conv2dBackward(g, x.value, w.value, cols, p, gx, gw, gb)
		return []*tensor.Tensor{gx, gw, gb}
	}, x, w, b))
	if v.node != nil {
		v.node.release = cols.Release
	} else {
		cols.Release()
	}
	return v
}

// MaxPool2d returns the maximum over kh×kw windows.
func MaxPool2d(x *Var, kh, kw int, p tensor.Conv2dParams) *Var {
	out, idx := tensor.MaxPool2d(x.value, kh, kw, p)
	v := record("MaxPool2d", out, func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{tensor.MaxPool2dBackward(g, idx, x.Shape())}
	}, x)
	if v.node != nil {
		v.node.release = idx.Recycle // only backward reads the indices
	} else {
		idx.Recycle()
	}
	return v
}

// AvgPool2d returns the mean over kh×kw windows.
func AvgPool2d(x *Var, kh, kw int, p tensor.Conv2dParams) *Var {
	return record("AvgPool2d", tensor.AvgPool2d(x.value, kh, kw, p), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{tensor.AvgPool2dBackward(g, x.Shape(), kh, kw, p)}
	}, x)
}

// Embedding returns the rows of weight (num×dim) picked by the int64
// indices idx (any shape); the result has shape idx.Shape()+[dim].
func Embedding(idx *tensor.Tensor, weight *Var) *Var {
	if idx.DType() != tensor.Int64 || weight.value.Dim() != 2 {
		panic(fmt.Sprintf("autograd: Embedding of %v indices into a weight of shape %v", idx.DType(), weight.Shape()))
	}
	num, dim := weight.value.Size(0), weight.value.Size(1)
	ids := idx.Contiguous().Int64s()
	for _, id := range ids {
		if id < 0 || int(id) >= num {
			panic(fmt.Sprintf("autograd: Embedding index %d out of range [0, %d)", id, num))
		}
	}
	out := tensor.New(weight.DType(), len(ids), dim)
	for i, id := range ids {
		out.Narrow(0, i, 1).Copy(weight.value.Narrow(0, int(id), 1))
	}
	shape := append(append([]int(nil), idx.Shape()...), dim)
	return maskable(record("Embedding", out.Reshape(shape...), func(g *tensor.Tensor) []*tensor.Tensor {
		if !weight.wants() {
			return []*tensor.Tensor{nil}
		}
		gw := tensor.New(weight.DType(), num, dim)
		g2 := g.Reshape(-1, dim)
		for i, id := range ids {
			row := gw.Narrow(0, int(id), 1)
			row.Add(row, g2.Narrow(0, i, 1))
		}
		return []*tensor.Tensor{gw}
	}, weight))
}

// shape and layout

// Reshape returns a with a new shape (one dimension may be -1).
func Reshape(a *Var, shape ...int) *Var {
	return record("Reshape", a.value.Reshape(shape...), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{g.Reshape(a.Shape()...)}
	}, a)
}

// Flatten merges dimensions start..end into one.
func Flatten(a *Var, start, end int) *Var {
	return record("Flatten", a.value.Flatten(start, end), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{g.Reshape(a.Shape()...)}
	}, a)
}

// Transpose swaps dimensions d0 and d1.
func Transpose(a *Var, d0, d1 int) *Var {
	return record("Transpose", a.value.Transpose(d0, d1), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{g.Transpose(d0, d1)}
	}, a)
}

// Permute reorders the dimensions.
func Permute(a *Var, dims ...int) *Var {
	inv := make([]int, len(dims))
	for i, d := range dims {
		inv[normDim(d, len(dims))] = i
	}
	return record("Permute", a.value.Permute(dims...), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{g.Permute(inv...)}
	}, a)
}

// Narrow returns length elements of dimension dim starting at start.
// Its gradient is added into that slice of a's gradient (see sliceOf).
func Narrow(a *Var, dim, start, length int) *Var {
	d := normDim(dim, a.value.Dim())
	return sliceOf("Narrow", a, &sliceView{dim: d, start: start, length: length})
}

// Select returns index i of dimension dim, removing the dimension.
func Select(a *Var, dim, i int) *Var {
	d := normDim(dim, a.value.Dim())
	return sliceOf("Select", a, &sliceView{dim: d, start: i, length: 1, squeezed: true})
}

// sliceOf records the view s of a. The engine adds the view's gradient
// into the slice of a's one gradient buffer, however many views of a there
// are (the time steps of an RNN's input projection, the four gates of an
// LSTM, the heads of attention); the backward function is the stand-alone
// form, a zero tensor of a's shape with the slice filled.
func sliceOf(name string, a *Var, s *sliceView) *Var {
	v := record(name, s.of(a.value), func(g *tensor.Tensor) []*tensor.Tensor {
		out := tensor.New(g.DType(), a.Shape()...)
		s.of(out).Copy(g)
		return []*tensor.Tensor{out}
	}, a)
	if v.node != nil {
		v.node.view = s
	}
	return v
}

// Unsqueeze inserts a dimension of size 1 at dim.
func Unsqueeze(a *Var, dim int) *Var {
	return record("Unsqueeze", a.value.Unsqueeze(dim), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{g.Reshape(a.Shape()...)}
	}, a)
}

// Squeeze removes dimension dim of size 1.
func Squeeze(a *Var, dim int) *Var {
	return record("Squeeze", a.value.Squeeze(dim), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{g.Reshape(a.Shape()...)}
	}, a)
}

// Expand broadcasts a to shape.
func Expand(a *Var, shape ...int) *Var {
	return record("Expand", a.value.Expand(shape...), func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{reduceTo(g, a.Shape())}
	}, a)
}

// Cat concatenates along dim.
func Cat(dim int, vs ...*Var) *Var {
	vals := make([]*tensor.Tensor, len(vs))
	for i, v := range vs {
		vals[i] = v.value
	}
	out := tensor.Cat(dim, vals...)
	d := normDim(dim, out.Dim())
	return record("Cat", out, func(g *tensor.Tensor) []*tensor.Tensor {
		gs := make([]*tensor.Tensor, len(vs))
		at := 0
		for i, v := range vs {
			n := v.value.Size(d)
			gs[i] = g.Narrow(d, at, n)
			at += n
		}
		return gs
	}, vs...)
}

// Stack joins equal-shaped Vars along a new dimension dim.
func Stack(dim int, vs ...*Var) *Var {
	us := make([]*Var, len(vs))
	for i, v := range vs {
		us[i] = Unsqueeze(v, dim)
	}
	return Cat(dim, us...)
}

// Split cuts a along dim into pieces of size (the last may be smaller).
func Split(a *Var, dim, size int) []*Var {
	parts := a.value.Split(dim, size)
	out := make([]*Var, len(parts))
	at := 0
	for i, p := range parts {
		n := p.Size(dim)
		out[i] = Narrow(a, dim, at, n)
		at += n
	}
	return out
}

// Chunk cuts a along dim into n pieces, as torch.chunk.
func Chunk(a *Var, dim, n int) []*Var {
	size := (a.value.Size(dim) + n - 1) / n
	return Split(a, dim, max(size, 1))
}

// Attention returns multi-head scaled dot-product self-attention of the
// packed projections qkv (B, T, 3C) with the given number of heads,
// causal or not: (B, T, C), heads side by side (see tensor.Attention).
// The probabilities it keeps for backward take B·heads·T² elements.
// Under Autocast it runs on qkv rounded to bfloat16 (its products of
// bfloat16 values exact in float32, its softmax in float32) and rounds
// its output to bfloat16, as a bfloat16 attention hands it on.
func Attention(qkv *Var, heads int, causal bool) *Var {
	if d, ok := autocastTo(qkv); ok {
		return rounded(attention(rounded(qkv, d), heads, causal), d)
	}
	return attention(qkv, heads, causal)
}

func attention(qkv *Var, heads int, causal bool) *Var {
	x := qkv.value.Contiguous()
	out := nt()
	probs := out.Attention(x, heads, causal)
	return record("Attention", out, func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{qkv.gradOut().AttentionBackward(g, x, probs, heads, causal)}
	}, qkv)
}
