package tensor

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/godist/godist/internal/simd"
)

type float interface{ ~float32 | ~float64 }

type number interface {
	~float32 | ~float64 | ~int64 | ~int32 | ~uint8
}

// BroadcastShapes returns the shape that a and b broadcast to, following
// NumPy's rules, or panics if they do not.
func BroadcastShapes(a, b []int) []int {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := range n {
		da, db := 1, 1
		if j := i - (n - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (n - len(b)); j >= 0 {
			db = b[j]
		}
		switch {
		case da == db || db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			panic(fmt.Sprintf("tensor: shapes %v and %v do not broadcast", a, b))
		}
	}
	return out
}

// checkAlias panics if dst shares storage with src without being exactly
// the same view (exact aliasing is in-place and allowed).
func checkAlias(dst, src *Tensor, op string) {
	if len(dst.buf) == 0 || len(src.buf) == 0 || unsafe.SliceData(dst.buf) != unsafe.SliceData(src.buf) {
		return
	}
	if dst.off == src.off && equalInts(dst.strides, src.strides) && equalInts(dst.shape, src.shape) {
		return
	}
	panic(fmt.Sprintf("tensor: %s: destination partially overlaps an operand", op))
}

type binOp uint8

const (
	opAdd binOp = iota
	opSub
	opMul
	opDiv
	opMax
	opMin
)

var binOpNames = [...]string{"Add", "Sub", "Mul", "Div", "Maximum", "Minimum"}

// Add sets t = a + b (broadcasting) and returns t.
func (t *Tensor) Add(a, b *Tensor) *Tensor { return t.binary(opAdd, a, b) }

// Sub sets t = a - b (broadcasting) and returns t.
func (t *Tensor) Sub(a, b *Tensor) *Tensor { return t.binary(opSub, a, b) }

// Mul sets t = a * b elementwise (broadcasting) and returns t.
func (t *Tensor) Mul(a, b *Tensor) *Tensor { return t.binary(opMul, a, b) }

// Div sets t = a / b elementwise (broadcasting) and returns t. Integer
// dtypes divide with truncation.
func (t *Tensor) Div(a, b *Tensor) *Tensor { return t.binary(opDiv, a, b) }

// Maximum sets t = max(a, b) elementwise (broadcasting) and returns t.
func (t *Tensor) Maximum(a, b *Tensor) *Tensor { return t.binary(opMax, a, b) }

// Minimum sets t = min(a, b) elementwise (broadcasting) and returns t.
func (t *Tensor) Minimum(a, b *Tensor) *Tensor { return t.binary(opMin, a, b) }

func (t *Tensor) binary(op binOp, a, b *Tensor) *Tensor {
	name := binOpNames[op]
	if a.dtype != b.dtype {
		panic(fmt.Sprintf("tensor: %s of %v and %v", name, a.dtype, b.dtype))
	}
	shape := BroadcastShapes(a.shape, b.shape)
	t.prepareAll(a.dtype, shape, name)
	checkAlias(t, a, name)
	checkAlias(t, b, name)
	if !SameShape(a, t) {
		a = a.Expand(shape...)
	}
	if !SameShape(b, t) {
		b = b.Expand(shape...)
	}
	switch t.dtype {
	case Float32:
		binStrided(op, t, a, b, f32s)
	case Float64:
		binStrided(op, t, a, b, f64s)
	case Int64:
		binStrided(op, t, a, b, i64s)
	case Int32:
		binStrided(op, t, a, b, i32s)
	case Uint8:
		binStrided(op, t, a, b, func(b []byte) []byte { return b })
	default:
		panic(fmt.Sprintf("tensor: %s of %v tensors; convert to float32 first", name, t.dtype))
	}
	return t
}

func binStrided[T number](op binOp, t, a, b *Tensor, view func([]byte) []T) {
	t.live()
	a.live()
	b.live()
	d, x, y := view(t.buf), view(a.buf), view(b.buf)
	rows(t.shape, [][]int{t.strides, a.strides, b.strides}, []int{t.off, a.off, b.off}, func(o []int, n int, s []int) {
		if s[0] == 1 && s[1] == 1 && s[2] == 1 {
			binFlat(op, d[o[0]:o[0]+n], x[o[1]:o[1]+n], y[o[2]:o[2]+n])
			return
		}
		if s[0] == 1 && s[1] == 1 && s[2] == 0 {
			binScalar(op, d[o[0]:o[0]+n], x[o[1]:o[1]+n], y[o[2]])
			return
		}
		od, ox, oy := o[0], o[1], o[2]
		for range n {
			d[od] = apply(op, x[ox], y[oy])
			od += s[0]
			ox += s[1]
			oy += s[2]
		}
	})
}

func apply[T number](op binOp, a, b T) T {
	switch op {
	case opAdd:
		return a + b
	case opSub:
		return a - b
	case opMul:
		return a * b
	case opDiv:
		return a / b
	case opMax:
		if a > b || a != a {
			return a
		}
		return b
	default:
		if a < b || a != a {
			return a
		}
		return b
	}
}

func binFlat[T number](op binOp, d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	switch op {
	case opAdd:
		for i := range d {
			d[i] = a[i] + b[i]
		}
	case opSub:
		for i := range d {
			d[i] = a[i] - b[i]
		}
	case opMul:
		for i := range d {
			d[i] = a[i] * b[i]
		}
	case opDiv:
		for i := range d {
			d[i] = a[i] / b[i]
		}
	default:
		for i := range d {
			d[i] = apply(op, a[i], b[i])
		}
	}
}

func binScalar[T number](op binOp, d, a []T, b T) {
	a = a[:len(d)]
	switch op {
	case opAdd:
		for i := range d {
			d[i] = a[i] + b
		}
	case opSub:
		for i := range d {
			d[i] = a[i] - b
		}
	case opMul:
		for i := range d {
			d[i] = a[i] * b
		}
	case opDiv:
		for i := range d {
			d[i] = a[i] / b
		}
	default:
		for i := range d {
			d[i] = apply(op, a[i], b)
		}
	}
}

// AddScalar sets t = a + s and returns t.
func (t *Tensor) AddScalar(a *Tensor, s float64) *Tensor {
	return t.binary(opAdd, a, Full(a.dtype, s))
}

// MulScalar sets t = a * s and returns t.
func (t *Tensor) MulScalar(a *Tensor, s float64) *Tensor {
	return t.binary(opMul, a, Full(a.dtype, s))
}

// Scale multiplies t by s in place and returns t.
func (t *Tensor) Scale(s float64) *Tensor { return t.MulScalar(t, s) }

// AddScaled sets t = a + alpha*b (same shapes, float dtypes) and returns t.
// It is the axpy of optimizers and gradient accumulation; t may be a.
func (t *Tensor) AddScaled(a *Tensor, alpha float64, b *Tensor) *Tensor {
	if !SameShape(a, b) || a.dtype != b.dtype {
		panic(fmt.Sprintf("tensor: AddScaled of %v%v and %v%v", a.dtype, a.shape, b.dtype, b.shape))
	}
	t.prepareAll(a.dtype, a.shape, "AddScaled")
	checkAlias(t, a, "AddScaled")
	checkAlias(t, b, "AddScaled")
	if t.IsContiguous() && a.IsContiguous() && b.IsContiguous() {
		switch t.dtype {
		case Float32:
			axpy(t.Float32s(), a.Float32s(), float32(alpha), b.Float32s())
			return t
		case Float64:
			axpy(t.Float64s(), a.Float64s(), alpha, b.Float64s())
			return t
		}
	}
	tmp := new(Tensor).MulScalar(b, alpha)
	return t.Add(a, tmp)
}

func axpy[T float](d, a []T, alpha T, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] + alpha*b[i]
	}
}

