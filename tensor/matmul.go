package tensor

import (
	"fmt"
	"sync"

	"github.com/godist/godist/internal/blas"
	"github.com/godist/godist/internal/simd"
)

// BLAS names the GEMM kernel that MatMul and the layers built on it use
// ("go-asm-avx2", "openblas", ...), for reports that say what was measured.
func BLAS() string { return blas.Default.Name() }

// SetNumThreads sets how many goroutines one large matrix product may
// use (torch.set_num_threads): n ≤ 0 for the default, GOMAXPROCS (which
// `godist run` sets to the CPUs divided among a host's workers) but no
// more than the CPUs the process may run on (runtime.NumCPU). Results
// are the same bits whatever the count.
func SetNumThreads(n int) { blas.SetThreads(n) }

// NumThreads is how many goroutines one large matrix product uses
// (torch.get_num_threads).
func NumThreads() int { return blas.Threads() }

// MatMul sets t = a·b and returns t. a is (..., m, k); b is (k, n) or has
// the same leading (batch) dimensions as a, (..., k, n). Transposed views
// (a.T(), b.Transpose(-1, -2)) are multiplied without copying. t must not
// share storage with a or b.
func (t *Tensor) MatMul(a, b *Tensor) *Tensor { return t.matmul(a, b, 0, nil) }

// AddMatMul sets t = t + a·b for a sized t and returns t.
func (t *Tensor) AddMatMul(a, b *Tensor) *Tensor {
	if !t.Sized() {
		panic("tensor: AddMatMul into an unsized tensor")
	}
	return t.matmul(a, b, 1, nil)
}

// MatMulBias sets t to a·b + bias (a Linear layer's forward pass), bias a
// 1-d tensor of b's last size added to every row, and returns t. It is
// MatMul then an Add of the bias, or the bias copied into t then
// AddMatMul (the same bits as the latter), in one pass over t: the GEMM
// adds the bias as it stores its tiles.
func (t *Tensor) MatMulBias(a, b, bias *Tensor) *Tensor {
	if bias.Dim() != 1 || b.Dim() < 2 || bias.shape[0] != b.shape[b.Dim()-1] || bias.dtype != b.dtype {
		panic(fmt.Sprintf("tensor: MatMulBias of %v%v by %v%v with bias %v%v", a.dtype, a.shape, b.dtype, b.shape, bias.dtype, bias.shape))
	}
	return t.matmul(a, b, 0, bias)
}

