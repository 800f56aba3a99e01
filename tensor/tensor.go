package tensor

import (
	"fmt"
	"math"
	"strings"
	"unsafe"
)

// Tensor is a dense CPU tensor: a dtype, a shape, strides (in elements) and
// a backing buffer. Views (Reshape, Transpose, Narrow, Expand, ...) share
// the buffer; Contiguous and Clone copy.
//
// The zero value is an unsized tensor: used as the destination of an
// operation (t.Add(a, b)) it takes the result's dtype and shape. A sized
// destination must already have them, else the operation panics.
type Tensor struct {
	dtype   DType
	shape   []int
	strides []int
	off     int      // offset of element 0 in elements
	buf     []byte   // backing storage, 8-byte aligned; nil only when unsized
	keep    *offHeap // buf's mapping when it lies outside the Go heap (NewOffHeap)
	pool    *pooled  // buf's pool buffer when it came from the pool (pool.go)
	gen     uint32   // pool's generation when buf was handed out
}

// alloc returns a zeroed, 8-byte aligned buffer of n elements of d.
func alloc(d DType, n int) []byte {
	nb := n * d.Size()
	words := make([]uint64, (nb+7)/8)
	if len(words) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), nb)
}

// New returns a zero-filled contiguous tensor of the given dtype and shape.
func New(d DType, shape ...int) *Tensor {
	t := &Tensor{}
	t.init(d, shape)
	return t
}

// Zeros returns a float32 tensor of zeros.
func Zeros(shape ...int) *Tensor { return New(Float32, shape...) }

// Full returns a tensor of dtype d filled with v.
func Full(d DType, v float64, shape ...int) *Tensor {
	t := New(d, shape...)
	t.Fill(v)
	return t
}

// Scalar returns a 0-dimensional float32 tensor holding v.
func Scalar(v float32) *Tensor { return fromSlice(Float32, []float32{v}, []int{}) }

func (t *Tensor) init(d DType, shape []int) { t.initFill(d, shape, true) }

// initFill makes t a contiguous tensor of dtype d and the given shape, its
// elements zero when zero is set and unspecified otherwise (a recycled
// buffer is then not cleared).
func (t *Tensor) initFill(d DType, shape []int, zero bool) {
	if d == Invalid || d.Size() == 0 {
		panic(fmt.Sprintf("tensor: invalid dtype %v", d))
	}
	n := 1
	for _, s := range shape {
		if s < 0 {
			panic(fmt.Sprintf("tensor: negative dimension in shape %v", shape))
		}
		n *= s
	}
	t.dtype = d
	t.shape = append([]int(nil), shape...)
	t.strides = contiguousStrides(t.shape)
	t.off = 0
	t.pool, t.gen = nil, 0
	if nb := n * d.Size(); nb >= poolMin {
		p := getPooled(nb, zero)
		t.buf, t.pool, t.gen = p.buf, p, p.gen.Load()
		return
	}
	t.buf = alloc(d, n)
}

func contiguousStrides(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}

// fromSlice builds a contiguous tensor that takes ownership of data.
func fromSlice[T any](d DType, data []T, shape []int) *Tensor {
	if shape == nil {
		shape = []int{len(data)}
	}
	if numel(shape) != len(data) {
		panic(fmt.Sprintf("tensor: %d elements do not fill shape %v", len(data), shape))
	}
	var b []byte
	if len(data) == 0 {
		b = []byte{}
	} else {
		b = unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), len(data)*d.Size())
	}
	return &Tensor{dtype: d, shape: append([]int(nil), shape...), strides: contiguousStrides(shape), buf: b}
}

// FromFloat32 returns a float32 tensor that uses data as its storage (no
// copy). With no shape it is 1-D; with shape it must hold exactly len(data)
// elements. Scalar makes a 0-d tensor.
func FromFloat32(data []float32, shape ...int) *Tensor {
	return fromSlice(Float32, data, shapeOrNil(shape))
}

// FromFloat64 is FromFloat32 for float64 data.
func FromFloat64(data []float64, shape ...int) *Tensor {
	return fromSlice(Float64, data, shapeOrNil(shape))
}

// FromInt64 is FromFloat32 for int64 data.
func FromInt64(data []int64, shape ...int) *Tensor {
	return fromSlice(Int64, data, shapeOrNil(shape))
}

// FromInt32 is FromFloat32 for int32 data.
func FromInt32(data []int32, shape ...int) *Tensor {
	return fromSlice(Int32, data, shapeOrNil(shape))
}

