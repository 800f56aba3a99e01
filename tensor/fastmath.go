package tensor

import "math"

// Float32 kernels of exp, erf and tanh for the float32 paths of the activations
// and softmax: the float64 library functions they replace cost 20-30 ns an
// element, most of a transformer's GELU. Both are accurate to a few units
// in the last place of a float32 (erf32 within 5e-7 absolute; checked against math.Exp and math.Erf
// over a dense grid in fastmath_test.go). The float64 paths keep the
// library functions, so gradient checks see exact values.

// exp32 returns e^x, as Cephes' expf: x = n·ln2 + r with |r| ≤ ln2/2, a
// degree-6 polynomial for e^r, and 2^n from the exponent bits. It is 0 for
// x < -87.33 (below the smallest normal float32) and +Inf above 88.72.
func exp32(x float32) float32 {
	switch {
	case x > 88.72283:
		return float32(math.Inf(1))
	case x < -87.33654:
		return 0
	case x != x:
		return x
	}
	fx := x*1.44269504088896341 + 0.5
	n := float32(int32(fx)) // floor(fx): truncation, one less below zero
	if n > fx {
		n--
	}
	r := x - n*0.693359375 - n*-2.12194440e-4
	z := r * r
	p := ((((1.9875691500e-4*r+1.3981999507e-3)*r+8.3334519073e-3)*r+4.1665795894e-2)*r+1.6666665459e-1)*r + 5.0000001201e-1
	y := p*z + r + 1
	if n > 127 { // x in (88.376, 88.723]: 2^n is no float32, 2·2^(n-1) is
		return 2 * y * math.Float32frombits(uint32(int32(n)+126)<<23)
	}
	return y * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// erf32 returns erf(x) by the rational approximation of Eigen's
// generic_fast_erf_float (x·P(x²)/Q(x²) on [-4, 4], ±1 beyond, where
// |1 - erf(x)| is below float32's resolution), within 5e-7 of erf.
func erf32(x float32) float32 {
	if x != x {
		return x
	}
	x = min(max(x, -4), 4)
	x2 := x * x
	p := float32(-2.72614225801306e-10)
	p = p*x2 + 2.77068142495902e-08
	p = p*x2 - 2.10102402082508e-06
	p = p*x2 - 5.69250639462346e-05
	p = p*x2 - 7.34990630326855e-04
	p = p*x2 - 2.95459980854025e-03
	p = p*x2 - 1.60960333262415e-02
	q := float32(-1.45660718464996e-05)
	q = q*x2 - 2.13374055278905e-04
	q = q*x2 - 1.68282697438203e-03
	q = q*x2 - 7.37332916720468e-03
	q = q*x2 - 1.42647390514189e-02
	return x * p / q
}

// tanh32 returns tanh(x) as an odd rational function x·P(x²)/Q(x²) of
// degrees 13 and 6 (the minimax fit of Eigen, XLA and MLAS), x clamped to
// ±7.905 (the fit's range), and ±1 exactly from |x| = 9 on, where tanh
// rounds to ±1 in float32. internal/simd's TanhF32 is the same function
// eight at a time in float32 arithmetic with fused multiply-adds (within 5
// ulp of tanh); this scalar form, for the elements left over and machines
// without AVX2, evaluates it in float64 (within 4 ulp).
func tanh32(x float32) float32 {
	switch {
	case x != x:
		return x
	case x >= 9:
		return 1
	case x <= -9:
		return -1
	}
	v := float64(min(max(x, -7.90531110763549805), 7.90531110763549805))
	v2 := v * v
	p := -2.76076847742355e-16
	p = p*v2 + 2.00018790482477e-13
	p = p*v2 - 8.60467152213735e-11
	p = p*v2 + 5.12229709037114e-08
	p = p*v2 + 1.48572235717979e-05
	p = p*v2 + 6.37261928875436e-04
	p = p*v2 + 4.89352455891786e-03
	q := 1.19825839466702e-06
	q = q*v2 + 1.18534705686654e-04
	q = q*v2 + 2.26843463243900e-03
	q = q*v2 + 4.89352518554385e-03
	return float32(v * p / q)
}
