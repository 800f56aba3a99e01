package simd

import "math"

// AdamF32 applies Adam's update to w from the gradient g and the moments
// m and v (all at least as long as w), element by element, as
// torch.optim.Adam does without amsgrad:
//
//	m = m·b1 + (1−b1)·g
//	v = v·b2 + ((1−b2)·g)·g
//	w = w − (stepSize·m) / (√v / bc2sqrt + eps)
//
// each operation rounded to float32 on its own (no fused multiply-add), so
// the vector code and the scalar code give the same bits.
func AdamF32(w, g, m, v []float32, b1, b2, eps, bc2sqrt, stepSize float32) {
	g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
	n := 0
	if len(w) >= 8 {
		n = adamF32(w, g, m, v, b1, b2, eps, bc2sqrt, stepSize)
	}
	adamF32Go(w[n:], g[n:], m[n:], v[n:], b1, b2, eps, bc2sqrt, stepSize)
}

func adamF32Go(w, g, m, v []float32, b1, b2, eps, bc2sqrt, stepSize float32) {
	g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
	c1, c2 := 1-b1, 1-b2
	for i := range w {
		gi := g[i]
		mi := float32(m[i]*b1) + float32(c1*gi)
		vi := float32(v[i]*b2) + float32(float32(c2*gi)*gi)
		m[i], v[i] = mi, vi
		d := float32(float32(math.Sqrt(float64(vi)))/bc2sqrt) + eps
		w[i] -= float32(stepSize*mi) / d
	}
}
