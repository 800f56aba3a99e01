package simd

// bf16ToF32AVX2 widens n bfloat16s, n a multiple of 16.
//
//go:noescape
func bf16ToF32AVX2(dst *float32, src *uint16, n int)

// f32ToBF16AVX2 rounds n floats, n a multiple of 16.
//
//go:noescape
func f32ToBF16AVX2(dst *uint16, src *float32, n int)

func bf16ToF32(dst []float32, src []uint16) int {
	n := len(src) &^ 15
	if !hasAVX2 || n == 0 {
		return 0
	}
	bf16ToF32AVX2(&dst[0], &src[0], n)
	return n
}

func f32ToBF16(dst []uint16, src []float32) int {
	n := len(src) &^ 15
	if !hasAVX2 || n == 0 {
		return 0
	}
	f32ToBF16AVX2(&dst[0], &src[0], n)
	return n
}

// roundBF16AVX2 rounds n floats to bfloat16 in float32, n a multiple of 16.
//
//go:noescape
func roundBF16AVX2(dst, src *float32, n int)

func roundBF16(dst, src []float32) int {
	n := len(src) &^ 15
	if !hasAVX2 || n == 0 {
		return 0
	}
	roundBF16AVX2(&dst[0], &src[0], n)
	return n
}