// unary operations on float tensors

type unOp uint8

const (
	opNeg unOp = iota
	opExp
	opLog
	opTanh
	opSigmoid
	opRelu
	opGelu
	opSqrt
	opAbs
	opSquare
)

var unOpNames = [...]string{"Neg", "Exp", "Log", "Tanh", "Sigmoid", "Relu", "Gelu", "Sqrt", "Abs", "Square"}

// Neg sets t = -a and returns t.
func (t *Tensor) Neg(a *Tensor) *Tensor { return t.unary(opNeg, a) }

// Exp sets t = exp(a) and returns t.
func (t *Tensor) Exp(a *Tensor) *Tensor { return t.unary(opExp, a) }

// Log sets t = ln(a) and returns t.
func (t *Tensor) Log(a *Tensor) *Tensor { return t.unary(opLog, a) }

// Tanh sets t = tanh(a) and returns t.
func (t *Tensor) Tanh(a *Tensor) *Tensor { return t.unary(opTanh, a) }

// Sigmoid sets t = 1/(1+exp(-a)) and returns t.
func (t *Tensor) Sigmoid(a *Tensor) *Tensor { return t.unary(opSigmoid, a) }

// Relu sets t = max(a, 0) and returns t.
func (t *Tensor) Relu(a *Tensor) *Tensor { return t.unary(opRelu, a) }

