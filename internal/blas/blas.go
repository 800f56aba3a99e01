// Package blas is godist's one small interface to matrix products.
//
// Every matrix product in the tensor package goes through Sgemm, Dgemm or
// SgemmBias below. The default implementation is pure Go (with Go assembly kernels on
// amd64); building with the tag `openblas` binds OpenBLAS through cgo
// instead. Both pass the same conformance suite (blastest).
//
// All matrices are row-major. For op(A) of shape m×k: when transA is false A
// is m×k with leading dimension lda (≥ k); when true A is stored k×m with
// lda ≥ m. Likewise for B (k×n, or n×k when transposed) and C (m×n, ldc ≥ n).
// The slices are owned by the caller; the call does not retain them. C may
// not alias A or B. Invalid sizes, leading dimensions or short slices panic.
// beta == 0 never reads C (NaNs there are overwritten); alpha == 0 or k == 0
// only scales C.
//
// PureGo returns the pure-Go implementation in every build (so benchmarks can
// compare it with OpenBLAS). On amd64 it picks an AVX-512 or AVX2+FMA
// micro-kernel at run time; GODIST_BLAS_ISA=avx2 or =generic caps the choice.
// The conformance suite is in internal/blas/blastest.
package blas

import (
	"fmt"

	"github.com/godist/godist/internal/blas/internal/gogemm"
)

// SetThreads sets how many goroutines one large product of the pure-Go
// GEMM (m·n·k ≥ 2^26, 512³ and up) may spread its tiles over: n ≤ 0 for GOMAXPROCS
// (the default; `godist run` gives each of N workers CPUs/N), 1 for
// one. A product's bits do not depend on it: every tile is the same
// kernel call on the same data. The OpenBLAS build runs one thread.
func SetThreads(n int) { gogemm.SetThreads(n) }

// Threads is how many goroutines one large pure-Go product uses.
func Threads() int { return gogemm.Threads() }

// Impl is a GEMM implementation. The package-level functions use Default.
type Impl interface {
	// Name says what the implementation is ("go-asm-avx2", "openblas", ...).
	Name() string
	// Sgemm computes C = alpha*op(A)*op(B) + beta*C in float32.
	Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
	// Dgemm computes C = alpha*op(A)*op(B) + beta*C in float64.
	Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int)
}

// Default is the implementation chosen at build time.
var Default Impl = defaultImpl()

// Sgemm computes C = alpha*op(A)*op(B) + beta*C in float32 with Default.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	Default.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Dgemm computes C = alpha*op(A)*op(B) + beta*C in float64 with Default.
func Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	Default.Dgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// BiasImpl is an Impl that can add a bias row as it stores C (the pure-Go
// GEMM can; OpenBLAS's cblas cannot).
type BiasImpl interface {
	Impl
	// SgemmBias computes C = alpha*op(A)*op(B) + bias in float32, the n
	// floats of bias added to every row of C, which is not read.
	SgemmBias(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, bias []float32, c []float32, ldc int)
}

// SgemmBias computes C = alpha*op(A)*op(B) + bias with Default: a Linear
// layer's forward pass. Where Default is not a BiasImpl it fills C's rows
// with bias and calls Sgemm with beta = 1, which gives the same bits.
func SgemmBias(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, bias []float32, c []float32, ldc int) {
	if bi, ok := Default.(BiasImpl); ok {
		bi.SgemmBias(transA, transB, m, n, k, alpha, a, lda, b, ldb, bias, c, ldc)
		return
	}
	gogemm.Check("SgemmBias", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return
	}
	if len(bias) < n {
		panic(fmt.Sprintf("blas.SgemmBias: bias of %d floats for n=%d", len(bias), n))
	}
	for i := range m {
		copy(c[i*ldc:i*ldc+n], bias[:n])
	}
	Default.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, 1, c, ldc)
}
