package simd

import (
	"math/rand/v2"
	"testing"
)

// AccumF64 gives the scalar loop's bits for every length and offset.
func TestAccumF64(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := range 70 {
		for off := range 3 {
			x := make([]float32, n+off)
			acc, want := make([]float64, n), make([]float64, n)
			for i := range acc {
				acc[i] = rng.NormFloat64() * 1e3
				want[i] = acc[i]
			}
			for round := range 3 {
				for i := range x {
					x[i] = float32(rng.NormFloat64()) * float32(1+round*1000)
				}
				AccumF64(acc, x[off:])
				for i := range want {
					want[i] += float64(x[off+i])
				}
			}
			for i := range want {
				if acc[i] != want[i] {
					t.Fatalf("n %d off %d: acc[%d] = %v, want %v", n, off, i, acc[i], want[i])
				}
			}
		}
	}
}

func BenchmarkAccumF64(b *testing.B) {
	acc, x := make([]float64, 384), make([]float32, 384)
	b.SetBytes(4 * 384)
	for range b.N {
		AccumF64(acc, x)
	}
}
