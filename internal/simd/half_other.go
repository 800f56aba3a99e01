//go:build !amd64

package simd

var hasF16C bool

func f32ToF16([]uint16, []float32) int { return 0 }

func f16ToF32([]float32, []uint16) int { return 0 }

func addF16(dst, src []uint16) int { return 0 }

func roundF16([]float32, []float32) int { return 0 }
