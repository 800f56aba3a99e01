package simd

import "math"

// maxF32AVX2, expShiftSumF32AVX2, dotF32AVX2 and softmaxBwdF32AVX2 do n
// floats, n a multiple of 8, positive for the two that return an element
// or a sum of them (math_amd64.s).
//
//go:noescape
func maxF32AVX2(x *float32, n int) float32

//go:noescape
func expShiftSumF32AVX2(dst, x *float32, n int, m float32) float64

//go:noescape
func dotF32AVX2(a, b *float32, n int) float32

//go:noescape
func softmaxBwdF32AVX2(d, p *float32, n int, dot float32)

func softmaxF32(dst, x []float32) bool {
	if !hasFMA {
		return false
	}
	if len(x) == 0 {
		return true
	}
	m := maxF32(x)
	ScaleF32(dst, float32(1/expShiftSum(dst, x, m)))
	return true
}

func logSoftmaxF32(dst, x []float32) bool {
	if !hasFMA {
		return false
	}
	if len(x) == 0 {
		return true
	}
	m := maxF32(x)
	// The exponentials go through a scratch block, so that dst may be x.
	var buf [256]float32
	var sum float64
	for lo := 0; lo < len(x); lo += len(buf) {
		c := x[lo:min(len(x), lo+len(buf))]
		sum += expShiftSum(buf[:len(c)], c, m)
	}
	l := float32(math.Log(sum))
	for j, v := range x {
		dst[j] = (v - m) - l
	}
	return true
}

// maxF32 is the largest element of x (len(x) > 0); with a NaN in x, it
// may be NaN or not.
func maxF32(x []float32) float32 {
	k := len(x) &^ 7
	m := x[0]
	if k > 0 {
		m = maxF32AVX2(&x[0], k)
	}
	for _, v := range x[k:] {
		m = max(m, v)
	}
	return m
}

// expShiftSum sets dst = e^(x−m) and returns its sum in float64.
func expShiftSum(dst, x []float32, m float32) float64 {
	n := len(x)
	k := n &^ 7
	var sum float64
	if k > 0 {
		sum = expShiftSumF32AVX2(&dst[0], &x[0], k, m)
	}
	if k < n {
		// The last n-k (< 8) through the kernel by way of a padded block.
		var buf [8]float32
		t := buf[:n-k]
		for i, v := range x[k:] {
			t[i] = v - m
		}
		expF32AVX2(&buf[0], &buf[0], 8)
		for i, e := range t {
			dst[k+i] = e
			sum += float64(e)
		}
	}
	return sum
}

func softmaxBackwardF32(d, p []float32) bool {
	if !hasFMA {
		return false
	}
	n := len(d)
	k := n &^ 7
	var dot float32
	if k > 0 {
		dot = dotF32AVX2(&d[0], &p[0], k)
	}
	for i := k; i < n; i++ {
		dot += d[i] * p[i]
	}
	if k > 0 {
		softmaxBwdF32AVX2(&d[0], &p[0], k, dot)
	}
	for i := k; i < n; i++ {
		d[i] = p[i] * (d[i] - dot)
	}
	return true
}
