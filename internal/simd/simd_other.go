//go:build !amd64

package simd

func addF32(dst, src []float32) int { return addF32Go(dst, src) }
