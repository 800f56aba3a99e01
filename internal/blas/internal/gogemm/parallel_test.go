package gogemm

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestParallelSameBits: a product spread over 2, 3 and 5 goroutines
// (SetThreads) gives the same bits as in one, for every kernel set, with
// A and B transposed or not, beta and a bias row, on shapes with one and
// several m blocks, partial tiles, and several k and n blocks.
func TestParallelSameBits(t *testing.T) {
	defer SetThreads(0)
	defer func(v int) { parallelGemm = v }(parallelGemm)
	parallelGemm = 1 << 16 // every shape below spreads
	seed := uint64(20261129)
	rng := rand.New(rand.NewPCG(seed, 1))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = rng.Float32()*2 - 1
		}
		return x
	}
	shapes := [][3]int{{64, 256, 784}, {33, 129, 300}, {700, 97, 70}, {1, 4096, 300}, {257, 2100, 513}}
	for _, impl := range Variants() {
		for _, sh := range shapes {
			m, n, k := sh[0], sh[1], sh[2]
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				tA, tB := tr[0], tr[1]
				a, b, c0, bias := fill(m*k), fill(k*n), fill(m*n), fill(n)
				lda, ldb := k, n
				if tA {
					lda = m
				}
				if tB {
					ldb = k
				}
				run := func(th int, withBias bool) []float32 {
					SetThreads(th)
					c := append([]float32(nil), c0...)
					if withBias {
						impl.SgemmBias(tA, tB, m, n, k, 0.5, a, lda, b, ldb, bias, c, n)
					} else {
						impl.Sgemm(tA, tB, m, n, k, 0.5, a, lda, b, ldb, 0.25, c, n)
					}
					return c
				}
				for _, withBias := range []bool{false, true} {
					want := run(1, withBias)
					for _, th := range []int{2, 3, 5} {
						got := run(th, withBias)
						for i := range got {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%s %dx%dx%d tA=%v tB=%v bias=%v, %d goroutines: element %d is %v, one goroutine gave %v (seed %d)",
									impl.Name(), m, n, k, tA, tB, withBias, th, i, got[i], want[i], seed)
							}
						}
					}
				}
			}
		}
	}
}
