package simd

import (
	"math/rand/v2"
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
