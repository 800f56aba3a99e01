package simd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// rnnKernel is one of rnn.go's kernels for the tests: the exported
// function, its pure-Go form, how many slices it takes, which of them it
// writes, and its formula in float64 for the outputs.
type rnnKernel struct {
	name  string
	nargs int
	outs  []int // indices of the slices it writes
	run   func(s [][]float32)
	goRun func(s [][]float32)
	ref   func(x []float64) []float64 // inputs (every slice's element) -> the outputs' new values, in outs order
}

var rnnKernels = []rnnKernel{
	{"LSTMCell", 5, []int{0},
		func(s [][]float32) { LSTMCellF32(s[0], s[1], s[2], s[3], s[4]) },
		func(s [][]float32) { lstmCellF32Go(s[0], s[1], s[2], s[3], s[4]) },
		func(x []float64) []float64 { return []float64{x[1]*x[2] + x[3]*x[4]} }},
	{"Mul", 3, []int{0},
		func(s [][]float32) { MulF32(s[0], s[1], s[2]) },
		func(s [][]float32) { mulF32Go(s[0], s[1], s[2]) },
		func(x []float64) []float64 { return []float64{x[1] * x[2]} }},
	{"MulAdd", 3, []int{0},
		func(s [][]float32) { MulAddF32(s[0], s[1], s[2]) },
		func(s [][]float32) { mulAddF32Go(s[0], s[1], s[2]) },
		func(x []float64) []float64 { return []float64{x[0] + x[1]*x[2]} }},
	{"GRUOut", 4, []int{0},
		func(s [][]float32) { GRUOutF32(s[0], s[1], s[2], s[3]) },
		func(s [][]float32) { gruOutF32Go(s[0], s[1], s[2], s[3]) },
		func(x []float64) []float64 { return []float64{(1-x[2])*x[1] + x[2]*x[3]} }},
	{"LSTMCellBackward", 13, []int{2, 9, 10, 11, 12},
		func(s [][]float32) {
			LSTMCellBackwardF32(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12])
		},
		func(s [][]float32) {
			lstmCellBackwardF32Go(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12])
		},
		func(x []float64) []float64 {
			dh, dc, i, f, g, o, tc, cp := x[0]+x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8]
			dct := dc + dh*o*(1-tc*tc)
			return []float64{dct * f, dct * g * i * (1 - i), dct * cp * f * (1 - f), dct * i * (1 - g*g), dh * tc * o * (1 - o)}
		}},
	{"GRUCellBackward", 11, []int{0, 7, 8, 9, 10},
		func(s [][]float32) {
			GRUCellBackwardF32(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10])
		},
		func(s [][]float32) {
			gruCellBackwardF32Go(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10])
		},
		func(x []float64) []float64 {
			dh, r, z, n, hn, hp := x[0]+x[1], x[2], x[3], x[4], x[5], x[6]
			dn := dh * (1 - z) * (1 - n*n)
			return []float64{dh * z, dn * hn * r * (1 - r), dh * (hp - n) * z * (1 - z), dn, dn * r}
		}},
}

// TestRNNKernels: every kernel (the AVX2 code where it runs, and its
// pure-Go tail) gives bit for bit its pure-Go form's results, for lengths
// around the vector width, and the pure-Go form is the formula (in
// float64, to float32 rounding).
func TestRNNKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, k := range rnnKernels {
		for _, n := range []int{0, 1, 7, 8, 9, 16, 64, 67, 131} {
			t.Run(fmt.Sprintf("%s/%d", k.name, n), func(t *testing.T) {
				in := make([][]float32, k.nargs)
				for a := range in {
					in[a] = make([]float32, n)
					for j := range in[a] {
						in[a][j] = float32(rng.NormFloat64())
					}
				}
				clone := func() [][]float32 {
					c := make([][]float32, len(in))
					for a := range in {
						c[a] = append([]float32(nil), in[a]...)
					}
					return c
				}
				vec, pure := clone(), clone()
				k.run(vec)
				k.goRun(pure)
				for a := range in {
					for j := range in[a] {
						if math.Float32bits(vec[a][j]) != math.Float32bits(pure[a][j]) {
							t.Fatalf("slice %d element %d: %v, the pure-Go form %v", a, j, vec[a][j], pure[a][j])
						}
					}
				}
				for j := range n {
					x := make([]float64, k.nargs)
					for a := range x {
						x[a] = float64(in[a][j])
					}
					for o, want := range k.ref(x) {
						got := float64(pure[k.outs[o]][j])
						if math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
							t.Fatalf("output %d element %d: %v, want %v", k.outs[o], j, got, want)
						}
					}
				}
			})
		}
	}
}

// TestRNNKernelsWithoutAVX2: the exported functions give the same bits
// when the vector kernels are off (as on other CPUs).
func TestRNNKernelsWithoutAVX2(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, k := range rnnKernels {
		in := make([][]float32, k.nargs)
		for a := range in {
			in[a] = make([]float32, 67)
			for j := range in[a] {
				in[a][j] = float32(rng.NormFloat64())
			}
		}
		a, b := make([][]float32, len(in)), make([][]float32, len(in))
		for i := range in {
			a[i], b[i] = append([]float32(nil), in[i]...), append([]float32(nil), in[i]...)
		}
		k.run(a)
		forceGo = true
		k.run(b)
		forceGo = false
		for i := range a {
			for j := range a[i] {
				if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
					t.Fatalf("%s: slice %d element %d: %v with AVX2, %v without", k.name, i, j, a[i][j], b[i][j])
				}
			}
		}
	}
}

func BenchmarkLSTMCellBackwardF32(b *testing.B) {
	s := make([][]float32, 13)
	for i := range s {
		s[i] = make([]float32, 64)
	}
	for b.Loop() {
		LSTMCellBackwardF32(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12])
	}
}

func BenchmarkLSTMCellBackwardF32Go(b *testing.B) {
	s := make([][]float32, 13)
	for i := range s {
		s[i] = make([]float32, 64)
	}
	for b.Loop() {
		lstmCellBackwardF32Go(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12])
	}
}
