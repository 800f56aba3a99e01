package blas_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/godist/godist/internal/blas"
)

// benchImpls is PureGo plus Default when they differ (openblas build).
func benchImpls() []blas.Impl {
	ims := []blas.Impl{blas.PureGo()}
	if blas.Default.Name() != blas.PureGo().Name() {
		ims = append(ims, blas.Default)
	}
	return ims
}

type benchShape struct {
	name    string
	m, k, n int
	tA, tB  bool
}

var benchShapes = []benchShape{
	{"64x784x256", 64, 784, 256, false, false},
	{"256x256x256", 256, 256, 256, false, false},
	{"1024x1024x1024", 1024, 1024, 1024, false, false},
	// Weight gradient: C(784x256) = Aᵀ·B with A stored 64x784 (k x m).
	{"784x64x256_transA", 784, 64, 256, true, false},
	// Input gradient: C(64x784) = G(64x256)·W(784x256)ᵀ.
	{"64x256x784_transB", 64, 256, 784, false, true},
	{"conv_6x25x784", 6, 25, 784, false, false},
	{"conv_16x150x100", 16, 150, 100, false, false},
}

func BenchmarkSgemm(b *testing.B) {
	for _, im := range benchImpls() {
		for _, s := range benchShapes {
			b.Run(fmt.Sprintf("%s/%s", im.Name(), s.name), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				lda, ldb := s.k, s.n
				if s.tA {
					lda = s.m
				}
				if s.tB {
					ldb = s.k
				}
				a := make([]float32, s.m*s.k)
				bb := make([]float32, s.k*s.n)
				c := make([]float32, s.m*s.n)
				for i := range a {
					a[i] = rng.Float32()
				}
				for i := range bb {
					bb[i] = rng.Float32()
				}
				flops := 2 * float64(s.m) * float64(s.n) * float64(s.k)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					im.Sgemm(s.tA, s.tB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
				}
				b.ReportMetric(flops*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "GFLOP/s")
			})
		}
	}
}
