package simd

import "golang.org/x/sys/cpu"

var hasF16C = hasAVX2 && cpu.X86.HasF16C

// f32ToF16F16C converts n floats, n a multiple of 16.
//
//go:noescape
func f32ToF16F16C(dst *uint16, src *float32, n int)

// f16ToF32F16C converts n halves, n a multiple of 16.
//
//go:noescape
func f16ToF32F16C(dst *float32, src *uint16, n int)

// addF16F16C adds n halves, n a multiple of 16.
//
//go:noescape
func addF16F16C(dst, src *uint16, n int)

func f32ToF16(dst []uint16, src []float32) int {
	n := len(src) &^ 15
	if !hasF16C || n == 0 {
		return 0
	}
	f32ToF16F16C(&dst[0], &src[0], n)
	return n
}

func f16ToF32(dst []float32, src []uint16) int {
	n := len(src) &^ 15
	if !hasF16C || n == 0 {
		return 0
	}
	f16ToF32F16C(&dst[0], &src[0], n)
	return n
}

func addF16(dst, src []uint16) int {
	n := len(dst) &^ 15
	if !hasF16C || n == 0 {
		return 0
	}
	addF16F16C(&dst[0], &src[0], n)
	return n
}

// roundF16F16C rounds n floats to half in float32, n a multiple of 16.
//
//go:noescape
func roundF16F16C(dst, src *float32, n int)

func roundF16(dst, src []float32) int {
	n := len(src) &^ 15
	if !hasF16C || n == 0 {
		return 0
	}
	roundF16F16C(&dst[0], &src[0], n)
	return n
}
