package simd

// convRowsF32 runs ConvRows's AVX2 kernel when n is a multiple of 16,
// reporting whether it did.
func convRowsF32(out []float32, ldo, ostep int, x []float32, xstep int, offs []int, w, bias []float32, r, n, blocks int) bool {
	if !hasFMA || n%16 != 0 || len(offs) == 0 {
		return false
	}
	b := &zeroBias[0]
	if bias != nil {
		b = &bias[0]
	}
	convRowsAVX2[r](&out[0], ldo*4, &x[0], &offs[0], &w[0], len(offs), n/16, b, blocks, (xstep-n)*4, (ostep-n)*4)
	return true
}

// zeroBias is the bias of a ConvRows without one.
var zeroBias [6]float32

// convDWF32 runs ConvDW's AVX2 kernel when n is a multiple of 8,
// reporting whether it did.
func convDWF32(dw []float32, ldw int, g []float32, ldg, gimg int, x []float32, ximg int, offs []int, ro, nimg, n int) bool {
	if !hasFMA || n%8 != 0 {
		return false
	}
	convDWAVX2[ro][len(offs)](&dw[0], ldw*4, &g[0], ldg*4, gimg*4, &x[0], ximg*4, &offs[0], nimg, n/8)
	return true
}

func maxPool2x2F32(out []float32, idx []int64, x []float32, rows, w, ow int) int {
	if !hasAVX2 || rows == 0 {
		return 0
	}
	maxPool2x2AVX2(&out[0], &idx[0], &x[0], rows, w, ow)
	return rows
}

// maxPool2x2BackF32 runs the AVX2 kernel on rows rows: ok false for an
// index outside its window, done false when it did nothing.
func maxPool2x2BackF32(dx, g []float32, idx []int64, rows, w, ow int) (ok, done bool) {
	if !hasAVX2 || rows == 0 {
		return true, false
	}
	return maxPool2x2BackAVX2(&dx[0], &g[0], &idx[0], rows, w, ow) == 1, true
}
