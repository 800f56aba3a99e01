package simd_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/godist/godist/internal/simd"
	"github.com/godist/godist/tensor"
)

// needBF16 skips where the kernels do not run (no AVX2, or not amd64).
func needBF16(t *testing.T) {
	if simd.BF16ToF32(make([]float32, 16), make([]uint16, 16)) == 0 {
		t.Skip("no bfloat16 kernels on this machine")
	}
}

// TestBF16ToF32 widens every bfloat16 and compares the bits with the
// scalar widening (which is exact, so NaNs too).
func TestBF16ToF32(t *testing.T) {
	needBF16(t)
	src := make([]uint16, 1<<16+7) // a tail the kernel leaves
	for i := range src {
		src[i] = uint16(i)
	}
	dst := make([]float32, len(src))
	n := simd.BF16ToF32(dst, src)
	if n != 1<<16 {
		t.Fatalf("converted %d of %d, want %d", n, len(src), 1<<16)
	}
	for i := range n {
		if got, want := math.Float32bits(dst[i]), math.Float32bits(tensor.BFloat16ToFloat32(src[i])); got != want {
			t.Fatalf("%#04x: %#08x, want %#08x", src[i], got, want)
		}
	}
}

// TestF32ToBF16 rounds special values, ties, every rounding neighbourhood
// of every exponent and random bits, and compares with the scalar
// rounding bit for bit.
func TestF32ToBF16(t *testing.T) {
	needBF16(t)
	var src []float32
	for _, b := range []uint32{
		0, 0x80000000, 1, 0x8000ffff, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000,
		0x7fc00000, 0x7f800001, 0xff800001, 0x7fffffff, 0xffffffff, 0x7fbfffff,
		0x3f808000, 0x3f818000, 0x3f807fff, 0x3f817fff, 0x3f808001, // ties to even, either side
	} {
		src = append(src, math.Float32frombits(b))
	}
	for e := uint32(0); e < 256; e++ {
		for _, low := range []uint32{0, 0x7fff, 0x8000, 0x8001, 0xffff, 0x18000, 0x7fffff} {
			src = append(src, math.Float32frombits(e<<23|low), math.Float32frombits(1<<31|e<<23|low))
		}
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	for range 1 << 16 {
		src = append(src, math.Float32frombits(rng.Uint32()))
	}
	src = append(src, 1, 2, 3) // a tail
	dst := make([]uint16, len(src))
	n := simd.F32ToBF16(dst, src)
	if n != len(src)&^15 {
		t.Fatalf("converted %d of %d", n, len(src))
	}
	for i := range n {
		if want := tensor.BFloat16FromFloat32(src[i]); dst[i] != want {
			t.Fatalf("seed %d: %#08x: %#04x, want %#04x", seed, math.Float32bits(src[i]), dst[i], want)
		}
	}
	// RoundBF16: the same rounding widened back, into another slice and
	// in place.
	rounded := make([]float32, len(src))
	inPlace := append([]float32(nil), src...)
	if m, m2 := simd.RoundBF16(rounded, src), simd.RoundBF16(inPlace, inPlace); m != n || m2 != n {
		t.Fatalf("rounded %d and %d in place of %d, want %d", m, m2, len(src), n)
	}
	for i := range n {
		want := math.Float32bits(tensor.BFloat16ToFloat32(tensor.BFloat16FromFloat32(src[i])))
		if got := math.Float32bits(rounded[i]); got != want || math.Float32bits(inPlace[i]) != want {
			t.Fatalf("seed %d: RoundBF16(%#08x) = %#08x (in place %#08x), want %#08x", seed, math.Float32bits(src[i]), got, math.Float32bits(inPlace[i]), want)
		}
	}
}
