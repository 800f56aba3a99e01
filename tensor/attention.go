package tensor

import (
	"fmt"
	"math"

	"github.com/godist/godist/internal/blas"
	"github.com/godist/godist/internal/simd"
)

// Multi-head scaled dot-product self-attention on packed projections.
//
// The input is the in-projection's output qkv, (B, T, 3C): for token t of
// sequence b, columns 0:C are its query, C:2C its key and 2C:3C its value,
// and head h owns columns h·D:(h+1)·D of each (D = C/heads), as
// torch.nn.MultiheadAttention lays out in_proj_weight. Each head's Q, K and
// V are read in place as T×D matrices with leading dimension 3C, and each
// head's output is written in place into columns h·D:(h+1)·D of the
// (B, T, C) result, which is the layout the out-projection reads: no head
// is split, transposed or merged by a copy.

// Attention sets t to the attention output (B, T, C) of qkv (B, T, 3C,
// contiguous) with the given number of heads, scaling scores by 1/√D and,
// with causal, letting token i attend to tokens 0..i only. It returns the
// attention probabilities (B, heads, T, T; zero above the diagonal when
// causal), which AttentionBackward needs.
func (t *Tensor) Attention(qkv *Tensor, heads int, causal bool) (probs *Tensor) {
	b, n, c := attentionDims("Attention", qkv, heads)
	// Every element of the output and of probs is written (each head's
	// columns by a product with beta 0, each row of probs by its softmax
	// and the zeros after it), so neither is cleared first.
	t.prepareAll(qkv.dtype, []int{b, n, c}, "Attention")
	if !t.IsContiguous() {
		panic("tensor: Attention into a non-contiguous destination")
	}
	probs = Empty(qkv.dtype, b, heads, n, n)
	switch qkv.dtype {
	case Float32:
		attentionFwd(t.Float32s(), probs.Float32s(), qkv.Float32s(), b, n, c, heads, causal, sgemm)
	case Float64:
		attentionFwd(t.Float64s(), probs.Float64s(), qkv.Float64s(), b, n, c, heads, causal, dgemm)
	default:
		panic(fmt.Sprintf("tensor: Attention of a %v tensor", qkv.dtype))
	}
	return probs
}

// AttentionBackward sets t to the gradient with respect to qkv (B, T, 3C)
// of the attention whose output gradient is g (B, T, C) and whose
// probabilities Attention returned, and returns t.
func (t *Tensor) AttentionBackward(g, qkv, probs *Tensor, heads int, causal bool) *Tensor {
	b, n, c := attentionDims("AttentionBackward", qkv, heads)
	if !equalInts(g.shape, []int{b, n, c}) || !equalInts(probs.shape, []int{b, heads, n, n}) || g.dtype != qkv.dtype || probs.dtype != qkv.dtype {
		panic(fmt.Sprintf("tensor: AttentionBackward of gradient %v%v and probabilities %v%v for qkv %v%v", g.dtype, g.shape, probs.dtype, probs.shape, qkv.dtype, qkv.shape))
	}
	// The first row block of each head (the last rows) writes dQ's rows
	// and all of dK and dV with beta 0, so t is not cleared first.
	t.prepareAll(qkv.dtype, qkv.shape, "AttentionBackward")
	if !t.IsContiguous() {
		panic("tensor: AttentionBackward into a non-contiguous destination")
	}
	g = g.Contiguous()
	switch qkv.dtype {
	case Float32:
		attentionBwd(t.Float32s(), g.Float32s(), qkv.Float32s(), probs.Float32s(), b, n, c, heads, causal, sgemm)
	case Float64:
		attentionBwd(t.Float64s(), g.Float64s(), qkv.Float64s(), probs.Float64s(), b, n, c, heads, causal, dgemm)
	default:
		panic(fmt.Sprintf("tensor: AttentionBackward of a %v tensor", qkv.dtype))
	}
	return t
}

func attentionDims(op string, qkv *Tensor, heads int) (b, n, c int) {
	if qkv.Dim() != 3 || qkv.shape[2]%3 != 0 || heads < 1 || (qkv.shape[2]/3)%heads != 0 {
		panic(fmt.Sprintf("tensor: %s of qkv %v with %d heads: want (B, T, 3C) with C divisible by the heads", op, qkv.shape, heads))
	}
	if !qkv.IsContiguous() {
		panic(fmt.Sprintf("tensor: %s of a non-contiguous qkv", op))
	}
	return qkv.shape[0], qkv.shape[1], qkv.shape[2] / 3
}

// gemmFn is Sgemm or Dgemm: c = alpha·op(a)·op(b) + beta·c.
type gemmFn[T float] func(ta, tb bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int)

