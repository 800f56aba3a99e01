//go:build amd64

package gogemm

import (
	"fmt"
	"testing"
)

// BenchmarkKernelAVX512 measures the full-tile micro-kernel alone, with its
// operands in cache.
func BenchmarkKernelAVX512(b *testing.B) {
	if !detectCPU().avx512 {
		b.Skip("no AVX-512")
	}
	for _, kc := range []int{64, 128, 256, 512} {
		b.Run(fmt.Sprintf("kc=%d", kc), func(b *testing.B) {
			MR, NR := mrAVX512, 16*nvAVX512
			a := make([]float32, MR*kc)
			bb := make([]float32, NR*kc)
			c := make([]float32, MR*NR)
			for i := range a {
				a[i] = 1
			}
			for i := 0; i < b.N; i++ {
				for r := 0; r < 10; r++ {
					kernelAVX512.kern(MR, nvAVX512, 16, kc, a, MR, bb, NR, c, NR, 1, 1)
				}
			}
			b.ReportMetric(2*float64(MR*NR)*float64(kc)*10*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "GFLOP/s")
		})
	}
}

func TestTranspose16AVX512(t *testing.T) {
	if !detectCPU().avx512 {
		t.Skip("no AVX-512")
	}
	const ss, ds = 21, 19
	src := make([]float32, 16*ss)
	for i := range src {
		src[i] = float32(i)
	}
	dst := make([]float32, 16*ds)
	transpose16AVX512(&dst[0], ds*4, &src[0], ss*4)
	for i := 0; i < 16; i++ {
		for j := 0; j < 16; j++ {
			if dst[i*ds+j] != src[j*ss+i] {
				t.Fatalf("dst[%d][%d] = %v, want %v", i, j, dst[i*ds+j], src[j*ss+i])
			}
		}
	}
}