// Gelu sets t = a·Φ(a) (the exact form, PyTorch's default) and returns t.
func (t *Tensor) Gelu(a *Tensor) *Tensor { return t.unary(opGelu, a) }

// Sqrt sets t = √a and returns t.
func (t *Tensor) Sqrt(a *Tensor) *Tensor { return t.unary(opSqrt, a) }

// Abs sets t = |a| and returns t.
func (t *Tensor) Abs(a *Tensor) *Tensor { return t.unary(opAbs, a) }

// Square sets t = a² and returns t.
func (t *Tensor) Square(a *Tensor) *Tensor { return t.unary(opSquare, a) }

func (t *Tensor) unary(op unOp, a *Tensor) *Tensor {
	name := unOpNames[op]
	t.prepareAll(a.dtype, a.shape, name)
	checkAlias(t, a, name)
	dst := t
	if !t.IsContiguous() {
		dst = Empty(t.dtype, t.shape...)
	}
	src := a.Contiguous()
	switch t.dtype {
	case Float32:
		unaryFlat(op, dst.Float32s(), src.Float32s())
	case Float64:
		unaryFlat(op, dst.Float64s(), src.Float64s())
	default:
		panic(fmt.Sprintf("tensor: %s of a %v tensor", name, t.dtype))
	}
	if dst != t {
		copyStrided(t, dst)
		dst.Recycle()
	}
	return t
}

func unaryFlat[T float](op unOp, d, a []T) {
	a = a[:len(d)]
	if d32, ok := any(d).([]float32); ok && unaryFlat32(op, d32, any(a).([]float32)) {
		return
	}
	switch op {
	case opNeg:
		for i := range d {
			d[i] = -a[i]
		}
	case opRelu:
		for i, x := range a {
			d[i] = max(x, 0)
		}
	case opSquare:
		for i, x := range a {
			d[i] = x * x
		}
	case opAbs:
		for i, x := range a {
			d[i] = T(math.Abs(float64(x)))
		}
	case opSqrt:
		for i, x := range a {
			d[i] = T(math.Sqrt(float64(x)))
		}
	case opExp:
		for i, x := range a {
			d[i] = T(math.Exp(float64(x)))
		}
	case opLog:
		for i, x := range a {
			d[i] = T(math.Log(float64(x)))
		}
	case opTanh:
		for i, x := range a {
			d[i] = T(math.Tanh(float64(x)))
		}
	case opSigmoid:
		for i, x := range a {
			d[i] = T(1 / (1 + math.Exp(-float64(x))))
		}
	case opGelu:
		for i, x := range a {
			f := float64(x)
			d[i] = T(0.5 * f * (1 + math.Erf(f/math.Sqrt2)))
		}
	}
}

// Gradients of the unary functions, fused so that backward passes do one
// sweep over memory. g is the gradient of the output.

// ReluBackward sets t = g where y > 0, else 0, and returns t. y is the
// output of Relu (so it is never negative).
func (t *Tensor) ReluBackward(g, y *Tensor) *Tensor {
	return t.fused2("ReluBackward", g, y, func(g, x float64) float64 {
		if x > 0 {
			return g
		}
		return 0
	}, reluBack32)
}

func reluBack32(d, g, y []float32) {
	g, y = g[:len(d)], y[:len(d)]
	for i := simd.ReLUBackwardF32(d, g, y); i < len(d); i++ {
		// y is a ReLU output (≥ 0 or NaN): keep g where y's bits are
		// non-zero, branch-free since the sign is random in training.
		bits := math.Float32bits(y[i]) &^ (1 << 31)
		keep := uint32(int32(-bits) >> 31) // all ones when bits != 0
		d[i] = math.Float32frombits(math.Float32bits(g[i]) & keep)
	}
}

