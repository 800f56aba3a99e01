//go:build !amd64

package simd

func bf16ToF32([]float32, []uint16) int { return 0 }

func f32ToBF16([]uint16, []float32) int { return 0 }

func roundBF16([]float32, []float32) int { return 0 }
