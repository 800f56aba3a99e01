package simd

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLayerNormF32 checks one row's forward and backward pass, for every
// length from 1 to 70 (every tail), against the formulas in float64.
func TestLayerNormF32(t *testing.T) {
	if !hasFMA {
		if _, ok := LayerNormF32(make([]float32, 1), make([]float32, 1), []float32{1}, []float32{1}, []float32{0}, 1e-5); ok {
			t.Fatal("LayerNormF32 reported a kernel without AVX2 and FMA")
		}
		t.Skip("no AVX2 and FMA")
	}
	const seed, eps = 5, 1e-5
	rng := rand.New(rand.NewPCG(seed, 0))
	vec := func(n int, mean, sd float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(mean + sd*rng.NormFloat64())
		}
		return v
	}
	for d := 1; d <= 70; d++ {
		x, w, b, g := vec(d, 3, 2), vec(d, 1, 0.5), vec(d, 0, 0.5), vec(d, 0, 1)
		y, xhat := make([]float32, d), make([]float32, d)
		is, ok := LayerNormF32(y, xhat, x, w, b, eps)
		if !ok {
			t.Fatal("LayerNormF32 reported no kernel with AVX2 and FMA")
		}
		var mu, v float64
		for _, e := range x {
			mu += float64(e)
		}
		mu /= float64(d)
		for _, e := range x {
			v += (float64(e) - mu) * (float64(e) - mu)
		}
		wantIs := 1 / math.Sqrt(v/float64(d)+eps)
		if math.Abs(float64(is)-wantIs) > 1e-5*wantIs {
			t.Fatalf("seed %d, d=%d: is = %v, want %v", seed, d, is, wantIs)
		}
		h := make([]float64, d)
		for j := range d {
			h[j] = (float64(x[j]) - mu) * wantIs
			wy := h[j]*float64(w[j]) + float64(b[j])
			if math.Abs(float64(xhat[j])-h[j]) > 2e-5*(1+math.Abs(h[j])) || math.Abs(float64(y[j])-wy) > 2e-5*(1+math.Abs(wy)) {
				t.Fatalf("seed %d, d=%d: [%d] xhat %v y %v, want %v %v", seed, d, j, xhat[j], y[j], h[j], wy)
			}
		}
		dx, dw, db := make([]float32, d), vec(d, 0, 1), vec(d, 0, 1)
		dw0, db0 := append([]float32(nil), dw...), append([]float32(nil), db...)
		if !LayerNormBackwardF32(dx, dw, db, g, xhat, w, is) {
			t.Fatal("LayerNormBackwardF32 reported no kernel with AVX2 and FMA")
		}
		var s1, s2 float64
		for j := range d {
			dh := float64(g[j]) * float64(w[j])
			s1 += dh
			s2 += dh * float64(xhat[j])
		}
		for j := range d {
			dh := float64(g[j]) * float64(w[j])
			want := float64(is) / float64(d) * (float64(d)*dh - s1 - float64(xhat[j])*s2)
			if math.Abs(float64(dx[j])-want) > 1e-5*(1+math.Abs(want)) {
				t.Fatalf("seed %d, d=%d: dx[%d] = %v, want %v", seed, d, j, dx[j], want)
			}
			wdw := float64(dw0[j]) + float64(g[j])*float64(xhat[j])
			wdb := float64(db0[j]) + float64(g[j])
			if math.Abs(float64(dw[j])-wdw) > 1e-6*(1+math.Abs(wdw)) || math.Abs(float64(db[j])-wdb) > 1e-6*(1+math.Abs(wdb)) {
				t.Fatalf("seed %d, d=%d: dw[%d], db[%d] = %v, %v, want %v, %v", seed, d, j, j, dw[j], db[j], wdw, wdb)
			}
		}
	}
}
