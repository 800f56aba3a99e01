package simd

import (
	"math"
	"testing"
)

// grid returns n floats spread over [lo, hi) plus the edge cases.
func grid(lo, hi float32, n int) []float32 {
	xs := make([]float32, 0, n+8)
	for i := range n {
		xs = append(xs, lo+(hi-lo)*float32(i)/float32(n))
	}
	return append(xs, 0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, 88.5, -100, 200, float32(math.NaN()))
}

func TestExpF32(t *testing.T) {
	if !hasFMA {
		t.Skip("no AVX2 and FMA")
	}
	xs := grid(-87.3, 88.3, 200000)
	dst := make([]float32, len(xs)&^7)
	if n := ExpF32(dst, xs); n != len(dst) {
		t.Fatalf("ExpF32 did %d of %d", n, len(dst))
	}
	for i, x := range xs[:len(dst)] {
		want := math.Exp(float64(x))
		got := float64(dst[i])
		switch {
		case x != x:
			if got == got {
				t.Errorf("exp(NaN) = %v", got)
			}
		case x > 88.38:
			if got < 2e38 {
				t.Errorf("exp(%v) = %v, want the clamp's 2.4e38", x, got)
			}
		case x < -87.34:
			if got > 2e-38 {
				t.Errorf("exp(%v) = %v, want at most the smallest normal", x, got)
			}
		default:
			ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1))) - float32(want))
			if math.Abs(got-want) > 2*ulp {
				t.Errorf("exp(%v) = %v, want %v (%.1f ulp)", x, got, want, math.Abs(got-want)/ulp)
			}
		}
	}
}

func gelu(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

func geluGrad(x float64) float64 {
	return 0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-0.5*x*x)/math.Sqrt(2*math.Pi)
}

func TestGeluF32(t *testing.T) {
	if !hasFMA {
		t.Skip("no AVX2 and FMA")
	}
	xs := grid(-12, 12, 100000)
	n := len(xs) &^ 7
	dst, back, g := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range g {
		g[i] = 1 + float32(i%7)/8
	}
	if GeluF32(dst, xs) != n || GeluBackwardF32(back, g, xs) != n {
		t.Fatal("not every element done")
	}
	// Absolute error relative to |x|+1: erf is good to 5e-7 absolute.
	for i, x := range xs[:n] {
		if x != x {
			if dst[i] == dst[i] || back[i] == back[i] {
				t.Errorf("GELU of NaN: %v, gradient %v", dst[i], back[i])
			}
			continue
		}
		xf := float64(x)
		if d := math.Abs(float64(dst[i]) - gelu(xf)); d > 1e-6*(math.Abs(xf)+1) {
			t.Errorf("gelu(%v) = %v, want %v", x, dst[i], gelu(xf))
		}
		want := float64(g[i]) * geluGrad(xf)
		if d := math.Abs(float64(back[i]) - want); d > 2e-6*(math.Abs(want)+1) {
			t.Errorf("gelu'(%v)·%v = %v, want %v", x, g[i], back[i], want)
		}
	}
}

func BenchmarkGeluF32(b *testing.B) {
	xs := grid(-6, 6, 4096)[:4096]
	dst := make([]float32, len(xs))
	b.SetBytes(int64(4 * len(xs)))
	for range b.N {
		GeluF32(dst, xs)
	}
}

// ulps returns |got-want| in units of float32's last place at want.
func ulps(got float32, want float64) float64 {
	w := float32(want)
	ulp := float64(math.Nextafter32(w, float32(math.Inf(1)))) - float64(w)
	if w == 0 {
		ulp = float64(math.SmallestNonzeroFloat32)
	}
	return math.Abs(float64(got)-want) / ulp
}

func TestSigmoidF32(t *testing.T) {
	if !hasFMA {
		t.Skip("no AVX2 and FMA")
	}
	xs := grid(-87, 87, 200000)
	n := len(xs) &^ 7
	dst := make([]float32, n)
	if SigmoidF32(dst, xs) != n {
		t.Fatal("not every element done")
	}
	for i, x := range xs[:n] {
		switch want := 1 / (1 + math.Exp(-float64(x))); {
		case x != x:
			if dst[i] == dst[i] {
				t.Errorf("sigmoid(NaN) = %v", dst[i])
			}
		case x < -87.34:
			if dst[i] < 0 || dst[i] > 5e-39 {
				t.Errorf("sigmoid(%v) = %v, want at most 5e-39", x, dst[i])
			}
		case ulps(dst[i], want) > 3:
			t.Errorf("sigmoid(%v) = %v, want %v (%.1f ulp)", x, dst[i], want, ulps(dst[i], want))
		}
	}
}

func TestTanhF32(t *testing.T) {
	if !hasFMA {
		t.Skip("no AVX2 and FMA")
	}
	xs := append(grid(-10, 10, 200000), grid(-0.01, 0.01, 20000)...)
	xs = append(xs, 1e-20, -3e-8, 7.9, 7.91, -8, 1e30, float32(math.Inf(-1)))
	n := len(xs) &^ 7
	dst := make([]float32, n)
	if TanhF32(dst, xs) != n {
		t.Fatal("not every element done")
	}
	for i, x := range xs[:n] {
		want := math.Tanh(float64(x))
		switch {
		case x != x:
			if dst[i] == dst[i] {
				t.Errorf("tanh(NaN) = %v", dst[i])
			}
		case ulps(dst[i], want) > 5:
			t.Errorf("tanh(%v) = %v, want %v (%.1f ulp)", x, dst[i], want, ulps(dst[i], want))
		case math.Abs(float64(x)) >= 9 && float64(dst[i]) != math.Copysign(1, float64(x)):
			t.Errorf("tanh(%v) = %v, want ±1 exactly", x, dst[i])
		}
	}
}

func BenchmarkTanhF32(b *testing.B) {
	xs := grid(-6, 6, 4096)[:4096]
	dst := make([]float32, len(xs))
	b.SetBytes(int64(4 * len(xs)))
	for range b.N {
		TanhF32(dst, xs)
	}
}

// TestGeluAVX512SameBits: the sixteen-lane GELU kernels give the AVX2
// kernels' bits, element for element (so a result does not depend on
// which of the two a machine has), on every length up to 70 and a grid.
func TestGeluAVX512SameBits(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512")
	}
	defer func(v bool) { hasAVX512 = v }(hasAVX512)
	xs := grid(-12, 12, 20000)
	g := make([]float32, len(xs))
	for i := range g {
		g[i] = 1 + float32(i%7)/8
	}
	for _, n := range append([]int{len(xs)}, 8, 16, 24, 40, 56, 64, 72) {
		var out [2][2][]float32 // [AVX-512?][forward, backward]
		for i, on := range []bool{false, true} {
			hasAVX512 = on
			out[i][0], out[i][1] = make([]float32, n), make([]float32, n)
			GeluF32(out[i][0], xs)
			GeluBackwardF32(out[i][1], g, xs)
		}
		for k := range 2 {
			for j := range n {
				a, b := out[0][k][j], out[1][k][j]
				if math.Float32bits(a) != math.Float32bits(b) && !(a != a && b != b) {
					t.Fatalf("n=%d, pass %d, x=%v: AVX2 %v, AVX-512 %v", n, k, xs[j], a, b)
				}
			}
		}
	}
}
