package simd

// adamF32FMA updates n floats, n a multiple of 8; vmax may be nil.
//
//go:noescape
func adamF32FMA(w, grad, m, v, vmax *float32, n int, c *Adam)

func adamF32(w, g, m, v, vmax []float32, c *Adam) int {
	if !hasFMA {
		return 0
	}
	n := len(w) &^ 7
	var vm *float32
	if vmax != nil {
		vm = &vmax[0]
	}
	adamF32FMA(&w[0], &g[0], &m[0], &v[0], vm, n, c)
	return n
}
