package tensor

import (
	"math"
	"testing"
)

// ulps returns how many float32 steps got is from want (want's spacing).
func ulps(got float32, want float64) float64 {
	w := float32(want)
	step := math.Nextafter32(float32(math.Abs(float64(w))), float32(math.Inf(1))) - float32(math.Abs(float64(w)))
	return math.Abs(float64(got)-want) / float64(step)
}

func TestExp32(t *testing.T) {
	worst, at := 0.0, float32(0)
	for x := float32(-87.3); x < 88.7; x += 0.000731 {
		if u := ulps(exp32(x), math.Exp(float64(x))); u > worst {
			worst, at = u, x
		}
	}
	t.Logf("exp32: worst %.2f ulp at %v", worst, at)
	if worst > 2 {
		t.Fatalf("exp32(%v) is %.2f ulp from math.Exp", at, worst)
	}
	for _, c := range []struct{ x, want float32 }{{-100, 0}, {0, 1}, {float32(math.Inf(-1)), 0}, {float32(math.Inf(1)), float32(math.Inf(1))}, {100, float32(math.Inf(1))}} {
		if got := exp32(c.x); got != c.want {
			t.Errorf("exp32(%v) = %v, want %v", c.x, got, c.want)
		}
	}
	if got := exp32(float32(math.NaN())); got == got {
		t.Errorf("exp32(NaN) = %v", got)
	}
}

func TestErf32(t *testing.T) {
	// Absolute error against math.Erf: erf's values lie in [-1, 1], and
	// GELU multiplies 1+erf by x, so absolute accuracy is what counts.
	worst, at := 0.0, float32(0)
	for x := float32(-6); x < 6; x += 0.0001 {
		if d := math.Abs(float64(erf32(x)) - math.Erf(float64(x))); d > worst {
			worst, at = d, x
		}
	}
	t.Logf("erf32: worst absolute error %.2g at %v", worst, at)
	if worst > 5e-7 {
		t.Fatalf("erf32(%v) is %.2g from math.Erf", at, worst)
	}
	if got := erf32(float32(math.NaN())); got == got {
		t.Errorf("erf32(NaN) = %v", got)
	}
}

func TestTanh32(t *testing.T) {
	worst, at := 0.0, float32(0)
	check := func(x float32) {
		if u := ulps(tanh32(x), math.Tanh(float64(x))); u > worst {
			worst, at = u, x
		}
	}
	for x := float32(-10); x < 10; x += 0.0001 {
		check(x)
	}
	for x := float32(1e-30); x < 1; x *= 1.01 {
		check(x)
		check(-x)
	}
	t.Logf("tanh32: worst %.2f ulp at %v", worst, at)
	if worst > 4 {
		t.Fatalf("tanh32(%v) is %.2f ulp from math.Tanh", at, worst)
	}
	for _, c := range []struct{ x, want float32 }{{0, 0}, {float32(math.Inf(-1)), -1}, {float32(math.Inf(1)), 1}, {1e30, 1}, {9, 1}, {-9.5, -1}} {
		if got := tanh32(c.x); got != c.want {
			t.Errorf("tanh32(%v) = %v, want %v", c.x, got, c.want)
		}
	}
	if got := tanh32(float32(math.NaN())); got == got {
		t.Errorf("tanh32(NaN) = %v", got)
	}
}

// TestTanhSigmoidVectorAndScalar checks that a float32 tensor's Tanh and
// Sigmoid, vector code for the first multiple of 8 elements and scalar code
// for the rest, agree with the float64 functions wherever an element falls.
func TestTanhSigmoidVectorAndScalar(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 13, 1000} {
		x := Randn(NewRNG(uint64(n)), n).Scale(3)
		th, sg := new(Tensor).Tanh(x), new(Tensor).Sigmoid(x)
		for i, v := range x.Float32s() {
			if u := ulps(th.Float32s()[i], math.Tanh(float64(v))); u > 5 {
				t.Errorf("n=%d: Tanh(%v) = %v (%.1f ulp)", n, v, th.Float32s()[i], u)
			}
			if u := ulps(sg.Float32s()[i], 1/(1+math.Exp(-float64(v)))); u > 3 {
				t.Errorf("n=%d: Sigmoid(%v) = %v (%.1f ulp)", n, v, sg.Float32s()[i], u)
			}
		}
	}
}

func BenchmarkErf32(b *testing.B) {
	xs := make([]float32, 4096)
	for i := range xs {
		xs[i] = float32(i-2048) / 512
	}
	b.Run("erf32", func(b *testing.B) {
		var s float32
		for range b.N {
			for _, x := range xs {
				s += erf32(x)
			}
		}
		_ = s
	})
	b.Run("math.Erf", func(b *testing.B) {
		var s float32
		for range b.N {
			for _, x := range xs {
				s += float32(math.Erf(float64(x)))
			}
		}
		_ = s
	})
}
