package tensor

import (
	"fmt"
	"unsafe"
)

// view returns a tensor sharing t's buffer with a new shape, strides and
// offset.
func (t *Tensor) view(shape, strides []int, off int) *Tensor {
	t.live()
	return &Tensor{dtype: t.dtype, shape: shape, strides: strides, off: off, buf: t.buf, keep: t.keep, pool: t.pool, gen: t.gen}
}

// Reshape returns a tensor with the same elements in a new shape. One
// dimension may be -1 and is inferred. A contiguous t is viewed without
// copying; otherwise the elements are copied first, as torch.reshape.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	shape = append([]int(nil), shape...)
	n, infer := 1, -1
	for i, s := range shape {
		switch {
		case s == -1 && infer < 0:
			infer = i
		case s < 0:
			panic(fmt.Sprintf("tensor: bad reshape %v", shape))
		default:
			n *= s
		}
	}
	if infer >= 0 {
		if n == 0 || t.Numel()%n != 0 {
			panic(fmt.Sprintf("tensor: cannot reshape %v into %v", t.shape, shape))
		}
		shape[infer] = t.Numel() / n
		n *= shape[infer]
	}
	if n != t.Numel() {
		panic(fmt.Sprintf("tensor: cannot reshape %v (%d elements) into %v", t.shape, t.Numel(), shape))
	}
	c := t.Contiguous()
	return c.view(shape, contiguousStrides(shape), c.off)
}

// Flatten reshapes dimensions start..end (inclusive, negative from the end)
// into one.
func (t *Tensor) Flatten(start, end int) *Tensor {
	if t.Dim() == 0 {
		return t.Reshape(1)
	}
	start, end = t.axis(start), t.axis(end)
	shape := append([]int(nil), t.shape[:start]...)
	shape = append(shape, numel(t.shape[start:end+1]))
	shape = append(shape, t.shape[end+1:]...)
	return t.Reshape(shape...)
}

// Transpose returns a view with dimensions d0 and d1 swapped.
func (t *Tensor) Transpose(d0, d1 int) *Tensor {
	d0, d1 = t.axis(d0), t.axis(d1)
	shape := append([]int(nil), t.shape...)
	strides := append([]int(nil), t.strides...)
	shape[d0], shape[d1] = shape[d1], shape[d0]
	strides[d0], strides[d1] = strides[d1], strides[d0]
	return t.view(shape, strides, t.off)
}

// T returns the transpose of a 2-D tensor as a view.
func (t *Tensor) T() *Tensor {
	if t.Dim() != 2 {
		panic(fmt.Sprintf("tensor: T of a %d-d tensor", t.Dim()))
	}
	return t.Transpose(0, 1)
}

// Permute returns a view with the dimensions reordered: dimension i of the
// result is dimension dims[i] of t.
func (t *Tensor) Permute(dims ...int) *Tensor {
	if len(dims) != t.Dim() {
		panic(fmt.Sprintf("tensor: Permute%v of a %d-d tensor", dims, t.Dim()))
	}
	seen := make([]bool, len(dims))
	shape := make([]int, len(dims))
	strides := make([]int, len(dims))
	for i, d := range dims {
		d = t.axis(d)
		if seen[d] {
			panic(fmt.Sprintf("tensor: Permute%v repeats a dimension", dims))
		}
		seen[d] = true
		shape[i], strides[i] = t.shape[d], t.strides[d]
	}
	return t.view(shape, strides, t.off)
}

// Narrow returns a view of length elements of dimension dim starting at
// start.
func (t *Tensor) Narrow(dim, start, length int) *Tensor {
	dim = t.axis(dim)
	if start < 0 || length < 0 || start+length > t.shape[dim] {
		panic(fmt.Sprintf("tensor: Narrow(%d, %d, %d) of shape %v", dim, start, length, t.shape))
	}
	shape := append([]int(nil), t.shape...)
	shape[dim] = length
	off := t.off
	if length > 0 {
		off += start * t.strides[dim]
	}
	return t.view(shape, append([]int(nil), t.strides...), off)
}

