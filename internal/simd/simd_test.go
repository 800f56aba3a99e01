package simd

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestAddF32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 31, 32, 33, 64, 100, 1000, 4097} {
		d, s := make([]float32, n), make([]float32, n+3)
		want := make([]float32, n)
		for i := range d {
			d[i], s[i] = r.Float32(), r.Float32()
			want[i] = d[i] + s[i]
		}
		AddF32(d, s)
		for i := range d {
			if d[i] != want[i] {
				t.Fatalf("n=%d: element %d = %v, want %v", n, i, d[i], want[i])
			}
		}
	}
}

func BenchmarkAddF32(b *testing.B) {
	d, s := make([]float32, 1<<18), make([]float32, 1<<18)
	b.SetBytes(4 << 18)
	for b.Loop() {
		AddF32(d, s)
	}
}

// TestSGDMomentumF32 checks the vector kernel against the element-by-element
// update, bit for bit, for lengths around the vector width.
func TestSGDMomentumF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 33, 1000, 4099} {
		w, g, buf := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range w {
			w[i], g[i], buf[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64()*1e-3), float32(rng.NormFloat64()*1e-2)
		}
		w2, buf2 := slices.Clone(w), slices.Clone(buf)
		const lr, mom = 0.01, 0.9
		SGDMomentumF32(w, g, buf, lr, mom)
		for i := range w2 {
			b := float32(mom*buf2[i]) + g[i]
			buf2[i] = b
			w2[i] -= float32(lr * b)
		}
		for i := range w {
			if math.Float32bits(w[i]) != math.Float32bits(w2[i]) || math.Float32bits(buf[i]) != math.Float32bits(buf2[i]) {
				t.Fatalf("n %d element %d: w %v buf %v, want %v %v", n, i, w[i], buf[i], w2[i], buf2[i])
			}
		}
	}
}

func BenchmarkSGDMomentumF32(b *testing.B) {
	n := 235146 // the MLP's parameters
	w, g, buf := make([]float32, n), make([]float32, n), make([]float32, n)
	b.SetBytes(int64(n * 4 * 5))
	for b.Loop() {
		SGDMomentumF32(w, g, buf, 0.01, 0.9)
	}
}

func TestScaleF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 31, 32, 33, 100, 4097} {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		want := slices.Clone(v)
		for i := range want {
			want[i] *= 1 / float32(3)
		}
		ScaleF32(v, 1/float32(3))
		for i := range v {
			if math.Float32bits(v[i]) != math.Float32bits(want[i]) {
				t.Fatalf("n %d element %d: %v, want %v", n, i, v[i], want[i])
			}
		}
	}
}

// TestAddScaleF32 checks the fused kernel bit for bit against AddF32
// followed by ScaleF32 (what an all-reduce AVG did before it was fused).
func TestAddScaleF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 31, 32, 33, 100, 4097} {
		for _, s := range []float32{0.5, 1 / float32(3), 0.125} {
			dst, src := make([]float32, n), make([]float32, n)
			for i := range dst {
				dst[i], src[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			}
			want := slices.Clone(dst)
			AddF32(want, src)
			ScaleF32(want, s)
			AddScaleF32(dst, src, s)
			for i := range dst {
				if math.Float32bits(dst[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n %d s %v element %d: %v, want %v", n, s, i, dst[i], want[i])
				}
			}
		}
	}
}

func TestCopyStreaming(t *testing.T) {
	for _, n := range []int{0, 1, 127, 255, 256, 257, 1000, 4096, 100_003} {
		src := make([]byte, n+40)
		for i := range src {
			src[i] = byte(i*31 + 7)
		}
		for _, off := range []int{0, 3, 17} {
			dst := make([]byte, n+40)
			CopyStreaming(dst[off:off+n], src[off:])
			if !bytes.Equal(dst[off:off+n], src[off:off+n]) {
				t.Fatalf("n=%d off=%d: copy differs", n, off)
			}
			for i, b := range dst {
				if (i < off || i >= off+n) && b != 0 {
					t.Fatalf("n=%d off=%d: byte %d outside dst written", n, off, i)
				}
			}
		}
	}
}
