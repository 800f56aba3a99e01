package simd

import (
	"math"
	"math/rand/v2"
	"testing"
)

// softmaxRef is the softmax of x in float64.
func softmaxRef(x []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, float64(v))
	}
	out := make([]float64, len(x))
	var s float64
	for i, v := range x {
		out[i] = math.Exp(float64(v) - m)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

// TestSoftmaxF32 checks every length from 0 to 70 (so every tail) against
// float64, with rows far from zero, wide and constant.
func TestSoftmaxF32(t *testing.T) {
	if !hasFMA {
		if SoftmaxF32(make([]float32, 2), []float32{1, 2}) || SoftmaxBackwardF32([]float32{1}, []float32{1}) {
			t.Fatal("SoftmaxF32 reported a kernel without AVX2 and FMA")
		}
		t.Skip("no AVX2 and FMA")
	}
	const seed = 7
	rng := rand.New(rand.NewPCG(seed, 0))
	for n := range 71 {
		for _, c := range []struct {
			name        string
			shift, span float32
		}{{"unit", 0, 1}, {"shifted", -300, 2}, {"wide", 40, 60}, {"constant", 5, 0}} {
			x := make([]float32, n)
			for i := range x {
				x[i] = c.shift + c.span*float32(rng.NormFloat64())
			}
			want := softmaxRef(x)
			if !SoftmaxF32(x, x) {
				t.Fatal("SoftmaxF32 reported no kernel with AVX2 and FMA")
			}
			var sum float64
			for i, got := range x {
				sum += float64(got)
				if d := math.Abs(float64(got) - want[i]); d > 4e-7*want[i]+1e-30 {
					t.Fatalf("seed %d, n=%d %s: [%d] = %v, want %v", seed, n, c.name, i, got, want[i])
				}
			}
			if n > 0 && math.Abs(sum-1) > 1e-5 {
				t.Errorf("seed %d, n=%d %s: sums to %v", seed, n, c.name, sum)
			}
		}
	}
}

// TestSoftmaxF32NonFinite: a NaN or +Inf anywhere makes the row NaN, as
// the scalar formula does; a -Inf entry gets at most e^-87.34 over the
// sum (ExpF32 clamps its argument there), the rest share the mass.
func TestSoftmaxF32NonFinite(t *testing.T) {
	if !hasFMA {
		t.Skip("no AVX2 and FMA")
	}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, n := range []int{1, 5, 8, 13, 16, 29} {
		for pos := range n {
			for _, bad := range []float32{nan, inf} {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(i % 3)
				}
				x[pos] = bad
				SoftmaxF32(x, x)
				for i, v := range x {
					if v == v {
						t.Fatalf("n=%d, %v at %d: [%d] = %v, want NaN", n, bad, pos, i, v)
					}
				}
			}
			x := make([]float32, n)
			x[pos] = float32(math.Inf(-1))
			SoftmaxF32(x, x)
			if n > 1 && (x[pos] > 3e-39 || math.Abs(float64(x[(pos+1)%n])-1/float64(n-1)) > 1e-6) {
				t.Fatalf("n=%d, -Inf at %d: %v", n, pos, x)
			}
		}
	}
}

// TestSoftmaxBackwardF32 checks every length from 0 to 70 against float64.
func TestSoftmaxBackwardF32(t *testing.T) {
	if !hasFMA {
		t.Skip("no AVX2 and FMA")
	}
	const seed = 11
	rng := rand.New(rand.NewPCG(seed, 0))
	for n := range 71 {
		x := make([]float32, n)
		d := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			d[i] = float32(rng.NormFloat64())
		}
		SoftmaxF32(x, x)
		var dot float64
		for i := range d {
			dot += float64(d[i]) * float64(x[i])
		}
		want := make([]float64, n)
		for i := range want {
			want[i] = float64(x[i]) * (float64(d[i]) - dot)
		}
		if !SoftmaxBackwardF32(d, x) {
			t.Fatal("SoftmaxBackwardF32 reported no kernel with AVX2 and FMA")
		}
		for i, got := range d {
			if math.Abs(float64(got)-want[i]) > 1e-6*(math.Abs(want[i])+float64(x[i])) {
				t.Fatalf("seed %d, n=%d: [%d] = %v, want %v", seed, n, i, got, want[i])
			}
		}
	}
}

// TestLogSoftmaxF32 checks every length from 1 to 70 against float64, in
// place and into another slice.
func TestLogSoftmaxF32(t *testing.T) {
	if !hasFMA {
		if LogSoftmaxF32(make([]float32, 2), []float32{1, 2}) {
			t.Fatal("LogSoftmaxF32 reported a kernel without AVX2 and FMA")
		}
		t.Skip("no AVX2 and FMA")
	}
	const seed = 13
	rng := rand.New(rand.NewPCG(seed, 0))
	for n := 1; n <= 70; n++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = 3 + 4*float32(rng.NormFloat64())
		}
		want := softmaxRef(x)
		for _, inPlace := range []bool{false, true} {
			dst := make([]float32, n)
			src := append([]float32(nil), x...)
			if inPlace {
				dst = src
			}
			if !LogSoftmaxF32(dst, src) {
				t.Fatal("LogSoftmaxF32 reported no kernel with AVX2 and FMA")
			}
			for i, got := range dst {
				w := math.Log(want[i])
				if math.Abs(float64(got)-w) > 2e-6*(1+math.Abs(w)) {
					t.Fatalf("seed %d, n=%d, in place %v: [%d] = %v, want %v", seed, n, inPlace, i, got, w)
				}
			}
		}
	}
}