// Select returns a view of index i of dimension dim, with that dimension
// removed.
func (t *Tensor) Select(dim, i int) *Tensor {
	dim = t.axis(dim)
	n := t.Narrow(dim, i, 1)
	return n.view(remove(n.shape, dim), remove(n.strides, dim), n.off)
}

func remove(s []int, i int) []int {
	out := append([]int(nil), s[:i]...)
	return append(out, s[i+1:]...)
}

func insert(s []int, i, v int) []int {
	out := append([]int(nil), s[:i]...)
	out = append(out, v)
	return append(out, s[i:]...)
}

// Unsqueeze returns a view with a dimension of size 1 inserted at dim
// (0..Dim(), negative counts from the end of the result).
func (t *Tensor) Unsqueeze(dim int) *Tensor {
	if dim < 0 {
		dim += t.Dim() + 1
	}
	if dim < 0 || dim > t.Dim() {
		panic(fmt.Sprintf("tensor: Unsqueeze(%d) of a %d-d tensor", dim, t.Dim()))
	}
	st := 1
	if dim < t.Dim() {
		st = t.strides[dim] * t.shape[dim]
	}
	return t.view(insert(t.shape, dim, 1), insert(t.strides, dim, st), t.off)
}

// Squeeze returns a view with dimension dim removed; it must have size 1.
func (t *Tensor) Squeeze(dim int) *Tensor {
	dim = t.axis(dim)
	if t.shape[dim] != 1 {
		panic(fmt.Sprintf("tensor: Squeeze(%d) of shape %v", dim, t.shape))
	}
	return t.view(remove(t.shape, dim), remove(t.strides, dim), t.off)
}

// Expand returns a view broadcast to shape: dimensions of size 1 are
// repeated with stride 0, and new leading dimensions may be added. -1 keeps
// a dimension's size.
func (t *Tensor) Expand(shape ...int) *Tensor {
	if len(shape) < t.Dim() {
		panic(fmt.Sprintf("tensor: cannot expand %v to %v", t.shape, shape))
	}
	lead := len(shape) - t.Dim()
	outShape := make([]int, len(shape))
	strides := make([]int, len(shape))
	for i, s := range shape {
		if i < lead {
			if s < 0 {
				panic(fmt.Sprintf("tensor: cannot expand %v to %v", t.shape, shape))
			}
			outShape[i] = s
			continue
		}
		have := t.shape[i-lead]
		switch {
		case s == -1 || s == have:
			outShape[i], strides[i] = have, t.strides[i-lead]
		case have == 1:
			outShape[i] = s
		default:
			panic(fmt.Sprintf("tensor: cannot expand %v to %v", t.shape, shape))
		}
	}
	return t.view(outShape, strides, t.off)
}

// Contiguous returns t if it is contiguous, else a contiguous copy.
func (t *Tensor) Contiguous() *Tensor {
	if t.IsContiguous() {
		return t
	}
	return t.Clone()
}

// Clone returns a contiguous copy of t.
func (t *Tensor) Clone() *Tensor {
	c := Empty(t.dtype, t.shape...)
	copyStrided(c, t)
	return c
}

// Copy copies src into t element by element, converting dtypes. The shapes
// must be equal, or src must broadcast to t's shape. An unsized t becomes a
// contiguous copy. It returns t.
func (t *Tensor) Copy(src *Tensor) *Tensor {
	if !t.Sized() {
		t.initFill(src.dtype, src.shape, false)
	}
	if !SameShape(t, src) {
		src = src.Expand(t.shape...)
	}
	if t.dtype == src.dtype {
		copyStrided(t, src)
		return t
	}
	convert(t, src)
	return t
}

