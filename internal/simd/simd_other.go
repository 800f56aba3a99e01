//go:build !amd64

package simd

// hasAVX2, hasFMA and hasAVX512 are false: there are no vector kernels here (the
// tests read them).
var hasAVX2, hasFMA, hasAVX512 bool

func addF32(dst, src []float32) int { return addF32Go(dst, src) }

func sgdMomentumF32(w, g, buf []float32, lr, momentum float32) int { return 0 }

func scaleF32(v []float32, s float32) int { return 0 }

func addScaleF32(dst, src []float32, s float32) int { return 0 }

func copyStreaming(dst, src []byte) (int, int) { return 0, 0 }

func expF32(dst, x []float32) int { return 0 }

func geluF32(dst, x []float32) int { return 0 }

func geluBackwardF32(dst, g, x []float32) int { return 0 }

func sigmoidF32(dst, x []float32) int { return 0 }

func tanhF32(dst, x []float32) int { return 0 }

func convRowsF32(out []float32, ldo, ostep int, x []float32, xstep int, offs []int, w, bias []float32, r, n, blocks int) bool {
	return false
}

func convDWF32(dw []float32, ldw int, g []float32, ldg, gimg int, x []float32, ximg int, offs []int, ro, nimg, n int) bool {
	return false
}

func maxPool2x2F32(out []float32, idx []int64, x []float32, rows, w, ow int) int { return 0 }

func reluF32(dst, x []float32) int { return 0 }

func reluBackwardF32(dst, g, y []float32) int { return 0 }

func maxPool2x2BackF32(dx, g []float32, idx []int64, rows, w, ow int) (ok, done bool) {
	return true, false
}

func copyRowsF32(dst []float32, ldd int, src []float32, lds int, rows, w int) bool { return false }

func sumF32(x []float32) (float64, int) { return 0, 0 }

var forceGo bool

func lstmCellF32(c, f, cp, i, g []float32) int { return 0 }

func mulF32(dst, a, b []float32) int { return 0 }

func mulAddF32(dst, a, b []float32) int { return 0 }

func gruOutF32(h, n, z, hp []float32) int { return 0 }

func lstmCellBackwardF32(dh, gy, dc, i, f, g, o, tc, cp, di, df, dg, do []float32) int { return 0 }

func gruCellBackwardF32(dh, gy, r, z, n, hn, hp, dr, dz, dn, dhn []float32) int { return 0 }

func softmaxF32(dst, x []float32) bool { return false }

func softmaxBackwardF32(d, p []float32) bool { return false }

func logSoftmaxF32(dst, x []float32) bool { return false }

func layerNormF32(y, xhat, x, w, b []float32, eps float64) (float32, bool) { return 0, false }

func layerNormBackwardF32(dx, dw, db, g, xhat, w []float32, is float32) bool { return false }
