// Package simd holds the few vector kernels on hot paths that are not
// GEMMs (the reduction of received chunks, the SGD and Adam updates;
// direct convolution, 2×2 max pooling, ReLU, exp, GELU, the recurrent
// cells, softmax and LayerNorm for the local core), with portable Go
// fallbacks that round exactly as the vector code does, but for the
// convolutions' and SumF32's sums, which say that their order is theirs.
// The row kernels of softmax and LayerNorm (SoftmaxF32, LogSoftmaxF32,
// SoftmaxBackwardF32, LayerNormF32, LayerNormBackwardF32) have no
// fallback: they report false, and the caller keeps its own loop. GELU
// runs sixteen lanes at a time where the CPU has AVX-512, with the AVX2
// kernel's operations lane for lane, so the same bits.
package simd

// AddF32 sets dst[i] += src[i] for i < len(dst); src must be at least as
// long as dst.
func AddF32(dst, src []float32) {
	src = src[:len(dst)]
	n := 0
	if len(dst) >= 32 {
		n = addF32(dst, src)
	}
	for i := n; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

func addF32Go(dst, src []float32) int {
	src = src[:len(dst)]
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		d, s := dst[i:i+8:i+8], src[i:i+8:i+8]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
		d[4] += s[4]
		d[5] += s[5]
		d[6] += s[6]
		d[7] += s[7]
	}
	return i
}

// SGDMomentumF32 applies SGD with momentum (no dampening, weight decay or
// Nesterov), as PyTorch's torch.optim.SGD does for each element i:
// buf[i] = momentum*buf[i] + g[i], then w[i] -= lr*buf[i], each operation
// rounded to float32 on its own (no fused multiply-add), so the vector and
// the scalar code give the same bits. g and buf must be at least as long
// as w.
func SGDMomentumF32(w, g, buf []float32, lr, momentum float32) {
	g, buf = g[:len(w)], buf[:len(w)]
	n := 0
	if len(w) >= 16 {
		n = sgdMomentumF32(w, g, buf, lr, momentum)
	}
	sgdMomentumF32Go(w[n:], g[n:], buf[n:], lr, momentum)
}

func sgdMomentumF32Go(w, g, buf []float32, lr, momentum float32) {
	g, buf = g[:len(w)], buf[:len(w)]
	for i := range w {
		b := float32(momentum*buf[i]) + g[i]
		buf[i] = b
		w[i] -= float32(lr * b)
	}
}

// AddScaleF32 sets dst[i] = (dst[i] + src[i]) * s, rounding the sum
// before the product (so the result is bit for bit AddF32 then ScaleF32).
func AddScaleF32(dst, src []float32, s float32) {
	src = src[:len(dst)]
	n := 0
	if len(dst) >= 32 {
		n = addScaleF32(dst, src, s)
	}
	for i := n; i < len(dst); i++ {
		dst[i] = float32(dst[i]+src[i]) * s
	}
}

// ScaleF32 sets v[i] *= s.
func ScaleF32(v []float32, s float32) {
	n := 0
	if len(v) >= 32 {
		n = scaleF32(v, s)
	}
	for i := n; i < len(v); i++ {
		v[i] *= s
	}
}

// CopyStreaming copies src into dst (len(dst) bytes) like the built-in
// copy, but with non-temporal stores: the bytes go to memory, and no
// cache (this CPU's or another's) keeps the destination's lines. Why: a
// rank that writes its result into a peer's memory this way leaves no
// copy of those lines in its own cache, so the peer's next writes to them
// need not take them back from this CPU first (on a VM whose CPUs sit far
// apart, a round trip of ~330 ns per line). dst and src must not overlap;
// the stores are fenced before it returns.
func CopyStreaming(dst, src []byte) {
	src = src[:len(dst)]
	lo, hi := copyStreaming(dst, src)
	copy(dst[:lo], src[:lo])
	copy(dst[hi:], src[hi:])
}

// ExpF32 sets dst[i] = e^x[i] for the longest prefix it can vectorise (a
// multiple of 8, with AVX2 and FMA) and returns its length; the caller
// does the rest. x must be at least as long as dst. Accurate to 1 ulp
// (Cephes' expf) on [-87.34, 88.38], the range it clamps x to.
func ExpF32(dst, x []float32) int { return expF32(dst, x[:len(dst)]) }

// GeluF32 sets dst[i] = x[i]·Φ(x[i]) (the exact GELU, erf within 5e-7)
// for the longest prefix it can vectorise and returns its length.
func GeluF32(dst, x []float32) int { return geluF32(dst, x[:len(dst)]) }

// GeluBackwardF32 sets dst[i] = g[i]·(Φ(x[i]) + x[i]·φ(x[i])), GELU's
// gradient, for the longest prefix it can vectorise and returns its
// length.
func GeluBackwardF32(dst, g, x []float32) int {
	return geluBackwardF32(dst, g[:len(dst)], x[:len(dst)])
}

// SigmoidF32 sets dst[i] = 1/(1+e^-x[i]) for the longest prefix it can
// vectorise (a multiple of 8, with AVX2 and FMA) and returns its length;
// the caller does the rest. x must be at least as long as dst. e^-x is
// ExpF32's (1 ulp, -x clamped to [-87.34, 88.38]), so the result is within
// a few ulp of sigmoid for x ≥ -87.34, and below -88.38 stays at
// sigmoid(-88.38) ≈ 4e-39 (the true value is smaller still).
func SigmoidF32(dst, x []float32) int { return sigmoidF32(dst, x[:len(dst)]) }

// TanhF32 sets dst[i] = tanh(x[i]) for the longest prefix it can vectorise
// and returns its length: an odd rational function of degrees 13 and 6, x
// clamped to ±7.905 (where tanh rounds to ±1), within 5 ulp of tanh.
// tensor's tanh32 is the same formula in scalar code.
func TanhF32(dst, x []float32) int { return tanhF32(dst, x[:len(dst)]) }

// ReLUF32 sets dst[i] = max(x[i], 0) with Go's max (a NaN stays NaN, -0
// becomes +0) for the longest prefix it can vectorise (a multiple of 32,
// with AVX2) and returns its length; the caller does the rest. x must be
// at least as long as dst.
func ReLUF32(dst, x []float32) int { return reluF32(dst, x[:len(dst)]) }

// ReLUBackwardF32 sets dst[i] = g[i] where y[i], a ReLU output, is not
// ±0 (so positive or NaN), else +0, for the longest prefix it can
// vectorise and returns its length.
func ReLUBackwardF32(dst, g, y []float32) int {
	return reluBackwardF32(dst, g[:len(dst)], y[:len(dst)])
}

// SumF32 returns the sum, in float64, of the longest prefix of x it can
// vectorise (a multiple of 16, with AVX2), and that prefix's length; the
// caller adds the rest. Each element is exact in float64 and the partial
// sums are float64 (sixteen of them, added pairwise at the end), so the
// order of the additions barely shows; it is not the scalar loop's.
func SumF32(x []float32) (float64, int) { return sumF32(x) }