// To returns t converted to dtype d (t itself when it already has it).
func (t *Tensor) To(d DType) *Tensor {
	if t.dtype == d {
		return t
	}
	return New(d, t.shape...).Copy(t)
}

// convert copies src into dst (same shape) across dtypes.
func convert(dst, src *Tensor) {
	switch {
	case dst.dtype == Float32 && src.dtype == Float64 && dst.IsContiguous() && src.IsContiguous():
		d, s := dst.Float32s(), src.Float64s()
		for i := range d {
			d[i] = float32(s[i])
		}
	case dst.dtype == Float64 && src.dtype == Float32 && dst.IsContiguous() && src.IsContiguous():
		d, s := dst.Float64s(), src.Float32s()
		for i := range d {
			d[i] = float64(s[i])
		}
	case (dst.dtype == BFloat16 || dst.dtype == Float16) && src.dtype == Float32 && dst.IsContiguous() && src.IsContiguous():
		// Rounding to half precision: FSDP's mixed precision and the
		// compressing DDP hooks do it to whole flat buffers every step.
		narrowHalf(dst.dtype, u16s(dst.Bytes()), src.Float32s())
	case dst.dtype == Float32 && (src.dtype == BFloat16 || src.dtype == Float16) && dst.IsContiguous() && src.IsContiguous():
		widenHalf(src.dtype, dst.Float32s(), u16s(src.Bytes()))
	case dst.dtype == Float32 && src.dtype == Uint8 && dst.IsContiguous() && src.IsContiguous():
		d, s := dst.Float32s(), src.Uint8s()
		for i := range d {
			d[i] = float32(s[i])
		}
	default:
		it := newIndex(dst.shape)
		for it.next() {
			dst.store(dst.offset(it.idx), src.load(src.offset(it.idx)))
		}
	}
}

// coalesce merges dimensions that are laid out consecutively in every
// operand and drops dimensions of size 1. It returns the new shape and one
// stride list per operand.
func coalesce(shape []int, strides ...[]int) ([]int, [][]int) {
	outShape := make([]int, 0, len(shape))
	outStr := make([][]int, len(strides))
	for i := range strides {
		outStr[i] = make([]int, 0, len(shape))
	}
	for d, s := range shape {
		if s == 1 {
			continue
		}
		k := len(outShape) - 1
		merge := k >= 0
		for i := range strides {
			if merge && outStr[i][k] != strides[i][d]*s {
				merge = false
			}
		}
		if merge {
			outShape[k] *= s
			for i := range strides {
				outStr[i][k] = strides[i][d]
			}
			continue
		}
		outShape = append(outShape, s)
		for i := range strides {
			outStr[i] = append(outStr[i], strides[i][d])
		}
	}
	return outShape, outStr
}

