//go:build amd64

package gogemm

import (
	"os"

	"github.com/godist/godist/internal/cpuid"
)

// asmKernel is the signature of the generated micro-kernels (see
// gen_kernels.go). Strides and ldc are in bytes.
type asmKernel func(k int, a *float32, as int, b *float32, bs int, c *float32, ldc int, alpha, beta float32, rem int, bias *float32)

type cpuFeatures struct {
	avx2FMA bool // AVX, AVX2 and FMA usable (CPU and OS)
	avx512  bool // AVX-512F usable (CPU and OS)
}

func detectCPU() cpuFeatures {
	var f cpuFeatures
	maxID, _, _, _ := cpuid.CPUID(0, 0)
	if maxID < 7 {
		return f
	}
	_, _, ecx1, _ := cpuid.CPUID(1, 0)
	_, ebx7, _, _ := cpuid.CPUID(7, 0)
	const (
		fma     = 1 << 12
		osxsave = 1 << 27
		avx     = 1 << 28
	)
	if ecx1&osxsave == 0 || ecx1&avx == 0 || ecx1&fma == 0 {
		return f
	}
	xcr0, _ := cpuid.XGETBV()
	if xcr0&0x6 != 0x6 { // SSE and AVX state
		return f
	}
	if ebx7&(1<<5) == 0 { // AVX2
		return f
	}
	f.avx2FMA = true
	if ebx7&(1<<16) != 0 && xcr0&0xe0 == 0xe0 { // AVX-512F; opmask, ZMM_Hi256, Hi16_ZMM state
		f.avx512 = true
	}
	return f
}

var kernelAVX512 = &kernelSet{
	name:    "go-asm-avx512",
	mr:      mrAVX512,
	w:       16,
	nv:      nvAVX512,
	maskedB: true,
	kc:      256,
	mc:      mrAVX512 * 40,
	nc:      16 * nvAVX512 * 64,
	kern: func(mr, nv, rem, k int, a []float32, as int, b []float32, bs int, c []float32, ldc int, alpha, beta float32, bias []float32) {
		sgemmKernelsAVX512[mr-1][nv-1](k, &a[0], as*4, &b[0], bs*4, &c[0], ldc*4, alpha, beta, rem, biasPtr(bias))
	},
	kernRows: func(mr, nv, rem, k int, a []float32, as int, b []float32, bs int, c []float32, ldc int, alpha, beta float32, bias []float32) {
		sgemmKernelsAVX512R[mr-1][nv-1](k, &a[0], as*4, &b[0], bs*4, &c[0], ldc*4, alpha, beta, rem, biasPtr(bias))
	},
	// Reading A in place measured faster than packing it at every width
	// tried, up to 1024³ (BenchmarkRowsA, Zen 5: 230 against 218 GFLOP/s
	// there, 245 against 115 for one head's P·V).
	rowsMaxN: 1 << 30,
	tr: func(dst []float32, ds int, src []float32, ss int) {
		_ = dst[15*ds+15]
		_ = src[15*ss+15]
		transpose16AVX512(&dst[0], ds*4, &src[0], ss*4)
	},
	trN: 16,
}

var kernelAVX2 = &kernelSet{
	name:    "go-asm-avx2",
	mr:      mrAVX2,
	w:       8,
	nv:      nvAVX2,
	maskedB: false,
	kc:      256,
	mc:      mrAVX2 * 40,
	nc:      8 * nvAVX2 * 256,
	kern: func(mr, nv, rem, k int, a []float32, as int, b []float32, bs int, c []float32, ldc int, alpha, beta float32, bias []float32) {
		sgemmKernelsAVX2[mr-1][nv-1](k, &a[0], as*4, &b[0], bs*4, &c[0], ldc*4, alpha, beta, rem, biasPtr(bias))
	},
	kernRows: func(mr, nv, rem, k int, a []float32, as int, b []float32, bs int, c []float32, ldc int, alpha, beta float32, bias []float32) {
		sgemmKernelsAVX2R[mr-1][nv-1](k, &a[0], as*4, &b[0], bs*4, &c[0], ldc*4, alpha, beta, rem, biasPtr(bias))
	},
	// At n = 512 packed and in place measured level (AVX2 machine,
	// 2026-11-25).
	rowsMaxN: 384,
	tr: func(dst []float32, ds int, src []float32, ss int) {
		_ = dst[7*ds+7]
		_ = src[7*ss+7]
		transpose8AVX2(&dst[0], ds*4, &src[0], ss*4)
	},
	trN: 8,
}

// biasPtr is the kernels' bias argument: nil, or the first of the tile's
// bias floats.
func biasPtr(bias []float32) *float32 {
	if bias == nil {
		return nil
	}
	return &bias[0]
}

// isaCap is GODIST_BLAS_ISA, a debugging override read once, when the
// process starts: "avx2" or "generic" caps the kernels availableKernels
// offers (to compare them, or to rule one out when a result looks wrong).
// It stays a variable rather than an option because the choice is
// process-wide and made at init (blas.PureGo, blas.Default), before any
// caller could pass one; nothing else in the library reads it.
var isaCap = os.Getenv("GODIST_BLAS_ISA")

// availableKernels lists the kernel sets this CPU can run, best first,
// capped by isaCap.
func availableKernels() []*kernelSet {
	f := detectCPU()
	var ks []*kernelSet
	switch isaCap {
	case "generic":
		f = cpuFeatures{}
	case "avx2":
		f.avx512 = false
	}
	if f.avx512 {
		ks = append(ks, kernelAVX512)
	}
	if f.avx2FMA {
		ks = append(ks, kernelAVX2)
	}
	return append(ks, kernelGeneric)
}
