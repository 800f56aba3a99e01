package dist

import (
	"fmt"
	"unsafe"

	"github.com/godist/godist/internal/simd"
	"github.com/godist/godist/tensor"
)

// ReduceOp is how a reduction combines values, as torch.distributed.ReduceOp.
type ReduceOp uint8

// The reduction operators. Avg sums and divides by the group size
// (truncating for integer dtypes). The bitwise operators apply to integer
// dtypes only.
const (
	Sum ReduceOp = iota + 1
	Avg
	Product
	Min
	Max
	BAnd
	BOr
	BXor
)

var reduceOpNames = [...]string{"", "SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"}

func (op ReduceOp) String() string {
	if int(op) < len(reduceOpNames) && op > 0 {
		return reduceOpNames[op]
	}
	return fmt.Sprintf("ReduceOp(%d)", uint8(op))
}

func (op ReduceOp) bitwise() bool { return op == BAnd || op == BOr || op == BXor }

// checkReduce reports whether op applies to dtype d.
func checkReduce(op ReduceOp, d tensor.DType) error {
	if op < Sum || op > BXor {
		return fmt.Errorf("unknown reduce op %d", uint8(op))
	}
	if op.bitwise() && d.IsFloat() {
		return fmt.Errorf("%v applies to integer dtypes only, not %v: convert the tensor or use SUM/MAX/MIN", op, d)
	}
	return nil
}

// reducer combines src into dst elementwise (both raw little-endian bytes
// of dtype d, same length).
type reducer func(dst, src []byte)

func view[T any](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

type number interface {
	~float32 | ~float64 | ~int64 | ~int32 | ~uint8
}

type integer interface{ ~int64 | ~int32 | ~uint8 }

// reduceFunc returns the kernel of op for dtype d. Avg reduces as Sum; the
// division happens once at the end (finishAvg).
func reduceFunc(op ReduceOp, d tensor.DType) reducer {
	switch d {
	case tensor.Float32:
		if op == Sum || op == Avg {
			return func(dst, src []byte) { simd.AddF32(view[float32](dst), view[float32](src)) }
		}
		return numeric[float32](op)
	case tensor.Float64:
		return numeric[float64](op)
	case tensor.Int64:
		return intKernel[int64](op)
	case tensor.Int32:
		return intKernel[int32](op)
	case tensor.Uint8:
		return intKernel[uint8](op)
	case tensor.BFloat16:
		return half(op, tensor.BFloat16ToFloat32, tensor.BFloat16FromFloat32)
	case tensor.Float16:
		if op == Sum || op == Avg {
			return sumF16
		}
		return half(op, tensor.Float16ToFloat32, tensor.Float16FromFloat32)
	}
	panic(fmt.Sprintf("dist: no reduction for %v", d))
}

func numeric[T number](op ReduceOp) reducer {
	return func(dst, src []byte) {
		d, s := view[T](dst), view[T](src)
		s = s[:len(d)]
		switch op {
		case Sum, Avg:
			for i := range d {
				d[i] += s[i]
			}
		case Product:
			for i := range d {
				d[i] *= s[i]
			}
		case Min:
			for i := range d {
				if s[i] < d[i] || s[i] != s[i] {
					d[i] = s[i]
				}
			}
		case Max:
			for i := range d {
				if s[i] > d[i] || s[i] != s[i] {
					d[i] = s[i]
				}
			}
		}
	}
}

func intKernel[T integer](op ReduceOp) reducer {
	if !op.bitwise() {
		return numeric[T](op)
	}
	return func(dst, src []byte) {
		d, s := view[T](dst), view[T](src)
		s = s[:len(d)]
		switch op {
		case BAnd:
			for i := range d {
				d[i] &= s[i]
			}
		case BOr:
			for i := range d {
				d[i] |= s[i]
			}
		case BXor:
			for i := range d {
				d[i] ^= s[i]
			}
		}
	}
}

// sumF16 adds IEEE halves in float32 and rounds back, as half(Sum, ...)
// does, with F16C where the machine has it.
func sumF16(dst, src []byte) {
	d, s := view[uint16](dst), view[uint16](src)
	s = s[:len(d)]
	for i := simd.AddF16(d, s); i < len(d); i++ {
		d[i] = tensor.Float16FromFloat32(tensor.Float16ToFloat32(d[i]) + tensor.Float16ToFloat32(s[i]))
	}
}

// half reduces 16-bit floats in float32 and rounds back.
func half(op ReduceOp, widen func(uint16) float32, narrow func(float32) uint16) reducer {
	f := numeric[float32](op)
	return func(dst, src []byte) {
		d, s := view[uint16](dst), view[uint16](src)
		var a, b [256]float32
		for i := 0; i < len(d); i += len(a) {
			n := min(len(a), len(d)-i)
			for k := range n {
				a[k], b[k] = widen(d[i+k]), widen(s[i+k])
			}
			f(f32bytes(a[:n]), f32bytes(b[:n]))
			for k := range n {
				d[i+k] = narrow(a[k])
			}
		}
	}
}

func f32bytes(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

// avgFinal returns, for an all-reduce with op over n ranks, the kernel for
// the receives that complete a range's sum (algo.Xfer.Final), or nil when
// they reduce as any other: for AVG of float32, the last sum and the
// division by n in one pass, (a+b)·(1/n), bit for bit what summing and
// then finishAvg give, without finishAvg's second pass over the buffer.
// Every all-reduce schedule of package algo marks its Final receives.
func avgFinal(op ReduceOp, d tensor.DType, n int) reducer {
	if op != Avg || d != tensor.Float32 || n < 2 {
		return nil
	}
	s := 1 / float32(n)
	return func(dst, src []byte) { simd.AddScaleF32(view[float32](dst), view[float32](src), s) }
}

// finishAvg divides a summed buffer by n.
func finishAvg(b []byte, d tensor.DType, n int) {
	switch d {
	case tensor.Float32:
		// Multiplying by the reciprocal: division is several times slower,
		// and for a power-of-two group size the result is the same.
		simd.ScaleF32(view[float32](b), 1/float32(n))
	case tensor.Float64:
		v, s := view[float64](b), 1/float64(n)
		for i := range v {
			v[i] *= s
		}
	case tensor.Int64:
		divInt(view[int64](b), int64(n))
	case tensor.Int32:
		divInt(view[int32](b), int32(n))
	case tensor.Uint8:
		divInt(view[uint8](b), uint8(n))
	case tensor.BFloat16:
		v := view[uint16](b)
		for i := range v {
			v[i] = tensor.BFloat16FromFloat32(tensor.BFloat16ToFloat32(v[i]) / float32(n))
		}
	case tensor.Float16:
		v := view[uint16](b)
		for i := range v {
			v[i] = tensor.Float16FromFloat32(tensor.Float16ToFloat32(v[i]) / float32(n))
		}
	}
}

func divInt[T integer](v []T, n T) {
	for i := range v {
		v[i] /= n
	}
}
