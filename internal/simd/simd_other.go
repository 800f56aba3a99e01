//go:build !amd64

package simd

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

var forceGo bool

func lstmCellF32(c, f, cp, i, g []float32) int { return 0 }

func mulF32(dst, a, b []float32) int { return 0 }

func mulAddF32(dst, a, b []float32) int { return 0 }

func gruOutF32(h, n, z, hp []float32) int { return 0 }

func lstmCellBackwardF32(dh, gy, dc, i, f, g, o, tc, cp, di, df, dg, do []float32) int { return 0 }

func gruCellBackwardF32(dh, gy, r, z, n, hn, hp, dr, dz, dn, dhn []float32) int { return 0 }
