package simd

// The pointwise parts of nn's fused LSTM and GRU layers, float32. Each sets
// every element of its first slice (and of the other outputs it names)
// from the same elements of the others, which must be at least as long.
// The AVX2 kernels (gen_rnn.py writes them and the pure-Go forms they fall
// back to, on other CPUs and for the last len%8 elements) round each
// product and sum on its own, in the same order as the Go code, so the
// results do not depend on the CPU.

//go:generate python3 gen_rnn.py

// LSTMCellF32 sets c = f⊙cp + i⊙g, the LSTM's new cell state from the
// forget gate f, the previous cell state cp, the input gate i and the cell
// gate g.
func LSTMCellF32(c, f, cp, i, g []float32) {
	f, cp, i, g = f[:len(c)], cp[:len(c)], i[:len(c)], g[:len(c)]
	k := lstmCellF32(c, f, cp, i, g)
	lstmCellF32Go(c[k:], f[k:], cp[k:], i[k:], g[k:])
}

// MulF32 sets dst = a⊙b.
func MulF32(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	k := mulF32(dst, a, b)
	mulF32Go(dst[k:], a[k:], b[k:])
}

// MulAddF32 sets dst = dst + a⊙b, the product rounded before the sum.
func MulAddF32(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	k := mulAddF32(dst, a, b)
	mulAddF32Go(dst[k:], a[k:], b[k:])
}

// GRUOutF32 sets h = n + z⊙(hp − n), the GRU's new hidden state from the
// new gate n, the update gate z and the previous hidden state hp.
func GRUOutF32(h, n, z, hp []float32) {
	n, z, hp = n[:len(h)], z[:len(h)], hp[:len(h)]
	k := gruOutF32(h, n, z, hp)
	gruOutF32Go(h[k:], n[k:], z[k:], hp[k:])
}

// LSTMCellBackwardF32 is the LSTM cell's backward pass. Given the
// gradient of the new hidden state in two parts, dh + gy (the recurrent
// one and the output's), the new cell state's gradient dc, and what the
// forward pass kept (the gates' activations i, f, g, o, tc = tanh(c') and
// the previous cell state cp), it sets the gradients of the gates'
// pre-activations di, df, dg, do, and replaces dc by the previous cell
// state's gradient. All slices have dh's length.
func LSTMCellBackwardF32(dh, gy, dc, i, f, g, o, tc, cp, di, df, dg, do []float32) {
	n := len(dh)
	gy, dc, i, f, g, o, tc, cp = gy[:n], dc[:n], i[:n], f[:n], g[:n], o[:n], tc[:n], cp[:n]
	di, df, dg, do = di[:n], df[:n], dg[:n], do[:n]
	k := lstmCellBackwardF32(dh, gy, dc, i, f, g, o, tc, cp, di, df, dg, do)
	lstmCellBackwardF32Go(dh[k:], gy[k:], dc[k:], i[k:], f[k:], g[k:], o[k:], tc[k:], cp[k:], di[k:], df[k:], dg[k:], do[k:])
}

// GRUCellBackwardF32 is the GRU cell's backward pass. Given the gradient
// of the new hidden state in two parts, dh + gy, and what the forward
// pass kept (the gates r, z, n, hn = h·W_hnᵀ + b_hn and the previous
// hidden state hp), it sets the gradients of the pre-activations dr, dz
// (the same for the gates' input and hidden parts) and dn (of the input
// part of the new gate), dhn (of its hidden part, hn), and replaces dh by
// the part of the previous hidden state's gradient that does not pass
// through W_hh. All slices have dh's length.
func GRUCellBackwardF32(dh, gy, r, z, n, hn, hp, dr, dz, dn, dhn []float32) {
	m := len(dh)
	gy, r, z, n, hn, hp = gy[:m], r[:m], z[:m], n[:m], hn[:m], hp[:m]
	dr, dz, dn, dhn = dr[:m], dz[:m], dn[:m], dhn[:m]
	k := gruCellBackwardF32(dh, gy, r, z, n, hn, hp, dr, dz, dn, dhn)
	gruCellBackwardF32Go(dh[k:], gy[k:], r[k:], z[k:], n[k:], hn[k:], hp[k:], dr[k:], dz[k:], dn[k:], dhn[k:])
}
