// Package simd holds the few vector kernels the communication layers need
// on their hot path (reductions of received chunks), with portable Go
// fallbacks.
package simd

// AddF32 sets dst[i] += src[i] for i < len(dst); src must be at least as
// long as dst.
func AddF32(dst, src []float32) {
	src = src[:len(dst)]
	n := 0
	if len(dst) >= 32 {
		n = addF32(dst, src)
	}
	for i := n; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

func addF32Go(dst, src []float32) int {
	src = src[:len(dst)]
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		d, s := dst[i:i+8:i+8], src[i:i+8:i+8]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
		d[4] += s[4]
		d[5] += s[5]
		d[6] += s[6]
		d[7] += s[7]
	}
	return i
}
