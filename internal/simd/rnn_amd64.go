package simd

// The AVX2 kernels of rnn_amd64.s (gen_rnn.py): p holds the addresses of
// the slices' first elements, n is a multiple of 8.

//go:noescape
func lstmCellF32AVX2(p *[5]*float32, n int)

//go:noescape
func mulF32AVX2(p *[3]*float32, n int)

//go:noescape
func mulAddF32AVX2(p *[3]*float32, n int)

//go:noescape
func gruOutF32AVX2(p *[4]*float32, n int)

//go:noescape
func lstmCellBackwardF32AVX2(p *[13]*float32, n int)

//go:noescape
func gruCellBackwardF32AVX2(p *[11]*float32, n int)

// Each returns the length of the prefix it did: the longest multiple of 8,
// or 0 without AVX2 (forceGo set by the tests, or the CPU's).

var forceGo bool

func vec(n int) int {
	if !hasAVX2 || forceGo {
		return 0
	}
	return n &^ 7
}

func lstmCellF32(c, f, cp, i, g []float32) int {
	n := vec(len(c))
	if n > 0 {
		lstmCellF32AVX2(&[5]*float32{&c[0], &f[0], &cp[0], &i[0], &g[0]}, n)
	}
	return n
}

func mulF32(dst, a, b []float32) int {
	n := vec(len(dst))
	if n > 0 {
		mulF32AVX2(&[3]*float32{&dst[0], &a[0], &b[0]}, n)
	}
	return n
}

func mulAddF32(dst, a, b []float32) int {
	n := vec(len(dst))
	if n > 0 {
		mulAddF32AVX2(&[3]*float32{&dst[0], &a[0], &b[0]}, n)
	}
	return n
}

func gruOutF32(h, n, z, hp []float32) int {
	m := vec(len(h))
	if m > 0 {
		gruOutF32AVX2(&[4]*float32{&h[0], &n[0], &z[0], &hp[0]}, m)
	}
	return m
}

func lstmCellBackwardF32(dh, gy, dc, i, f, g, o, tc, cp, di, df, dg, do []float32) int {
	n := vec(len(dh))
	if n > 0 {
		lstmCellBackwardF32AVX2(&[13]*float32{&dh[0], &gy[0], &dc[0], &i[0], &f[0], &g[0], &o[0], &tc[0], &cp[0], &di[0], &df[0], &dg[0], &do[0]}, n)
	}
	return n
}

func gruCellBackwardF32(dh, gy, r, z, n, hn, hp, dr, dz, dn, dhn []float32) int {
	m := vec(len(dh))
	if m > 0 {
		gruCellBackwardF32AVX2(&[11]*float32{&dh[0], &gy[0], &r[0], &z[0], &n[0], &hn[0], &hp[0], &dr[0], &dz[0], &dn[0], &dhn[0]}, m)
	}
	return m
}
