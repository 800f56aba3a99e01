package autograd

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/godist/godist/tensor"
)

// Mixed precision, as torch.autocast("cpu", dtype=torch.bfloat16) (or
// float16, as torch.autocast("cuda", dtype=torch.float16)): inside
// Autocast the matrix products (MatMul, Linear, Attention) of float32
// operands run in bfloat16 (operands rounded to bfloat16, float32 sums,
// the result rounded once) and every other operation stays in float32, as
// PyTorch's CPU policy keeps reductions, softmax, normalisation and losses
// there.
// A product's result is handed on as float32 holding its bfloat16 value:
// the next operation computes in float32 from it, as PyTorch's
// float32-list operations do from a bfloat16 input, and the next product
// rounds it to bfloat16 again exactly. Gradients flow back through the
// roundings: a product's output gradient is rounded to bfloat16, and so
// are its operands' gradients, which reach float32 parameters (the
// master weights) as float32 tensors.
//
// Everything is kept in float32 storage, the products' operands too:
// each is rounded to bfloat16's values in one pass (tensor.RoundTo), and
// the float32 GEMM of such values is the bfloat16 product with float32
// sums, which is what a CPU without a bfloat16 dot product (AVX512_BF16)
// would compute from bfloat16 storage after widening it. Casting to
// bfloat16 storage and back cost twice the passes: the tiny GPT's step
// (60 steps, two alternating runs on a quiet machine) took 316-335 ms
// that way, 281-297 this way, against float32's 239-252, with the same
// losses to the bit.

// autocast is the dtype of Autocast's products (0: off): that of the
// latest entry in regions that is still open.
var autocast atomic.Int32

// regions are the open Autocast calls, oldest first, under regionsMu.
// Goroutine ranks of one process (the tests' and disttest's jobs) each
// open their own region around the same forward pass, and their regions
// end in any order: a region that ends removes its own entry, so the
// others' products stay in the dtype until the last one ends (restoring
// the value seen at entry would turn it off under a rank still in its
// forward pass).
var (
	regionsMu sync.Mutex
	regions   []*region
)

type region struct{ dtype tensor.DType }

// Autocast runs fn with the matrix products in dtype (tensor.BFloat16
// or tensor.Float16). Like NoGrad the switch is process-wide, not per
// goroutine: while any goroutine is inside Autocast, every product of
// the process runs in the dtype of the latest call still running.
// Nested calls take the innermost dtype; goroutines inside it at once
// (ranks of one process) must ask for the same one.
//
// float16 has bfloat16's precision and more, but a range that ends at
// 65,504 and gradients below 6e-8 vanish in it: train in float16 with
// an optim.GradScaler, which scales the loss so that the gradients keep
// their bits and skips the steps whose gradients overflowed.
func Autocast(dtype tensor.DType, fn func()) {
	if dtype != tensor.BFloat16 && dtype != tensor.Float16 {
		panic(fmt.Sprintf("autograd: Autocast to %v: want bfloat16 or float16", dtype))
	}
	r := &region{dtype}
	regionsMu.Lock()
	regions = append(regions, r)
	autocast.Store(int32(dtype))
	regionsMu.Unlock()
	defer func() {
		regionsMu.Lock()
		defer regionsMu.Unlock()
		regions = slices.DeleteFunc(regions, func(o *region) bool { return o == r })
		d := tensor.DType(0)
		if len(regions) > 0 {
			d = regions[len(regions)-1].dtype
		}
		autocast.Store(int32(d))
	}()
	fn()
}

// AutocastDType returns the dtype of the products under Autocast, and
// whether it is on.
func AutocastDType() (tensor.DType, bool) {
	d := tensor.DType(autocast.Load())
	return d, d != 0
}

// Cast returns x converted to dtype; its gradient is converted back to
// x's. It is x itself when x already has dtype.
func Cast(x *Var, dtype tensor.DType) *Var {
	if x == nil || x.value.DType() == dtype {
		return x
	}
	from := x.value.DType()
	return record("Cast", x.value.To(dtype), func(g *tensor.Tensor) []*tensor.Tensor {
		if !x.wants() {
			return []*tensor.Tensor{nil}
		}
		return []*tensor.Tensor{g.To(from)}
	}, x)
}

// autocastTo returns the dtype to run a product of float32 operands in,
// and whether Autocast asks for one.
func autocastTo(vs ...*Var) (tensor.DType, bool) {
	d, on := AutocastDType()
	if !on {
		return 0, false
	}
	for _, v := range vs {
		if v != nil && v.value.DType() != tensor.Float32 {
			return 0, false
		}
	}
	return d, true
}

// sumRows returns the sum of g's rows (dim 0) in g's dtype: through
// float32 for bfloat16 and float16, as PyTorch's half-precision sums
// accumulate.
func sumRows(dst, g *tensor.Tensor) *tensor.Tensor {
	if d := g.DType(); d == tensor.BFloat16 || d == tensor.Float16 {
		return nt().Sum(g.To(tensor.Float32), 0, false).To(d)
	}
	return dst.Sum(g, 0, false)
}

// rounded returns x (float32) rounded to dtype's values, kept in
// float32; its gradient is rounded likewise. It is Cast to dtype and back
// in one pass: a product of rounded operands in float32 is the product
// in dtype (float32 sums), and its rounded result is what a product in
// dtype hands on.
func rounded(x *Var, dtype tensor.DType) *Var {
	if x == nil {
		return nil
	}
	return record("Round", nt().RoundTo(x.value, dtype), func(g *tensor.Tensor) []*tensor.Tensor {
		if !x.wants() {
			return []*tensor.Tensor{nil}
		}
		return []*tensor.Tensor{nt().RoundTo(g, dtype)}
	}, x)
}
