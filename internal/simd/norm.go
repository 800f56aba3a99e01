package simd

// LayerNormF32 normalises one row x of a LayerNorm: with μ its mean and
// σ² its biased variance (both in float32, σ² from the deviations), is =
// 1/√(σ²+eps) (in float64, then rounded), xhat = (x−μ)·is and y =
// xhat·w + b. It returns is, and false, writing nothing, where there is
// no vector kernel (no AVX2 and FMA). All slices are len(x) long or more;
// len(x) > 0.
func LayerNormF32(y, xhat, x, w, b []float32, eps float64) (is float32, ok bool) {
	return layerNormF32(y, xhat, x, w, b, eps)
}

// LayerNormBackwardF32 is LayerNormF32's backward pass for one row, given
// its output gradient g, its xhat and is: with dh = g·w,
// dx = is/d·(d·dh − Σ dh − xhat·Σ dh·xhat), d = len(g); it adds g·xhat
// into dw and g into db. It reports false, writing nothing, where there
// is no vector kernel.
func LayerNormBackwardF32(dx, dw, db, g, xhat, w []float32, is float32) bool {
	return layerNormBackwardF32(dx, dw, db, g, xhat, w, is)
}
