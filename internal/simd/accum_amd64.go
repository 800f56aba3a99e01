package simd

// accumF64AVX2 accumulates n floats, n a multiple of 16.
//
//go:noescape
func accumF64AVX2(acc *float64, x *float32, n int)

func accumF64(acc []float64, x []float32) int {
	if !hasAVX2 {
		return 0
	}
	n := len(acc) &^ 15
	accumF64AVX2(&acc[0], &x[0], n)
	return n
}
