package simd_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/godist/godist/internal/simd"
	"github.com/godist/godist/tensor"
)

// needF16C skips where the kernels do not run (no F16C, or not amd64).
func needF16C(t *testing.T) {
	if simd.F32ToF16(make([]uint16, 16), make([]float32, 16)) == 0 {
		t.Skip("no F16C kernels on this machine")
	}
}

func isNaN16(h uint16) bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }

// TestF16ToF32 widens every half and compares with the scalar widening.
func TestF16ToF32(t *testing.T) {
	needF16C(t)
	src := make([]uint16, 1<<16+5) // a tail the kernel leaves
	for i := range src {
		src[i] = uint16(i)
	}
	dst := make([]float32, len(src))
	n := simd.F16ToF32(dst, src)
	if n != 1<<16 {
		t.Fatalf("converted %d of %d, want %d", n, len(src), 1<<16)
	}
	for i := range n {
		want := tensor.Float16ToFloat32(src[i])
		if isNaN16(src[i]) {
			if !math.IsNaN(float64(dst[i])) {
				t.Fatalf("%#04x: %v, want NaN", src[i], dst[i])
			}
			continue
		}
		if math.Float32bits(dst[i]) != math.Float32bits(want) {
			t.Fatalf("%#04x: %v (%#08x), want %v (%#08x)", src[i], dst[i], math.Float32bits(dst[i]), want, math.Float32bits(want))
		}
	}
}

// TestF32ToF16 rounds floats of every exponent, the ties and the edges of
// the half range, and random bit patterns, and compares with the scalar
// rounding (to nearest even).
func TestF32ToF16(t *testing.T) {
	needF16C(t)
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	var src []float32
	for e := uint32(0); e < 256; e++ {
		for _, m := range []uint32{0, 1, 0x1000, 0x1001, 0x0fff, 0x3000, 0x7fffff, 0x400000, 0x2000} {
			src = append(src, math.Float32frombits(e<<23|m), math.Float32frombits(1<<31|e<<23|m))
		}
	}
	src = append(src, 65504, 65519, 65520, 65536, 6.1035156e-05, 5.9604645e-08, 2.9802322e-08, 2.9802326e-08)
	for range 1 << 18 {
		src = append(src, math.Float32frombits(rng.Uint32()))
	}
	dst := make([]uint16, len(src))
	n := simd.F32ToF16(dst, src)
	if n != len(src)&^15 {
		t.Fatalf("converted %d of %d", n, len(src))
	}
	for i := range n {
		f := src[i]
		if math.IsNaN(float64(f)) {
			if !isNaN16(dst[i]) {
				t.Fatalf("NaN %#08x: %#04x, want a NaN", math.Float32bits(f), dst[i])
			}
			continue
		}
		if want := tensor.Float16FromFloat32(f); dst[i] != want {
			t.Fatalf("%g (%#08x): %#04x, want %#04x", f, math.Float32bits(f), dst[i], want)
		}
	}
	// RoundF16: the same rounding widened back, into another slice and
	// in place.
	rounded := make([]float32, len(src))
	inPlace := append([]float32(nil), src...)
	if m, m2 := simd.RoundF16(rounded, src), simd.RoundF16(inPlace, inPlace); m != n || m2 != n {
		t.Fatalf("rounded %d and %d in place of %d, want %d", m, m2, len(src), n)
	}
	for i := range n {
		f := src[i]
		if math.IsNaN(float64(f)) {
			if !math.IsNaN(float64(rounded[i])) || !math.IsNaN(float64(inPlace[i])) {
				t.Fatalf("RoundF16 of NaN %#08x: %v, %v", math.Float32bits(f), rounded[i], inPlace[i])
			}
			continue
		}
		want := math.Float32bits(tensor.Float16ToFloat32(tensor.Float16FromFloat32(f)))
		if got := math.Float32bits(rounded[i]); got != want || math.Float32bits(inPlace[i]) != want {
			t.Fatalf("RoundF16(%g) = %#08x (in place %#08x), want %#08x", f, got, math.Float32bits(inPlace[i]), want)
		}
	}
}

// TestAddF16 adds random halves (and the ones that overflow) as widening,
// adding in float32 and rounding back does.
func TestAddF16(t *testing.T) {
	needF16C(t)
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	a, b := make([]uint16, 1<<16+7), make([]uint16, 1<<16+7)
	for i := range a {
		a[i], b[i] = uint16(rng.Uint32()), uint16(rng.Uint32())
	}
	a[0], b[0] = 0x7bff, 0x7bff // 65504 + 65504: +Inf
	want := make([]uint16, len(a))
	for i := range a {
		want[i] = tensor.Float16FromFloat32(tensor.Float16ToFloat32(a[i]) + tensor.Float16ToFloat32(b[i]))
	}
	n := simd.AddF16(a, b)
	if n != len(a)&^15 {
		t.Fatalf("added %d of %d", n, len(a))
	}
	for i := range n {
		if isNaN16(want[i]) {
			if !isNaN16(a[i]) {
				t.Fatalf("element %d: %#04x, want a NaN", i, a[i])
			}
			continue
		}
		if a[i] != want[i] {
			t.Fatalf("element %d: %#04x, want %#04x", i, a[i], want[i])
		}
	}
}

func BenchmarkF32ToF16(b *testing.B) {
	src, dst := make([]float32, 1<<18), make([]uint16, 1<<18)
	for i := range src {
		src[i] = float32(i) * 1e-6
	}
	b.SetBytes(4 << 18)
	for range b.N {
		simd.F32ToF16(dst, src)
	}
}