// TanhBackward sets t = g·(1-y²) where y = tanh(x), and returns t.
func (t *Tensor) TanhBackward(g, y *Tensor) *Tensor {
	return t.fused2("TanhBackward", g, y, func(g, y float64) float64 { return g * (1 - y*y) }, func(d, g, y []float32) {
		g, y = g[:len(d)], y[:len(d)]
		for i := range d {
			d[i] = g[i] * (1 - y[i]*y[i])
		}
	})
}

// SigmoidBackward sets t = g·y·(1-y) where y = sigmoid(x), and returns t.
func (t *Tensor) SigmoidBackward(g, y *Tensor) *Tensor {
	return t.fused2("SigmoidBackward", g, y, func(g, y float64) float64 { return g * y * (1 - y) }, func(d, g, y []float32) {
		g, y = g[:len(d)], y[:len(d)]
		for i := range d {
			d[i] = g[i] * y[i] * (1 - y[i])
		}
	})
}

// GeluBackward sets t = g·(Φ(x) + x·φ(x)) and returns t.
func (t *Tensor) GeluBackward(g, x *Tensor) *Tensor {
	f := func(g, x float64) float64 {
		cdf := 0.5 * (1 + math.Erf(x/math.Sqrt2))
		pdf := math.Exp(-0.5*x*x) / math.Sqrt(2*math.Pi)
		return g * (cdf + x*pdf)
	}
	return t.fused2("GeluBackward", g, x, f, func(d, g, x []float32) {
		const invSqrt2Pi = 0.3989422804014327
		k := simd.GeluBackwardF32(d, g, x)
		d, g, x = d[k:], g[k:], x[k:]
		for i, xi := range x[:len(d)] {
			cdf := 0.5 * (1 + erf32(xi*math.Sqrt2/2))
			pdf := exp32(-0.5*xi*xi) * invSqrt2Pi
			d[i] = g[i] * (cdf + xi*pdf)
		}
	})
}

// unaryFlat32 runs the float32 kernels of the functions that have one
// (exp32, erf32) and reports whether op was one of them.
func unaryFlat32(op unOp, d, a []float32) bool {
	switch op {
	case opRelu:
		k := simd.ReLUF32(d, a)
		for i, x := range a[k:] {
			d[k+i] = max(x, 0)
		}
	case opExp:
		k := simd.ExpF32(d, a)
		for i, x := range a[k:] {
			d[k+i] = exp32(x)
		}
	case opSigmoid:
		k := simd.SigmoidF32(d, a)
		for i, x := range a[k:] {
			d[k+i] = 1 / (1 + exp32(-x))
		}
	case opTanh:
		k := simd.TanhF32(d, a)
		for i, x := range a[k:] {
			d[k+i] = tanh32(x)
		}
	case opGelu:
		k := simd.GeluF32(d, a)
		for i, x := range a[k:] {
			d[k+i] = 0.5 * x * (1 + erf32(x*math.Sqrt2/2))
		}
	default:
		return false
	}
	return true
}

// fused2 applies an elementwise function of two same-shaped float tensors.
func (t *Tensor) fused2(name string, a, b *Tensor, f64 func(a, b float64) float64, f32 func(d, a, b []float32)) *Tensor {
	if !SameShape(a, b) || a.dtype != b.dtype {
		panic(fmt.Sprintf("tensor: %s of %v%v and %v%v", name, a.dtype, a.shape, b.dtype, b.shape))
	}
	t.prepareAll(a.dtype, a.shape, name)
	dst := t
	if !t.IsContiguous() {
		dst = Empty(t.dtype, t.shape...)
	}
	a, b = a.Contiguous(), b.Contiguous()
	switch t.dtype {
	case Float32:
		f32(dst.Float32s(), a.Float32s(), b.Float32s())
	case Float64:
		d, x, y := dst.Float64s(), a.Float64s(), b.Float64s()
		for i := range d {
			d[i] = f64(x[i], y[i])
		}
	default:
		panic(fmt.Sprintf("tensor: %s of %v tensors", name, t.dtype))
	}
	if dst != t {
		copyStrided(t, dst)
		dst.Recycle()
	}
	return t
}