// FromUint8 is FromFloat32 for uint8 data.
func FromUint8(data []uint8, shape ...int) *Tensor {
	return fromSlice(Uint8, data, shapeOrNil(shape))
}

// FromBytes returns a contiguous tensor of dtype d and the given shape whose
// storage is a copy of b (little-endian element bytes, as Bytes returns).
func FromBytes(d DType, b []byte, shape ...int) *Tensor {
	t := New(d, shape...)
	if len(b) != len(t.buf) {
		panic(fmt.Sprintf("tensor: %d bytes for %v%v, want %d", len(b), d, shape, len(t.buf)))
	}
	copy(t.buf, b)
	return t
}

// Alias returns a contiguous tensor of dtype d and the given shape whose
// storage is b itself, without a copy: what a decoder uses to hand out the
// tensors inside a received message. b must hold exactly the elements and
// start 8-byte aligned; the tensor keeps all of b's array alive. It
// returns an error, never panics, so that hostile input cannot crash the
// caller.
func Alias(d DType, b []byte, shape ...int) (*Tensor, error) {
	if d == Invalid || d.Size() == 0 {
		return nil, fmt.Errorf("tensor: invalid dtype %v", d)
	}
	n := 1
	for _, s := range shape {
		if s < 0 || (s > 0 && n > math.MaxInt/s) {
			return nil, fmt.Errorf("tensor: bad shape %v", shape)
		}
		n *= s
	}
	if n > math.MaxInt/d.Size() || n*d.Size() != len(b) {
		return nil, fmt.Errorf("tensor: %d bytes for %v%v", len(b), d, shape)
	}
	if len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		return nil, fmt.Errorf("tensor: storage for %v%v is not 8-byte aligned", d, shape)
	}
	if len(b) == 0 {
		b = []byte{}
	}
	t := &Tensor{dtype: d, shape: append([]int(nil), shape...), off: 0, buf: b[:len(b):len(b)]}
	t.strides = contiguousStrides(t.shape)
	return t, nil
}

func shapeOrNil(s []int) []int {
	if len(s) == 0 {
		return nil
	}
	return s
}

func numel(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// DType returns the element type.
func (t *Tensor) DType() DType { return t.dtype }

// Shape returns the shape. The caller must not modify it.
func (t *Tensor) Shape() []int { return t.shape }

// Strides returns the strides in elements. The caller must not modify it.
func (t *Tensor) Strides() []int { return t.strides }

// Dim returns the number of dimensions.
func (t *Tensor) Dim() int { return len(t.shape) }

// Size returns the length of dimension d; negative d counts from the end.
func (t *Tensor) Size(d int) int { return t.shape[t.axis(d)] }

// Numel returns the number of elements.
func (t *Tensor) Numel() int { return numel(t.shape) }

// Sized reports whether t has a dtype and shape (is not the zero value).
func (t *Tensor) Sized() bool { return t.buf != nil }

// axis normalises a possibly negative dimension index.
func (t *Tensor) axis(d int) int {
	n := len(t.shape)
	if d < 0 {
		d += n
	}
	if d < 0 || d >= n {
		panic(fmt.Sprintf("tensor: dimension %d out of range for %d-d tensor", d, n))
	}
	return d
}

// IsContiguous reports whether the elements are laid out densely in
// row-major order.
func (t *Tensor) IsContiguous() bool {
	s := 1
	for i := len(t.shape) - 1; i >= 0; i-- {
		if t.shape[i] != 1 && t.strides[i] != s {
			return false
		}
		s *= t.shape[i]
	}
	return true
}

// SameShape reports whether a and b have equal shapes.
func SameShape(a, b *Tensor) bool { return equalInts(a.shape, b.shape) }

func equalInts(a, b []int) bool {
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

// Bytes returns the contiguous tensor's elements as bytes without copying
// (little-endian, as the machine stores them). It panics if t is not
// contiguous. This is how the transport sends a tensor.
func (t *Tensor) Bytes() []byte {
	t.live()
	t.mustContiguous("Bytes")
	sz := t.dtype.Size()
	return t.buf[t.off*sz : (t.off+t.Numel())*sz]
}

func (t *Tensor) mustContiguous(op string) {
	if !t.IsContiguous() {
		panic(fmt.Sprintf("tensor: %s of a non-contiguous tensor (shape %v strides %v); call Contiguous first", op, t.shape, t.strides))
	}
}

func (t *Tensor) mustDType(d DType, op string) {
	if t.dtype != d {
		panic(fmt.Sprintf("tensor: %s of a %v tensor", op, t.dtype))
	}
}

// storage views of the whole buffer

func f32s(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}
func f64s(b []byte) []float64 {
	return unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}
func i64s(b []byte) []int64 {
	return unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}
func i32s(b []byte) []int32 {
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}
func u16s(b []byte) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/2)
}

