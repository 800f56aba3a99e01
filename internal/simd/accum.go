package simd

// AccumF64 sets acc[i] += float64(x[i]) for i < len(acc); x must be at
// least as long as acc. Each element is one float64 addition, in the
// same order as the scalar loop, so the result is the same to the bit:
// column sums (a bias's gradient) accumulate rows this way.
func AccumF64(acc []float64, x []float32) {
	x = x[:len(acc)]
	n := 0
	if len(acc) >= 16 {
		n = accumF64(acc, x)
	}
	for i := n; i < len(acc); i++ {
		acc[i] += float64(x[i])
	}
}
