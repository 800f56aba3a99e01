package simd

// adamF32AVX2 updates n floats, n a multiple of 8.
//
//go:noescape
func adamF32AVX2(w, grad, m, v *float32, n int, b1, b2, eps, bc2sqrt, stepSize float32)

func adamF32(w, g, m, v []float32, b1, b2, eps, bc2sqrt, stepSize float32) int {
	if !hasAVX2 {
		return 0
	}
	n := len(w) &^ 7
	adamF32AVX2(&w[0], &g[0], &m[0], &v[0], n, b1, b2, eps, bc2sqrt, stepSize)
	return n
}
