package simd

// SoftmaxF32 sets dst to the softmax of x, computed stably: e^(x−max)
// over their sum, the exponentials by ExpF32's kernel (1 ulp) and their
// sum in float64 (partial sums, so not the scalar loop's order). dst and
// x must be the same length and may be the same slice. It reports false,
// leaving dst as it was, where there is no vector kernel (no AVX2 and
// FMA); the caller then computes it its own way. A NaN in x makes every
// element NaN, as +Inf does (∞−∞), as the scalar formula does.
func SoftmaxF32(dst, x []float32) bool { return softmaxF32(dst, x[:len(dst)]) }

// SoftmaxBackwardF32 sets d[i] = p[i]·(d[i] − Σⱼ d[j]·p[j]), in place: the
// gradient of softmax's input, for its output p and the gradient d of that
// output. The sum is in float32 partial sums. It reports false, leaving d
// as it was, where there is no vector kernel. p must be at least as long
// as d.
func SoftmaxBackwardF32(d, p []float32) bool { return softmaxBackwardF32(d, p[:len(d)]) }

// LogSoftmaxF32 sets dst to the log-softmax of x: (x − max) − log Σ
// e^(x−max), the sum as SoftmaxF32 takes it. dst and x must be the same
// length and may be the same slice. It reports false, leaving dst as it
// was, where there is no vector kernel.
func LogSoftmaxF32(dst, x []float32) bool { return logSoftmaxF32(dst, x[:len(dst)]) }