// matmul is t = a·b + beta·t, or with a bias t = a·b + bias.
func (t *Tensor) matmul(a, b *Tensor, beta float64, bias *Tensor) *Tensor {
	if a.dtype != b.dtype || a.Dim() < 2 || b.Dim() < 2 {
		panic(fmt.Sprintf("tensor: MatMul of %v%v and %v%v", a.dtype, a.shape, b.dtype, b.shape))
	}
	m, k := a.shape[a.Dim()-2], a.shape[a.Dim()-1]
	k2, n := b.shape[b.Dim()-2], b.shape[b.Dim()-1]
	batch := a.shape[:a.Dim()-2]
	if k != k2 || (b.Dim() > 2 && !equalInts(batch, b.shape[:b.Dim()-2])) {
		panic(fmt.Sprintf("tensor: MatMul of shapes %v and %v", a.shape, b.shape))
	}
	shape := append(append([]int(nil), batch...), m, n)
	t.prepareAll(a.dtype, shape, "MatMul") // beta 0 never reads the destination
	t.live()
	for _, x := range []*Tensor{a, b} {
		x.live()
		if len(t.buf) > 0 && len(x.buf) > 0 && &t.buf[0] == &x.buf[0] {
			panic("tensor: MatMul destination shares storage with an operand")
		}
	}
	dst := t
	if !t.IsContiguous() {
		dst = t.Clone()
	}
	if b.Dim() == 2 && a.Dim() > 2 && isRowMajor(a) {
		// Fold the batch into the rows: one large product.
		a = a.Reshape(numel(batch)*m, k) // not -1: k may be 0
		m *= numel(batch)
		batch = nil
	}
	nb := numel(batch)
	if bias != nil {
		bias = bias.Contiguous()
		bias.live()
	}
	// One 3-d view of each batched operand, made before the loop: a 3-d
	// operand is used as it is, and one of more dimensions is reshaped
	// (copied, if its layout needs it) once, not once per matrix.
	a3, b3 := a, b
	if a.Dim() > 3 {
		a3 = a.Reshape(-1, m, k)
	}
	if b.Dim() > 3 {
		b3 = b.Reshape(-1, k, n)
	}
	for i := range nb {
		ai, bi := a, b
		if a.Dim() > 2 {
			ai = a3.Select(0, i)
		}
		if b.Dim() > 2 {
			bi = b3.Select(0, i)
		}
		ai, ta, lda := gemmOperand(ai)
		bi, tb, ldb := gemmOperand(bi)
		off := dst.off + i*m*n
		switch a.dtype {
		case Float32:
			if bias != nil {
				blas.SgemmBias(ta, tb, m, n, k, 1, f32s(ai.buf)[ai.off:], lda, f32s(bi.buf)[bi.off:], ldb,
					f32s(bias.buf)[bias.off:bias.off+n], f32s(dst.buf)[off:off+m*n], n)
				continue
			}
			blas.Sgemm(ta, tb, m, n, k, 1, f32s(ai.buf)[ai.off:], lda, f32s(bi.buf)[bi.off:], ldb,
				float32(beta), f32s(dst.buf)[off:off+m*n], n)
		case BFloat16, Float16:
			var bs []uint16
			if bias != nil {
				bs = u16s(bias.buf)[bias.off : bias.off+n]
			}
			gemmHalf(a.dtype, ta, tb, m, n, k, u16s(ai.buf)[ai.off:], lda, u16s(bi.buf)[bi.off:], ldb, float32(beta), bs, u16s(dst.buf)[off:off+m*n])
		case Float64:
			c, be := f64s(dst.buf)[off:off+m*n], beta
			if bias != nil {
				for r := range m {
					copy(c[r*n:(r+1)*n], f64s(bias.buf)[bias.off:bias.off+n])
				}
				be = 1
			}
			blas.Dgemm(ta, tb, m, n, k, 1, f64s(ai.buf)[ai.off:], lda, f64s(bi.buf)[bi.off:], ldb,
				be, c, n)
		default:
			panic(fmt.Sprintf("tensor: MatMul of %v tensors", a.dtype))
		}
	}
	if dst != t {
		copyStrided(t, dst)
	}
	return t
}

// isRowMajor reports whether the last two dimensions of x can be folded with
// its leading ones into a row-major matrix without copying.
func isRowMajor(x *Tensor) bool { return x.IsContiguous() }

// gemmOperand returns a 2-D matrix in a layout GEMM reads directly: row-major
// (trans false) or column-major (trans true), with its leading dimension.
// Other layouts are copied.
func gemmOperand(x *Tensor) (*Tensor, bool, int) {
	r, c := x.shape[0], x.shape[1]
	s0, s1 := x.strides[0], x.strides[1]
	switch {
	case (s1 == 1 || c == 1) && s0 >= max(c, 1):
		return x, false, max(s0, 1)
	case (s0 == 1 || r == 1) && s1 >= max(r, 1):
		return x, true, max(s1, 1)
	case r*c == 0:
		return x, false, max(c, 1)
	}
	x = x.Clone()
	return x, false, max(c, 1)
}

// gemmHalf is the bfloat16 or float16 (d) product c = op(a)·op(b) +
// beta·c (+ bias), as PyTorch's linear computes it on CPUs: the operands
// widened to float32 exactly, the products summed in float32, the result
// rounded to d once (to nearest even; beyond float16's range, to
// infinity, which is what a GradScaler looks for). This machine's CPUs
// have no bfloat16 dot product (AVX512_BF16's vdpbf16ps) nor float16
// arithmetic, so the operands are widened into float32 scratch and the
// float32 GEMM runs on them: the same arithmetic, an extra pass over a
// and b (small beside the product's m·n·k).
func gemmHalf(d DType, ta, tb bool, m, n, k int, a []uint16, lda int, b []uint16, ldb int, beta float32, bias, c []uint16) {
	rowsA, colsA := m, k
	if ta {
		rowsA, colsA = k, m
	}
	rowsB, colsB := k, n
	if tb {
		rowsB, colsB = n, k
	}
	span := func(rows, cols, ld int) int {
		if rows == 0 || cols == 0 {
			return 0
		}
		return (rows-1)*ld + cols
	}
	af := widenScratch(d, a[:span(rowsA, colsA, lda)])
	defer putScratch(af)
	bf := widenScratch(d, b[:span(rowsB, colsB, ldb)])
	defer putScratch(bf)
	cf := scratch(len(c)) // with beta 0 (and a bias) the GEMM only stores
	if beta != 0 {
		widenHalf(d, *cf, c)
	}
	defer putScratch(cf)
	if bias != nil {
		bfl := widenScratch(d, bias)
		defer putScratch(bfl)
		blas.SgemmBias(ta, tb, m, n, k, 1, *af, lda, *bf, ldb, *bfl, *cf, n)
	} else {
		blas.Sgemm(ta, tb, m, n, k, 1, *af, lda, *bf, ldb, beta, *cf, n)
	}
	narrowHalf(d, c, *cf)
}