// Float32s returns the elements of a contiguous float32 tensor, sharing
// storage: writes through the slice change the tensor.
func (t *Tensor) Float32s() []float32 {
	t.mustDType(Float32, "Float32s")
	return f32s(t.Bytes())
}

// Float64s is Float32s for float64 tensors.
func (t *Tensor) Float64s() []float64 {
	t.mustDType(Float64, "Float64s")
	return f64s(t.Bytes())
}

// Int64s is Float32s for int64 tensors.
func (t *Tensor) Int64s() []int64 {
	t.mustDType(Int64, "Int64s")
	return i64s(t.Bytes())
}

// Int32s is Float32s for int32 tensors.
func (t *Tensor) Int32s() []int32 {
	t.mustDType(Int32, "Int32s")
	return i32s(t.Bytes())
}

// Uint8s is Float32s for uint8 tensors.
func (t *Tensor) Uint8s() []uint8 {
	t.mustDType(Uint8, "Uint8s")
	return t.Bytes()
}

// Uint16s returns the raw 16-bit elements of a contiguous bfloat16 or
// float16 tensor, sharing storage.
func (t *Tensor) Uint16s() []uint16 {
	if t.dtype != BFloat16 && t.dtype != Float16 {
		panic(fmt.Sprintf("tensor: Uint16s of a %v tensor", t.dtype))
	}
	return u16s(t.Bytes())
}

// offset returns the storage index of the element at idx.
func (t *Tensor) offset(idx []int) int {
	if len(idx) != len(t.shape) {
		panic(fmt.Sprintf("tensor: %d indices for a %d-d tensor", len(idx), len(t.shape)))
	}
	o := t.off
	for i, x := range idx {
		if x < 0 || x >= t.shape[i] {
			panic(fmt.Sprintf("tensor: index %v out of range for shape %v", idx, t.shape))
		}
		o += x * t.strides[i]
	}
	return o
}

// At returns the element at idx as a float64.
func (t *Tensor) At(idx ...int) float64 { return t.load(t.offset(idx)) }

// Set stores v at idx, converting to the tensor's dtype.
func (t *Tensor) Set(v float64, idx ...int) { t.store(t.offset(idx), v) }

// Item returns the single element of a one-element tensor.
func (t *Tensor) Item() float64 {
	if t.Numel() != 1 {
		panic(fmt.Sprintf("tensor: Item of a tensor with %d elements", t.Numel()))
	}
	return t.load(t.off)
}

func (t *Tensor) load(o int) float64 {
	t.live()
	switch t.dtype {
	case Float32:
		return float64(f32s(t.buf)[o])
	case Float64:
		return f64s(t.buf)[o]
	case Int64:
		return float64(i64s(t.buf)[o])
	case Int32:
		return float64(i32s(t.buf)[o])
	case Uint8:
		return float64(t.buf[o])
	case BFloat16:
		return float64(BFloat16ToFloat32(u16s(t.buf)[o]))
	case Float16:
		return float64(Float16ToFloat32(u16s(t.buf)[o]))
	}
	panic("tensor: load from unsized tensor")
}

func (t *Tensor) store(o int, v float64) {
	t.live()
	switch t.dtype {
	case Float32:
		f32s(t.buf)[o] = float32(v)
	case Float64:
		f64s(t.buf)[o] = v
	case Int64:
		i64s(t.buf)[o] = int64(v)
	case Int32:
		i32s(t.buf)[o] = int32(v)
	case Uint8:
		t.buf[o] = uint8(v)
	case BFloat16:
		u16s(t.buf)[o] = BFloat16FromFloat32(float32(v))
	case Float16:
		u16s(t.buf)[o] = Float16FromFloat32(float32(v))
	default:
		panic("tensor: store to unsized tensor")
	}
}

// Values returns a copy of all elements, in row-major order, as float64.
// It is meant for tests and printing.
func (t *Tensor) Values() []float64 {
	c := t.Contiguous()
	out := make([]float64, c.Numel())
	for i := range out {
		out[i] = c.load(c.off + i)
	}
	return out
}

