package simd

import (
	"math"
	"math/rand/v2"
	"testing"
)

// AdamF32 gives the scalar loop's bits, for every length, including
// zero, tiny and huge moments.
func TestAdamF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-38, 1e-45, 3e38, 1}
	for n := range 40 {
		w, g, m, v := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range w {
			w[i] = float32(rng.NormFloat64())
			g[i] = float32(rng.NormFloat64()) * float32(math.Pow(10, float64(rng.IntN(12)-6)))
			m[i] = float32(rng.NormFloat64()) * 0.1
			v[i] = float32(rng.Float64()) * 0.01
			if rng.IntN(5) == 0 {
				g[i] = special[rng.IntN(len(special))]
				v[i] = float32(math.Abs(float64(special[rng.IntN(len(special))])))
			}
		}
		ww, wm, wv := append([]float32(nil), w...), append([]float32(nil), m...), append([]float32(nil), v...)
		for step := 1; step <= 3; step++ {
			bc2 := float32(math.Sqrt(1 - math.Pow(0.999, float64(step))))
			ss := float32(1e-3 / (1 - math.Pow(0.9, float64(step))))
			AdamF32(w, g, m, v, 0.9, 0.999, 1e-8, bc2, ss)
			adamF32Go(ww, g, wm, wv, 0.9, 0.999, 1e-8, bc2, ss)
		}
		for i := range w {
			if math.Float32bits(w[i]) != math.Float32bits(ww[i]) || math.Float32bits(m[i]) != math.Float32bits(wm[i]) || math.Float32bits(v[i]) != math.Float32bits(wv[i]) {
				t.Fatalf("n %d, element %d: w %v m %v v %v, scalar %v %v %v", n, i, w[i], m[i], v[i], ww[i], wm[i], wv[i])
			}
		}
	}
}

func BenchmarkAdamF32(b *testing.B) {
	const n = 1 << 16
	w, g, m, v := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range v {
		v[i] = 1
	}
	b.SetBytes(16 * n)
	for range b.N {
		AdamF32(w, g, m, v, 0.9, 0.999, 1e-8, 0.5, 1e-3)
	}
}