// rows walks shape in row-major order and calls fn once per innermost row
// with the storage offset of the row's first element in each operand, the
// row length and the operands' strides along the row. Operands are given
// as (strides, offset) pairs via strides and offs.
func rows(shape []int, strides [][]int, offs []int, fn func(o []int, n int, inner []int)) {
	if numel(shape) == 0 {
		return
	}
	sh, st := coalesce(shape, strides...)
	k := len(strides)
	o := append([]int(nil), offs...)
	inner := make([]int, k)
	if len(sh) == 0 {
		fn(o, 1, inner)
		return
	}
	last := len(sh) - 1
	for i := range k {
		inner[i] = st[i][last]
	}
	n := sh[last]
	outer := sh[:last]
	idx := make([]int, len(outer))
	for {
		fn(o, n, inner)
		d := len(outer) - 1
		for ; d >= 0; d-- {
			idx[d]++
			for i := range k {
				o[i] += st[i][d]
			}
			if idx[d] < outer[d] {
				break
			}
			for i := range k {
				o[i] -= st[i][d] * outer[d]
			}
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// copyStrided copies src into dst; same dtype and shape.
func copyStrided(dst, src *Tensor) {
	if dst.dtype != src.dtype || !SameShape(dst, src) {
		panic(fmt.Sprintf("tensor: copy %v%v into %v%v", src.dtype, src.shape, dst.dtype, dst.shape))
	}
	dst.live()
	src.live()
	sz := dst.dtype.Size()
	rows(dst.shape, [][]int{dst.strides, src.strides}, []int{dst.off, src.off}, func(o []int, n int, in []int) {
		if in[0] == 1 && in[1] == 1 {
			copy(dst.buf[o[0]*sz:(o[0]+n)*sz], src.buf[o[1]*sz:(o[1]+n)*sz])
			return
		}
		switch sz {
		case 8:
			copyElems(u64s(dst.buf), u64s(src.buf), o[0], o[1], in[0], in[1], n)
		case 4:
			copyElems(u32s(dst.buf), u32s(src.buf), o[0], o[1], in[0], in[1], n)
		case 2:
			copyElems(u16s(dst.buf), u16s(src.buf), o[0], o[1], in[0], in[1], n)
		default:
			copyElems(dst.buf, src.buf, o[0], o[1], in[0], in[1], n)
		}
	})
}

func copyElems[T any](d, s []T, od, os, sd, ss, n int) {
	for range n {
		d[od] = s[os]
		od += sd
		os += ss
	}
}

func u64s(b []byte) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}
func u32s(b []byte) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// Cat concatenates tensors of one dtype along dim; all other dimensions must
// agree.
func Cat(dim int, ts ...*Tensor) *Tensor {
	if len(ts) == 0 {
		panic("tensor: Cat of nothing")
	}
	dim = ts[0].axis(dim)
	shape := append([]int(nil), ts[0].shape...)
	shape[dim] = 0
	for _, t := range ts {
		if t.dtype != ts[0].dtype || t.Dim() != len(shape) {
			panic(fmt.Sprintf("tensor: Cat of %v%v and %v%v", ts[0].dtype, ts[0].shape, t.dtype, t.shape))
		}
		for i := range shape {
			if i != dim && t.shape[i] != shape[i] {
				panic(fmt.Sprintf("tensor: Cat along %d of shapes %v and %v", dim, ts[0].shape, t.shape))
			}
		}
		shape[dim] += t.shape[dim]
	}
	out := Empty(ts[0].dtype, shape...)
	at := 0
	for _, t := range ts {
		copyStrided(out.Narrow(dim, at, t.shape[dim]), t)
		at += t.shape[dim]
	}
	return out
}

// Stack joins tensors of equal shape along a new dimension dim.
func Stack(dim int, ts ...*Tensor) *Tensor {
	if len(ts) == 0 {
		panic("tensor: Stack of nothing")
	}
	us := make([]*Tensor, len(ts))
	for i, t := range ts {
		if !SameShape(t, ts[0]) {
			panic(fmt.Sprintf("tensor: Stack of shapes %v and %v", ts[0].shape, t.shape))
		}
		us[i] = t.Unsqueeze(dim)
	}
	return Cat(dim, us...)
}

// Split returns views of t cut along dim into pieces of size (the last may
// be smaller), as torch.split.
func (t *Tensor) Split(dim, size int) []*Tensor {
	dim = t.axis(dim)
	if size <= 0 {
		panic(fmt.Sprintf("tensor: Split size %d", size))
	}
	var out []*Tensor
	for at := 0; at < t.shape[dim]; at += size {
		out = append(out, t.Narrow(dim, at, min(size, t.shape[dim]-at)))
	}
	return out
}

// Chunk returns n views of t along dim (fewer if the dimension is short), as
// torch.chunk.
func (t *Tensor) Chunk(dim, n int) []*Tensor {
	if n <= 0 {
		panic(fmt.Sprintf("tensor: Chunk into %d", n))
	}
	size := (t.Size(dim) + n - 1) / n
	return t.Split(dim, max(size, 1))
}
