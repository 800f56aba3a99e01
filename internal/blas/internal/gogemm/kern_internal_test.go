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
					kernelAVX512.kern(MR, nvAVX512, 16, kc, a, MR, bb, NR, c, NR, 1, 1, nil)
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

// BenchmarkRowsA measures products whose A is stored by rows, with A
// packed (packed) and read in place by the row kernels (rows), on the
// tiny GPT's shapes (m×k·k×n: the projections of 1,024 tokens of width
// 128 and one head's attention, 128 positions, head width 32), the MLP's
// first layer and two squares; it sets each kernel set's rowsMaxN.
func BenchmarkRowsA(b *testing.B) {
	ks := availableKernels()[0]
	if ks.kernRows == nil {
		b.Skip("no row kernels for " + ks.name)
	}
	defer func(n int) { ks.rowsMaxN = n }(ks.rowsMaxN)
	for _, s := range [][3]int{{1024, 128, 384}, {1024, 128, 128}, {1024, 512, 128}, {1024, 128, 512}, {128, 32, 128}, {128, 128, 32}, {1024, 128, 1024}, {64, 784, 256}, {256, 256, 256}, {1024, 1024, 1024}} {
		m, k, n := s[0], s[1], s[2]
		a, bb, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
		for i := range a {
			a[i] = float32(i%7) - 3
		}
		for i := range bb {
			bb[i] = float32(i%5) - 2
		}
		for _, mode := range []string{"packed", "rows"} {
			b.Run(fmt.Sprintf("%dx%dx%d/%s", m, k, n, mode), func(b *testing.B) {
				ks.rowsMaxN = 0
				if mode == "rows" {
					ks.rowsMaxN = 1 << 30
				}
				for range b.N {
					sgemmBlocked(ks, false, true, m, n, k, 1, a, k, bb, k, 0, nil, c, n)
				}
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "GFLOP/s")
			})
		}
	}
}

// BenchmarkPackB measures packing a row-major B block of 256 steps and
// 384 columns into AVX2 panels.
func BenchmarkPackB(b *testing.B) {
	const k, n = 256, 384
	src := make([]float32, k*n)
	dst := make([]float32, k*n)
	for range b.N {
		packBBlock(dst, false, src, n, 0, 0, k, n, 8, 16, nil, 0)
	}
	b.SetBytes(4 * k * n)
}

func TestTranspose8AVX2(t *testing.T) {
	if !detectCPU().avx2FMA {
		t.Skip("no AVX2")
	}
	const ss, ds = 13, 11
	src := make([]float32, 8*ss)
	for i := range src {
		src[i] = float32(i)
	}
	dst := make([]float32, 8*ds)
	for i := range dst {
		dst[i] = -1
	}
	transpose8AVX2(&dst[0], ds*4, &src[0], ss*4)
	for i := 0; i < 8; i++ {
		for j := 0; j < ds; j++ {
			want := float32(-1)
			if j < 8 {
				want = src[j*ss+i]
			}
			if dst[i*ds+j] != want {
				t.Fatalf("dst[%d][%d] = %v, want %v", i, j, dst[i*ds+j], want)
			}
		}
	}
}

// BenchmarkPackBT measures packing a transposed B block (256 steps of 384
// columns, B stored 384×256) into AVX2 panels.
func BenchmarkPackBT(b *testing.B) {
	const k, n = 256, 384
	src := make([]float32, k*n)
	dst := make([]float32, k*n)
	ks := availableKernels()[0]
	for range b.N {
		packBBlock(dst, true, src, k, 0, 0, k, n, 8, 16, ks.tr, ks.trN)
	}
	b.SetBytes(4 * k * n)
}

// BenchmarkKernelAVX2 measures the AVX2 full-tile micro-kernels alone,
// with their operands in cache: packed A and A read by rows.
func BenchmarkKernelAVX2(b *testing.B) {
	if !detectCPU().avx2FMA {
		b.Skip("no AVX2")
	}
	for _, rows := range []bool{false, true} {
		for _, kc := range []int{64, 128, 256} {
			b.Run(fmt.Sprintf("rows=%v/kc=%d", rows, kc), func(b *testing.B) {
				MR, NR := mrAVX2, 8*nvAVX2
				a := make([]float32, MR*kc)
				bb := make([]float32, NR*kc)
				c := make([]float32, MR*NR)
				kern, as := kernelAVX2.kern, MR
				if rows {
					kern, as = kernelAVX2.kernRows, kc
				}
				for i := 0; i < b.N; i++ {
					for r := 0; r < 10; r++ {
						kern(MR, nvAVX2, 8, kc, a, as, bb, NR, c, NR, 1, 1, nil)
					}
				}
				b.ReportMetric(2*float64(MR*NR)*float64(kc)*10*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "GFLOP/s")
			})
		}
	}
}
