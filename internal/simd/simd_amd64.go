package simd

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

var hasAVX2 = cpu.X86.HasAVX2

// addF32AVX2 adds n floats, n a multiple of 32.
//
//go:noescape
func addF32AVX2(dst, src *float32, n int)

// addF32 adds the longest prefix it can vectorise and returns its length.
func addF32(dst, src []float32) int {
	if !hasAVX2 {
		return addF32Go(dst, src)
	}
	n := len(dst) &^ 31
	addF32AVX2(&dst[0], &src[0], n)
	return n
}

// sgdMomentumF32AVX2 updates n floats, n a multiple of 16.
//
//go:noescape
func sgdMomentumF32AVX2(w, grad, buf *float32, n int, lr, momentum float32)

// sgdMomentumF32 updates the longest prefix it can vectorise and returns
// its length.
func sgdMomentumF32(w, g, buf []float32, lr, momentum float32) int {
	if !hasAVX2 {
		return 0
	}
	n := len(w) &^ 15
	sgdMomentumF32AVX2(&w[0], &g[0], &buf[0], n, lr, momentum)
	return n
}

// scaleF32AVX2 scales n floats, n a multiple of 32.
//
//go:noescape
func scaleF32AVX2(v *float32, n int, s float32)

// scaleF32 scales the longest prefix it can vectorise and returns its
// length.
func scaleF32(v []float32, s float32) int {
	if !hasAVX2 {
		return 0
	}
	n := len(v) &^ 31
	scaleF32AVX2(&v[0], n, s)
	return n
}

// addScaleF32AVX2 sets dst = (dst+src)*s for n floats, n a multiple of 32.
//
//go:noescape
func addScaleF32AVX2(dst, src *float32, n int, s float32)

// addScaleF32 does the longest prefix it can vectorise and returns its
// length.
func addScaleF32(dst, src []float32, s float32) int {
	if !hasAVX2 {
		return 0
	}
	n := len(dst) &^ 31
	addScaleF32AVX2(&dst[0], &src[0], n, s)
	return n
}

// copyNT copies n bytes, n a multiple of 128, dst 32-byte aligned, with
// non-temporal stores.
//
//go:noescape
func copyNT(dst, src *byte, n int)

// copyStreaming copies what it can with non-temporal stores: from the
// first 32-byte aligned byte of dst, a multiple of 128 bytes. It returns
// where that part starts and ends.
func copyStreaming(dst, src []byte) (int, int) {
	if !hasAVX2 || len(dst) < 256 {
		return 0, 0
	}
	lo := int(-uintptr(unsafe.Pointer(&dst[0])) & 31)
	n := (len(dst) - lo) &^ 127
	copyNT(&dst[lo], &src[lo], n)
	return lo, lo + n
}

var hasFMA = hasAVX2 && cpu.X86.HasFMA

// expF32AVX2, geluF32AVX2 and geluBackwardF32AVX2 do n floats, n a
// multiple of 8 (math_amd64.s).
//
//go:noescape
func expF32AVX2(dst, x *float32, n int)

//go:noescape
func geluF32AVX2(dst, x *float32, n int)

//go:noescape
func geluBackwardF32AVX2(dst, grad, x *float32, n int)

func expF32(dst, x []float32) int {
	n := len(dst) &^ 7
	if !hasFMA || n == 0 {
		return 0
	}
	expF32AVX2(&dst[0], &x[0], n)
	return n
}

// geluF32AVX512 and geluBackwardF32AVX512 are the AVX2 kernels sixteen
// floats at a time (n a multiple of 16), with the same operations lane
// for lane, so the same bits.
//
//go:noescape
func geluF32AVX512(dst, x *float32, n int)

//go:noescape
func geluBackwardF32AVX512(dst, grad, x *float32, n int)

var hasAVX512 = hasFMA && cpu.X86.HasAVX512F

func geluF32(dst, x []float32) int {
	n := len(dst) &^ 7
	if !hasFMA || n == 0 {
		return 0
	}
	k := 0
	if hasAVX512 {
		k = n &^ 15
		if k > 0 {
			geluF32AVX512(&dst[0], &x[0], k)
		}
	}
	if k < n {
		geluF32AVX2(&dst[k], &x[k], n-k)
	}
	return n
}

func geluBackwardF32(dst, g, x []float32) int {
	n := len(dst) &^ 7
	if !hasFMA || n == 0 {
		return 0
	}
	k := 0
	if hasAVX512 {
		k = n &^ 15
		if k > 0 {
			geluBackwardF32AVX512(&dst[0], &g[0], &x[0], k)
		}
	}
	if k < n {
		geluBackwardF32AVX2(&dst[k], &g[k], &x[k], n-k)
	}
	return n
}

// sigmoidF32AVX2 and tanhF32AVX2 do n floats, n a multiple of 8
// (math_amd64.s).
//
//go:noescape
func sigmoidF32AVX2(dst, x *float32, n int)

//go:noescape
func tanhF32AVX2(dst, x *float32, n int)

func sigmoidF32(dst, x []float32) int {
	n := len(dst) &^ 7
	if !hasFMA || n == 0 {
		return 0
	}
	sigmoidF32AVX2(&dst[0], &x[0], n)
	return n
}

func tanhF32(dst, x []float32) int {
	n := len(dst) &^ 7
	if !hasFMA || n == 0 {
		return 0
	}
	tanhF32AVX2(&dst[0], &x[0], n)
	return n
}

// reluF32AVX2 and reluBackwardF32AVX2 do n floats, n a multiple of 32
// (simd_amd64.s).
//
//go:noescape
func reluF32AVX2(dst, x *float32, n int)

//go:noescape
func reluBackwardF32AVX2(dst, grad, y *float32, n int)

func reluF32(dst, x []float32) int {
	n := len(dst) &^ 31
	if !hasAVX2 || n == 0 {
		return 0
	}
	reluF32AVX2(&dst[0], &x[0], n)
	return n
}

func reluBackwardF32(dst, g, y []float32) int {
	n := len(dst) &^ 31
	if !hasAVX2 || n == 0 {
		return 0
	}
	reluBackwardF32AVX2(&dst[0], &g[0], &y[0], n)
	return n
}

// copyRowsF32AVX2 copies rows of w ≥ 8 floats (simd_amd64.s); strides in
// bytes.
//
//go:noescape
func copyRowsF32AVX2(dst *float32, ldd int, src *float32, lds int, rows, w int)

func copyRowsF32(dst []float32, ldd int, src []float32, lds int, rows, w int) bool {
	if !hasAVX2 || w < 8 {
		return false
	}
	copyRowsF32AVX2(&dst[0], ldd*4, &src[0], lds*4, rows, w)
	return true
}

// sumF32AVX2 sums n floats, n a multiple of 16, in float64
// (simd_amd64.s).
//
//go:noescape
func sumF32AVX2(x *float32, n int) float64

func sumF32(x []float32) (float64, int) {
	n := len(x) &^ 15
	if !hasAVX2 || n == 0 {
		return 0, 0
	}
	return sumF32AVX2(&x[0], n), n
}