// String prints the dtype, shape and up to 16 values.
func (t *Tensor) String() string {
	if !t.Sized() {
		return "tensor(unsized)"
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "tensor(%v%v", t.dtype, t.shape)
	v := t.Values()
	if len(v) > 16 {
		v = v[:16]
	}
	sb.WriteString(" [")
	for i, x := range v {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%.6g", x)
	}
	if t.Numel() > 16 {
		sb.WriteString(" ...")
	}
	sb.WriteString("])")
	return sb.String()
}

// Fill sets every element to v.
func (t *Tensor) Fill(v float64) *Tensor {
	t.live()
	if t.IsContiguous() {
		n := t.Numel()
		switch t.dtype {
		case Float32:
			fillSlice(f32s(t.buf)[t.off:t.off+n], float32(v))
			return t
		case Float64:
			fillSlice(f64s(t.buf)[t.off:t.off+n], v)
			return t
		case Int64:
			fillSlice(i64s(t.buf)[t.off:t.off+n], int64(v))
			return t
		}
	}
	it := newIndex(t.shape)
	for it.next() {
		t.store(t.offset(it.idx), v)
	}
	return t
}

func fillSlice[T any](s []T, v T) {
	for i := range s {
		s[i] = v
	}
}

// Zero sets every element to zero.
func (t *Tensor) Zero() *Tensor { return t.Fill(0) }

// index iterates over all multi-indices of a shape in row-major order.
type index struct {
	shape []int
	idx   []int
	first bool
	done  bool
}

func newIndex(shape []int) *index {
	return &index{shape: shape, idx: make([]int, len(shape)), first: true, done: numel(shape) == 0}
}

func (it *index) next() bool {
	if it.done {
		return false
	}
	if it.first {
		it.first = false
		return true
	}
	for d := len(it.shape) - 1; d >= 0; d-- {
		it.idx[d]++
		if it.idx[d] < it.shape[d] {
			return true
		}
		it.idx[d] = 0
	}
	it.done = true
	return false
}

// prepare makes t a destination of dtype d and the given shape: an unsized
// t is allocated, zeroed; a sized t must match.
func (t *Tensor) prepare(d DType, shape []int, op string) { t.prepareFill(d, shape, op, true) }

// prepareAll is prepare for an operation that writes every element of its
// destination: a new destination is not zeroed first.
func (t *Tensor) prepareAll(d DType, shape []int, op string) { t.prepareFill(d, shape, op, false) }

func (t *Tensor) prepareFill(d DType, shape []int, op string, zero bool) {
	if !t.Sized() {
		t.initFill(d, shape, zero)
		return
	}
	if t.dtype != d || !equalInts(t.shape, shape) {
		panic(fmt.Sprintf("tensor: %s: destination is %v%v, result is %v%v", op, t.dtype, t.shape, d, shape))
	}
}

// Equal reports whether a and b have the same dtype, shape and values
// (NaNs compare unequal).
func Equal(a, b *Tensor) bool {
	if a.dtype != b.dtype || !SameShape(a, b) {
		return false
	}
	av, bv := a.Values(), b.Values()
	for i := range av {
		if av[i] != bv[i] {
			return false
		}
	}
	return true
}

// AllClose reports whether a and b have equal shapes and every pair of
// elements satisfies |a-b| <= atol + rtol*|b|, as torch.allclose.
func AllClose(a, b *Tensor, rtol, atol float64) bool {
	if !SameShape(a, b) {
		return false
	}
	av, bv := a.Values(), b.Values()
	for i := range av {
		if math.Abs(av[i]-bv[i]) > atol+rtol*math.Abs(bv[i]) || math.IsNaN(av[i]) != math.IsNaN(bv[i]) {
			return false
		}
	}
	return true
}

// SharesStorage reports whether a and b are views of the same buffer.
func SharesStorage(a, b *Tensor) bool {
	return len(a.buf) > 0 && len(b.buf) > 0 && unsafe.SliceData(a.buf) == unsafe.SliceData(b.buf)
}

// IsWholeStorage reports whether t is a contiguous view of its entire
// buffer, so that no other view can see elements t does not.
func (t *Tensor) IsWholeStorage() bool {
	return t.off == 0 && t.IsContiguous() && t.Numel()*t.dtype.Size() == len(t.buf)
}