func sgemm(ta, tb bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	blas.Sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func dgemm(ta, tb bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	blas.Dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func attentionFwd[T float](out, probs, qkv []T, b, n, c, heads int, causal bool, gemm gemmFn[T]) {
	d := c / heads
	scale := T(1 / math.Sqrt(float64(d)))
	ld := 3 * c
	for bi := range b {
		x := qkv[bi*n*ld:]
		y := out[bi*n*c:]
		for h := range heads {
			p := probs[(bi*heads+h)*n*n : (bi*heads+h+1)*n*n]
			q, k, v := x[h*d:], x[c+h*d:], x[2*c+h*d:]
			for r0 := 0; r0 < n; r0 += rowBlock(n, causal) {
				r1, cols := rowSpan(r0, n, causal)
				// S = scale·Q·Kᵀ for these rows and the columns they see,
				// then each row's softmax in place.
				gemm(false, true, r1-r0, cols, d, scale, q[r0*ld:], ld, k, ld, 0, p[r0*n:], n)
				for i := r0; i < r1; i++ {
					row := p[i*n : (i+1)*n]
					valid := n
					if causal {
						valid = i + 1
					}
					softmaxRow(row[:valid])
					clear(row[valid:])
				}
				// O = P·V, into this head's columns of the output.
				gemm(false, false, r1-r0, d, cols, 1, p[r0*n:], n, v, ld, 0, y[r0*c+h*d:], c)
			}
		}
	}
}

// causalBlock is the number of query rows attention computes together
// when it is causal: each block's products skip the keys after its last
// row. Smaller blocks skip more work but make more, smaller products, each
// packing its operands: at 128 tokens (the tiny GPT's block), blocks of 32
// made the step 20% slower than one block of all rows.
const causalBlock = 128

// rowBlock returns the rows per block: all of them unless causal.
func rowBlock(n int, causal bool) int {
	if causal {
		return causalBlock
	}
	return n
}

// rowSpan returns the end of the block of rows starting at r0 and the
// number of keys (columns) those rows attend to.
func rowSpan(r0, n int, causal bool) (r1, cols int) {
	r1 = min(n, r0+rowBlock(n, causal))
	if causal {
		return r1, r1
	}
	return r1, n
}

// softmaxRow replaces row by its softmax, computed stably.
func softmaxRow[T float](row []T) {
	r32, is32 := any(row).([]float32)
	if is32 && simd.SoftmaxF32(r32, r32) {
		return
	}
	m := row[0]
	for _, s := range row[1:] {
		m = max(m, s)
	}
	var sum float64
	if is32 {
		m32 := float32(m)
		for j := range r32 {
			r32[j] -= m32
		}
		expInto(r32, r32)
		for _, e := range r32 {
			sum += float64(e)
		}
	} else {
		for j, s := range row {
			e := math.Exp(float64(s - m))
			row[j] = T(e)
			sum += e
		}
	}
	inv := T(1 / sum)
	for j := range row {
		row[j] *= inv
	}
}

// softmaxBackwardRow sets d = p∘(d − Σⱼ dⱼpⱼ), the gradient of the
// scores of one row whose probabilities are p, given d, that of p.
func softmaxBackwardRow[T float](d, p []T) {
	if d32, ok := any(d).([]float32); ok && simd.SoftmaxBackwardF32(d32, any(p).([]float32)) {
		return
	}
	var dot T
	for j, pj := range p {
		dot += d[j] * pj
	}
	for j, pj := range p {
		d[j] = pj * (d[j] - dot)
	}
}

func attentionBwd[T float](dqkv, g, qkv, probs []T, b, n, c, heads int, causal bool, gemm gemmFn[T]) {
	d := c / heads
	scale := T(1 / math.Sqrt(float64(d)))
	ld := 3 * c
	ds := make([]T, n*n) // dP, then dS, of one head
	for bi := range b {
		x := qkv[bi*n*ld:]
		dx := dqkv[bi*n*ld:]
		gy := g[bi*n*c:]
		for h := range heads {
			p := probs[(bi*heads+h)*n*n : (bi*heads+h+1)*n*n]
			q, k, v := x[h*d:], x[c+h*d:], x[2*c+h*d:]
			dq, dk, dv := dx[h*d:], dx[c+h*d:], dx[2*c+h*d:]
			dy := gy[h*d:]
			// Row blocks from the last: the last block's products cover
			// every key, so they write dK and dV whole (beta 0), and the
			// earlier ones add to the keys they saw.
			bs := rowBlock(n, causal)
			for r0 := (n - 1) / bs * bs; r0 >= 0; r0 -= bs {
				r1, cols := rowSpan(r0, n, causal)
				beta := T(1)
				if r1 == n {
					beta = 0
				}
				// dV += Pᵀ·dO; dP = dO·Vᵀ.
				gemm(true, false, cols, d, r1-r0, 1, p[r0*n:], n, dy[r0*c:], c, beta, dv, ld)
				gemm(false, true, r1-r0, cols, d, 1, dy[r0*c:], c, v, ld, 0, ds[r0*n:], n)
				// dS = P∘(dP − Σⱼ dP∘P), row by row; zero where P is.
				for i := r0; i < r1; i++ {
					valid := n
					if causal {
						valid = i + 1
					}
					pr, dr := p[i*n:i*n+valid], ds[i*n:i*n+cols]
					softmaxBackwardRow(dr[:valid], pr)
					clear(dr[valid:])
				}
				// dQ = scale·dS·K; dK += scale·dSᵀ·Q.
				gemm(false, false, r1-r0, d, cols, scale, ds[r0*n:], n, k, ld, 0, dq[r0*ld:], ld)
				gemm(true, false, cols, d, r1-r0, scale, ds[r0*n:], n, q[r0*ld:], ld, beta, dk, ld)
			}
		}
	}
}