// bf16Scratch recycles gemmHalf's float32 copies.
var bf16Scratch sync.Pool

// scratch returns a recycled float32 buffer of n elements.
func scratch(n int) *[]float32 {
	p, _ := bf16Scratch.Get().(*[]float32)
	if p == nil || cap(*p) < n {
		s := make([]float32, n)
		p = &s
	}
	*p = (*p)[:n]
	return p
}

// widenScratch returns src, of dtype d, widened to float32 in a
// recycled buffer.
func widenScratch(d DType, src []uint16) *[]float32 {
	p := scratch(len(src))
	widenHalf(d, *p, src)
	return p
}

// widenHalf sets dst[i] to src[i], of dtype d (BFloat16 or Float16),
// widened to float32 (exactly).
func widenHalf(d DType, dst []float32, src []uint16) {
	if d == BFloat16 {
		widen(dst, src)
		return
	}
	for i := simd.F16ToF32(dst, src); i < len(src); i++ {
		dst[i] = Float16ToFloat32(src[i])
	}
}

// narrowHalf sets dst[i] to src[i] rounded to d (BFloat16 or Float16).
func narrowHalf(d DType, dst []uint16, src []float32) {
	if d == BFloat16 {
		narrow(dst, src)
		return
	}
	for i := simd.F32ToF16(dst, src); i < len(src); i++ {
		dst[i] = Float16FromFloat32(src[i])
	}
}

// widen sets dst[i] to src[i] widened to float32 (exactly).
func widen(dst []float32, src []uint16) {
	for i := simd.BF16ToF32(dst, src); i < len(src); i++ {
		dst[i] = BFloat16ToFloat32(src[i])
	}
}

// narrow sets dst[i] to src[i] rounded to bfloat16.
func narrow(dst []uint16, src []float32) {
	for i := simd.F32ToBF16(dst, src); i < len(src); i++ {
		dst[i] = BFloat16FromFloat32(src[i])
	}
}

func putScratch(p *[]float32) { bf16Scratch.Put(p) }

// RoundTo sets t to a's float32 values rounded to d (BFloat16 or
// Float16) and kept in float32, float32(d(a)), and returns t; t may be
// a. Autocast's products take their operands and hand on their results
// so: the float32 GEMM of values that are d's values exactly is the
// product in d with float32 sums, without converting to d's storage and
// back.
func (t *Tensor) RoundTo(a *Tensor, d DType) *Tensor {
	if a.dtype != Float32 || (d != BFloat16 && d != Float16) {
		panic(fmt.Sprintf("tensor: RoundTo %v of a %v tensor: want float32 rounded to bfloat16 or float16", d, a.dtype))
	}
	if t != a {
		t.prepareAll(Float32, a.shape, "RoundTo")
		checkAlias(t, a, "RoundTo")
	}
	dst := t
	if !t.IsContiguous() {
		dst = Empty(Float32, t.shape...)
	}
	src := a.Contiguous()
	out, in := dst.Float32s(), src.Float32s()
	if d == BFloat16 {
		for i := simd.RoundBF16(out, in); i < len(in); i++ {
			out[i] = BFloat16ToFloat32(BFloat16FromFloat32(in[i]))
		}
	} else {
		for i := simd.RoundF16(out, in); i < len(in); i++ {
			out[i] = Float16ToFloat32(Float16FromFloat32(in[i]))
		}
	}
	if dst != t {
		copyStrided(t, dst)
		dst.Recycle()
	}
	return t
}
