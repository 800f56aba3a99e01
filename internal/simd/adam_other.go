//go:build !amd64

package simd

func adamF32(w, g, m, v []float32, b1, b2, eps, bc2sqrt, stepSize float32) int { return 0 }
