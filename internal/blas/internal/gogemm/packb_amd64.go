//go:build amd64

package gogemm

// packB16AVX copies k rows of 16 floats, row p from src+p*ldb bytes, to
// dst one after another. It needs AVX (the AVX2 kernel set's CPUs).
//
//go:noescape
func packB16AVX(dst *float32, src *float32, ldb int, k int)

// packB16 packs k steps of a 16-column panel of a row-major B (row p at
// src[p*ldb:]) into dst.
func packB16(dst, src []float32, ldb, k int) {
	if k == 0 {
		return
	}
	_ = dst[k*16-1]
	_ = src[(k-1)*ldb+15]
	packB16AVX(&dst[0], &src[0], ldb*4, k)
}

// transpose8AVX2 writes the transpose of an 8×8 block: dst row i (at
// dst+i*ds bytes) receives column i of the src rows (at src+r*ss bytes).
//
//go:noescape
func transpose8AVX2(dst *float32, ds int, src *float32, ss int)
