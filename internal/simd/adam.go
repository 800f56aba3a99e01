package simd

import "math"

// Adam is the coefficients of one Adam update, each rounded to float32
// from its float64 value as PyTorch rounds a Python float scalar:
// OneMinusBeta1 and OneMinusBeta2 are 1−β computed in float64 (not 1
// minus the float32 β: for β₂ = 0.999 that is 0.00099998713, and every
// update came out 6.5e-6 too large), BC2Sqrt is √(1−β₂ᵗ), StepSize is
// lr/(1−β₁ᵗ), and WeightDecay is the L2 term added to the gradient (zero
// for AdamW, whose decay is applied to the parameters beforehand).
type Adam struct {
	Beta1, OneMinusBeta1, Beta2, OneMinusBeta2 float32
	Eps, BC2Sqrt, StepSize, WeightDecay        float32
}

// AdamF32 applies Adam's update to w from the gradient g, the moments m
// and v and, for AMSGrad, the running maximum vmax (nil without it), all
// at least as long as w, element by element as torch.optim.Adam does on
// a CPU with FMA (PyTorch 1.13, foreach=False):
//
//	g' = fma(w, wd, g)                  grad.add(param, alpha=wd)
//	m  = fma(g', c1, m·b1)              exp_avg.mul_(b1).add_(g', alpha=c1)
//	v  = fma(c2·g', g', v·b2)           exp_avg_sq.mul_(b2).addcmul_(g', g', value=c2)
//	s  = max(vmax, v) (AMSGrad) or v
//	w  = w − (stepSize·m) / (√s / bc2sqrt + eps)
//
// each multiply-add rounded once and every other operation on its own, so
// the vector code, the scalar code and PyTorch give the same bits.
func AdamF32(w, g, m, v, vmax []float32, c Adam) {
	g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
	if vmax != nil {
		vmax = vmax[:len(w)]
	}
	n := 0
	if len(w) >= 8 {
		n = adamF32(w, g, m, v, vmax, &c)
	}
	var vm []float32
	if vmax != nil {
		vm = vmax[n:]
	}
	adamF32Go(w[n:], g[n:], m[n:], v[n:], vm, &c)
}

func adamF32Go(w, g, m, v, vmax []float32, c *Adam) {
	g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
	for i := range w {
		wi := w[i]
		gi := FMA32(wi, c.WeightDecay, g[i])
		mi := FMA32(gi, c.OneMinusBeta1, float32(m[i]*c.Beta1))
		vi := FMA32(float32(c.OneMinusBeta2*gi), gi, float32(v[i]*c.Beta2))
		m[i], v[i] = mi, vi
		s := vi
		if vmax != nil {
			// As VMAXPS: vmax unless v is larger or either is NaN.
			if vmax[i] > vi {
				s = vmax[i]
			}
			vmax[i] = s
		}
		d := float32(float32(math.Sqrt(float64(s)))/c.BC2Sqrt) + c.Eps
		w[i] = wi - float32(c.StepSize*mi)/d
	}
}

// FMA32 returns x·y+z rounded once to float32, as the FMA instruction
// does. x·y is exact in float64; the float64 sum is rounded to odd (its
// last bit set when it is inexact), which makes the second rounding, to
// float32, give the correctly rounded result.
func FMA32(x, y, z float32) float32 {
	p, q := float64(x)*float64(y), float64(z)
	s := p + q
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	// TwoSum: the sum's rounding error, exactly.
	pp := s - q
	err := (p - pp) + (q - (s - pp))
	if err != 0 && math.Float64bits(s)&1 == 0 {
		s = math.Nextafter(s, math.Inf(int(math.Float64bits(err)>>63)*-2+1))
	}
	return float32(s)
}
