package simd

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// AdamF32 gives the scalar loop's bits, for every length, including
// zero, tiny and huge moments, with and without AMSGrad and L2 decay.
func TestAdamF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-38, 1e-45, 3e38, 1}
	for n := range 80 {
		ams, wd := n%2 == 1, float32(0)
		if n%4 >= 2 {
			wd = 0.01
		}
		w, g, m, v := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		var vmax, wvmax []float32
		if ams {
			vmax = make([]float32, n)
		}
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
		if ams {
			wvmax = make([]float32, n)
		}
		for step := 1; step <= 3; step++ {
			c := Adam{Beta1: 0.9, OneMinusBeta1: float32(1 - 0.9), Beta2: 0.999, OneMinusBeta2: float32(1 - 0.999), Eps: 1e-8,
				BC2Sqrt:     float32(math.Sqrt(1 - math.Pow(0.999, float64(step)))),
				StepSize:    float32(1e-3 / (1 - math.Pow(0.9, float64(step)))),
				WeightDecay: wd}
			AdamF32(w, g, m, v, vmax, c)
			adamF32Go(ww, g, wm, wv, wvmax, &c)
		}
		for i := range w {
			if math.Float32bits(w[i]) != math.Float32bits(ww[i]) || math.Float32bits(m[i]) != math.Float32bits(wm[i]) || math.Float32bits(v[i]) != math.Float32bits(wv[i]) {
				t.Fatalf("n %d, element %d: w %v m %v v %v, scalar %v %v %v", n, i, w[i], m[i], v[i], ww[i], wm[i], wv[i])
			}
			if ams && math.Float32bits(vmax[i]) != math.Float32bits(wvmax[i]) {
				t.Fatalf("n %d, element %d: vmax %v, scalar %v", n, i, vmax[i], wvmax[i])
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
		AdamF32(w, g, m, v, nil, Adam{Beta1: 0.9, OneMinusBeta1: 0.1, Beta2: 0.999, OneMinusBeta2: 0.001, Eps: 1e-8, BC2Sqrt: 0.5, StepSize: 1e-3})
	}
}

// FMA32 rounds once: against the hardware's fused multiply-add (through
// math.FMA on values whose float64 sum is exact) and on cases built so
// that rounding twice would be wrong.
func TestFMA32(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 200000 {
		x := float32(rng.NormFloat64())
		y := float32(rng.NormFloat64()) * float32(math.Pow(2, float64(rng.IntN(40)-20)))
		z := float32(rng.NormFloat64()) * float32(math.Pow(2, float64(rng.IntN(40)-20)))
		got := FMA32(x, y, z)
		// The reference: the exact sum as a big float, rounded once.
		want := fmaBig(x, y, z)
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("FMA32(%v, %v, %v) = %v, want %v", x, y, z, got, want)
		}
	}
	// Where rounding to float64 first would be wrong: x·y+z is
	// 1 + 2^-23 + 2^-24 − 2^-70, just below the float32 tie between
	// 1+2^-23 and 1+2^-22; in float64 it is the tie itself, which rounds
	// to even (1+2^-22).
	x, y, z := float32(1-0x1p-23), float32((1+0x1p-23)*0x1p-24), float32(1+0x1p-23)
	if naive := float32(float64(x)*float64(y) + float64(z)); naive != 1+0x1p-22 {
		t.Fatalf("the case is not what it says: rounded twice it gives %v", naive)
	}
	if got := FMA32(x, y, z); got != 1+0x1p-23 {
		t.Fatalf("FMA32(%v, %v, %v) = %v, want 1+2^-23", x, y, z, got)
	}
	if got := FMA32(-x, y, -z); got != -(1 + 0x1p-23) {
		t.Fatalf("FMA32(%v, %v, %v) = %v, want -(1+2^-23)", -x, y, -z, got)
	}
}

// fmaBig is x·y+z rounded once to float32, computed with math/big.
func fmaBig(x, y, z float32) float32 {
	p := new(big.Float).SetPrec(200).SetFloat64(float64(x))
	p.Mul(p, new(big.Float).SetPrec(200).SetFloat64(float64(y)))
	p.Add(p, new(big.Float).SetPrec(200).SetFloat64(float64(z)))
	f, _ := p.Float32()
	return f
}
