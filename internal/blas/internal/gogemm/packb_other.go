//go:build !amd64

package gogemm

// packB16 packs k steps of a 16-column panel of a row-major B (row p at
// src[p*ldb:]) into dst.
func packB16(dst, src []float32, ldb, k int) {
	for p := range k {
		copy(dst[p*16:p*16+16], src[p*ldb:p*ldb+16])
	}
}
