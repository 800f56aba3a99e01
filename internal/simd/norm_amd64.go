package simd

import "math"

// The kernels of norm_amd64.s do n floats, n a multiple of 8.

//go:noescape
func lnSumF32AVX2(x *float32, n int) float32

//go:noescape
func lnSqDevF32AVX2(x *float32, n int, mu float32) float32

//go:noescape
func lnNormF32AVX2(y, h, x, w, b *float32, n int, mu, is float32)

//go:noescape
func lnBackSumsF32AVX2(grad, h, w, dw, db *float32, n int) (s1, s2 float32)

//go:noescape
func lnBackDxF32AVX2(out, grad, h, w *float32, n int, a, fd, s1, s2 float32)

func layerNormF32(y, xhat, x, w, b []float32, eps float64) (float32, bool) {
	if !hasFMA {
		return 0, false
	}
	d := len(x)
	y, xhat, w, b = y[:d], xhat[:d], w[:d], b[:d]
	k := d &^ 7
	var s float32
	if k > 0 {
		s = lnSumF32AVX2(&x[0], k)
	}
	for _, v := range x[k:] {
		s += v
	}
	mu := s / float32(d)
	var q float32
	if k > 0 {
		q = lnSqDevF32AVX2(&x[0], k, mu)
	}
	for _, v := range x[k:] {
		q += (v - mu) * (v - mu)
	}
	is := float32(1 / math.Sqrt(float64(q)/float64(d)+eps))
	if k > 0 {
		lnNormF32AVX2(&y[0], &xhat[0], &x[0], &w[0], &b[0], k, mu, is)
	}
	for j := k; j < d; j++ {
		h := (x[j] - mu) * is
		xhat[j] = h
		y[j] = h*w[j] + b[j]
	}
	return is, true
}

func layerNormBackwardF32(dx, dw, db, g, xhat, w []float32, is float32) bool {
	if !hasFMA {
		return false
	}
	d := len(g)
	dx, dw, db, xhat, w = dx[:d], dw[:d], db[:d], xhat[:d], w[:d]
	k := d &^ 7
	var s1, s2 float32
	if k > 0 {
		s1, s2 = lnBackSumsF32AVX2(&g[0], &xhat[0], &w[0], &dw[0], &db[0], k)
	}
	for j := k; j < d; j++ {
		dh := g[j] * w[j]
		s1 += dh
		s2 += dh * xhat[j]
		dw[j] += g[j] * xhat[j]
		db[j] += g[j]
	}
	fd := float32(d)
	a := is / fd
	if k > 0 {
		lnBackDxF32AVX2(&dx[0], &g[0], &xhat[0], &w[0], k, a, fd, s1, s2)
	}
	for j := k; j < d; j++ {
		dx[j] = a * (fd*g[j]*w[j] - s1 - xhat[j]*s2)
	}
	return true
}
