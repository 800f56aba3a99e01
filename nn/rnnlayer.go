package nn

import (
	"fmt"
	"math"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/internal/simd"
	"github.com/godist/godist/tensor"
)

// The fused recurrent layers: one direction of one LSTM or GRU layer over
// the whole sequence as one autograd Function, the way cuDNN runs them.
// Recorded step by step, a layer of T steps is some 10·T operations, each
// with its own output and gradient buffers, its gradients added into the
// weights' T times over. Fused, it is
//
//   - forward: the input projection of every step as one GEMM (into the
//     gate buffer, the biases copied in first), then per step one GEMM of
//     the previous hidden state into that step's gates and one pass over
//     the gates that applies the activations in place and writes the new
//     states;
//   - backward: per step one pass that writes the gates' gradients and one
//     GEMM for the previous hidden state's gradient, then the weights' and
//     the input's gradients as one GEMM each over all steps, and the
//     biases' as one sum.
//
// Inputs are time-major: x (T, B, in), states (B, hidden). The output Y
// holds the hidden states of every step and the initial one, time-major,
// so that one contiguous slice of it is the previous hidden state of
// every step, which the weight gradient multiplies by:
//
//	forward direction:  Y[0] = h0, Y[1+t] = h_t
//	reverse direction:  Y[t] = h_t, Y[T] = h0
//
// and, for the LSTM, Y[T+1] = c_n, the final cell state. The step-by-step
// forms (recurrent.stepwise: lstmCell, the GRU's separate operations) are
// what the tests hold these to.

// layerDims are the sizes and flags of one fused layer call.
type layerDims struct {
	hidden  int
	reverse bool
	bias    bool // the inputs include b_ih and b_hh
	needX   bool // x requires a gradient
}

// time returns the time index of step s.
func (d layerDims) time(s, T int) int {
	if d.reverse {
		return T - 1 - s
	}
	return s
}

// prev and out return the blocks of Y that hold the previous hidden state
// of time t and the hidden state it computes.
func (d layerDims) prev(t int) int {
	if d.reverse {
		return t + 1
	}
	return t
}

func (d layerDims) out(t int) int {
	if d.reverse {
		return t
	}
	return t + 1
}

// h0Block is the block of Y holding the initial hidden state.
func (d layerDims) h0Block(T int) int {
	if d.reverse {
		return T
	}
	return 0
}

// prevStart is the first block of the T blocks of Y holding the previous
// hidden states of times 0..T-1.
func (d layerDims) prevStart() int {
	if d.reverse {
		return 1
	}
	return 0
}

// outStart is the first of the T blocks of Y holding h_0..h_{T-1}, and
// last the block holding the final hidden state.
func (d layerDims) outStart() int {
	if d.reverse {
		return 0
	}
	return 1
}

func (d layerDims) last(T int) int {
	if d.reverse {
		return 0
	}
	return T
}

// kernels are the pointwise operations of the fused layers for one
// element type: float32's are internal/simd's (AVX2 where it runs),
// float64's plain Go (gradient checks). Each sets its first slice (and
// the other outputs it names) element by element; see internal/simd's
// LSTMCellF32 and the rest for what each computes.
type kernels[F float] struct {
	sigmoid, tanh func(dst, x []F)
	add           func(dst, a []F) // dst += a
	mul, mulAdd   func(dst, a, b []F)
	lstmCell      func(c, f, cp, i, g []F)
	gruOut        func(h, n, z, hp []F)
	lstmBackward  func(dh, gy, dc, i, f, g, o, tc, cp, di, df, dg, do []F)
	gruBackward   func(dh, gy, r, z, n, hn, hp, dr, dz, dn, dhn []F)
}

var (
	kernels32 = kernels[float32]{
		sigmoid32, tanh32, simd.AddF32, simd.MulF32, simd.MulAddF32,
		simd.LSTMCellF32, simd.GRUOutF32, simd.LSTMCellBackwardF32, simd.GRUCellBackwardF32,
	}
	kernels64 = kernels[float64]{
		func(dst, x []float64) {
			for i := range dst {
				dst[i] = 1 / (1 + math.Exp(-x[i]))
			}
		},
		func(dst, x []float64) {
			for i := range dst {
				dst[i] = math.Tanh(x[i])
			}
		},
		func(dst, a []float64) {
			for i := range dst {
				dst[i] += a[i]
			}
		},
		func(dst, a, b []float64) {
			for i := range dst {
				dst[i] = a[i] * b[i]
			}
		},
		func(dst, a, b []float64) {
			for i := range dst {
				dst[i] += a[i] * b[i]
			}
		},
		func(c, f, cp, i, g []float64) {
			for j := range c {
				c[j] = f[j]*cp[j] + i[j]*g[j]
			}
		},
		func(h, n, z, hp []float64) {
			for j := range h {
				h[j] = n[j] + z[j]*(hp[j]-n[j])
			}
		},
		func(dh, gy, dc, i, f, g, o, tc, cp, di, df, dg, do []float64) {
			for j := range dh {
				dhj := dh[j] + gy[j]
				dct := dc[j] + dhj*o[j]*(1-tc[j]*tc[j])
				di[j] = dct * g[j] * i[j] * (1 - i[j])
				df[j] = dct * cp[j] * f[j] * (1 - f[j])
				dg[j] = dct * i[j] * (1 - g[j]*g[j])
				do[j] = dhj * tc[j] * o[j] * (1 - o[j])
				dc[j] = dct * f[j]
			}
		},
		func(dh, gy, r, z, n, hn, hp, dr, dz, dn, dhn []float64) {
			for j := range dh {
				dhj := dh[j] + gy[j]
				dnp := dhj * (1 - z[j]) * (1 - n[j]*n[j])
				dn[j] = dnp
				dr[j] = dnp * hn[j] * r[j] * (1 - r[j])
				dz[j] = dhj * (hp[j] - n[j]) * z[j] * (1 - z[j])
				dhn[j] = dnp * r[j]
				dh[j] = dhj * z[j]
			}
		},
	}
)

// sigmoid32 and tanh32 use internal/simd's vector kernels where they run
// and float64 library functions for the rest.
func sigmoid32(dst, x []float32) {
	for i := simd.SigmoidF32(dst, x); i < len(dst); i++ {
		dst[i] = float32(1 / (1 + math.Exp(-float64(x[i]))))
	}
}

func tanh32(dst, x []float32) {
	for i := simd.TanhF32(dst, x); i < len(dst); i++ {
		dst[i] = float32(math.Tanh(float64(x[i])))
	}
}

// floats returns the elements of a contiguous float32 or float64 tensor.
func floats[F float](t *tensor.Tensor) []F {
	var z F
	switch any(z).(type) {
	case float32:
		return any(t.Float32s()).([]F)
	default:
		return any(t.Float64s()).([]F)
	}
}

// fillRows sets every row of the (rows, len(bias)) contiguous t to bias.
func fillRows[F float](t *tensor.Tensor, bias []F) {
	d := floats[F](t)
	for r := 0; r < len(d); r += len(bias) {
		copy(d[r:r+len(bias)], bias)
	}
}

// checkLayer panics unless x (T, B, in), the states (B, hidden) and the
// weights fit one another, and returns T and B.
func checkLayer(kind string, x, wih, whh *tensor.Tensor, gates, hidden int, states ...*tensor.Tensor) (T, B int) {
	if x.Dim() != 3 || wih.Dim() != 2 || wih.Size(0) != gates*hidden || wih.Size(1) != x.Size(2) ||
		whh.Dim() != 2 || whh.Size(0) != gates*hidden || whh.Size(1) != hidden {
		panic(fmt.Sprintf("nn: %s layer given input %v and weights %v, %v for hidden %d", kind, x.Shape(), wih.Shape(), whh.Shape(), hidden))
	}
	T, B = x.Size(0), x.Size(1)
	for _, s := range states {
		if s.Dim() != 2 || s.Size(0) != B || s.Size(1) != hidden {
			panic(fmt.Sprintf("nn: %s layer given a state %v for batch %d, hidden %d", kind, s.Shape(), B, hidden))
		}
	}
	if x.DType() != tensor.Float32 && x.DType() != tensor.Float64 {
		panic(fmt.Sprintf("nn: %s layer of %v", kind, x.DType()))
	}
	return T, B
}

// lstmLayer is the fused LSTM layer. Inputs: x, h0, c0, w_ih, w_hh and,
// with bias, b_ih, b_hh. Output: Y (T+2, B, hidden), see above.
type lstmLayer struct {
	layerDims
	// kept for backward
	x, xc, wih, whh, y, c0 *tensor.Tensor // xc: x's contiguous copy, if one was made
	act                    *tensor.Tensor // (T, B, 4h): σ(i), σ(f), tanh(g), σ(o)
	cs, tc                 *tensor.Tensor // (T, B, h): c_t and tanh(c_t)
}

var _ autograd.Owned = (*lstmLayer)(nil)

func (l *lstmLayer) Forward(in []*tensor.Tensor) *tensor.Tensor {
	h := l.hidden
	T, B := checkLayer("LSTM", in[0], in[3], in[4], 4, h, in[1], in[2])
	l.x = in[0].Contiguous()
	if l.x != in[0] {
		l.xc = l.x
	}
	l.wih, l.whh, l.c0 = in[3], in[4], in[2].Contiguous()
	dt := l.x.DType()
	l.act = tensor.Empty(dt, T, B, 4*h)
	if l.bias {
		b := tensor.New(dt, 4*h).Add(in[5], in[6])
		switch dt {
		case tensor.Float32:
			fillRows(l.act, b.Float32s())
		default:
			fillRows(l.act, b.Float64s())
		}
		b.Recycle()
		l.act.Reshape(T*B, 4*h).AddMatMul(l.x.Reshape(T*B, -1), l.wih.T())
	} else {
		l.act.Reshape(T*B, 4*h).MatMul(l.x.Reshape(T*B, -1), l.wih.T())
	}
	l.y = tensor.Empty(dt, T+2, B, h)
	l.y.Select(0, l.h0Block(T)).Copy(in[1])
	l.cs, l.tc = tensor.Empty(dt, T, B, h), tensor.Empty(dt, T, B, h)
	for s := range T {
		t := l.time(s, T)
		l.act.Select(0, t).AddMatMul(l.y.Select(0, l.prev(t)), l.whh.T())
		cprev := l.c0
		if s > 0 {
			cprev = l.cs.Select(0, l.time(s-1, T))
		}
		switch dt {
		case tensor.Float32:
			lstmForwardStep(kernels32, l, t, cprev.Float32s())
		default:
			lstmForwardStep(kernels64, l, t, cprev.Float64s())
		}
	}
	l.y.Select(0, T+1).Copy(l.cs.Select(0, l.time(T-1, T)))
	return l.y
}

// lstmForwardStep applies the activations to the gates of time t in
// place and writes c_t, tanh(c_t) and h_t.
func lstmForwardStep[F float](k kernels[F], l *lstmLayer, t int, cprev []F) {
	h := l.hidden
	g := floats[F](l.act.Select(0, t))
	c, tc := floats[F](l.cs.Select(0, t)), floats[F](l.tc.Select(0, t))
	hout := floats[F](l.y.Select(0, l.out(t)))
	for r := range len(c) / h {
		gr := g[r*4*h : (r+1)*4*h]
		k.sigmoid(gr[:2*h], gr[:2*h])
		k.tanh(gr[2*h:3*h], gr[2*h:3*h])
		k.sigmoid(gr[3*h:], gr[3*h:])
		cr, tr := c[r*h:(r+1)*h], tc[r*h:(r+1)*h]
		k.lstmCell(cr, gr[h:2*h], cprev[r*h:(r+1)*h], gr[:h], gr[2*h:3*h])
		k.tanh(tr, cr)
		k.mul(hout[r*h:(r+1)*h], gr[3*h:], tr)
	}
}

func (l *lstmLayer) Backward(grad *tensor.Tensor) []*tensor.Tensor {
	h := l.hidden
	T, B := l.x.Size(0), l.x.Size(1)
	gy := grad.Contiguous()
	dt := gy.DType()
	dG := tensor.Empty(dt, T, B, 4*h)
	dh := tensor.New(dt, B, h) // the recurrent part of dL/dh of the step
	dc := tensor.Empty(dt, B, h).Copy(gy.Select(0, T+1))
	for s := T - 1; s >= 0; s-- {
		t := l.time(s, T)
		cprev := l.c0
		if s > 0 {
			cprev = l.cs.Select(0, l.time(s-1, T))
		}
		switch dt {
		case tensor.Float32:
			lstmBackwardStep(kernels32, l, t, dG.Select(0, t).Float32s(), dh.Float32s(), dc.Float32s(), gy.Select(0, l.out(t)).Float32s(), cprev.Float32s())
		default:
			lstmBackwardStep(kernels64, l, t, dG.Select(0, t).Float64s(), dh.Float64s(), dc.Float64s(), gy.Select(0, l.out(t)).Float64s(), cprev.Float64s())
		}
		dh.MatMul(dG.Select(0, t), l.whh)
	}
	dh.Add(dh, gy.Select(0, l.h0Block(T)))
	dx := inputGrad(dG, l.wih, l.needX)
	dwih, db := weightGrads(dG, l.x, l.bias)
	dwhh, _ := weightGrads(dG, l.y.Narrow(0, l.prevStart(), T), false)
	dG.Recycle()
	if gy != grad {
		gy.Recycle()
	}
	grads := []*tensor.Tensor{dx, dh, dc, dwih, dwhh}
	if l.bias {
		grads = append(grads, db, db.Clone()) // b_ih and b_hh enter the gates alike
	}
	return grads
}

// lstmBackwardStep writes the gates' gradients dg of time t from the
// output's gradient gy, the recurrent gradient dh and the cell state's
// gradient dc, which it replaces by the previous cell state's.
func lstmBackwardStep[F float](k kernels[F], l *lstmLayer, t int, dg, dh, dc, gy, cprev []F) {
	h := l.hidden
	act, tc := floats[F](l.act.Select(0, t)), floats[F](l.tc.Select(0, t))
	for r := range len(dh) / h {
		a, d := act[r*4*h:(r+1)*4*h], dg[r*4*h:(r+1)*4*h]
		rows := func(x []F) []F { return x[r*h : (r+1)*h] }
		k.lstmBackward(rows(dh), rows(gy), rows(dc), a[:h], a[h:2*h], a[2*h:3*h], a[3*h:], rows(tc), rows(cprev),
			d[:h], d[h:2*h], d[2*h:3*h], d[3*h:])
	}
}

// Release recycles what Forward kept for backward.
func (l *lstmLayer) Release() {
	for _, t := range []*tensor.Tensor{l.act, l.cs, l.tc, l.xc} {
		if t != nil {
			t.Recycle()
		}
	}
	*l = lstmLayer{layerDims: l.layerDims}
}

// lstmLayerForward runs one direction of one LSTM layer fused: x (T, B,
// in), h0 and c0 (B, hidden); it returns the hidden states of every step
// (T, B, hidden) and the final hidden and cell states.
func lstmLayerForward(x, h0, c0, wih, whh, bih, bhh *autograd.Var, hidden int, reverse bool) (out, hn, cn *autograd.Var) {
	T := x.Value().Size(0)
	l := &lstmLayer{layerDims: layerDims{hidden: hidden, reverse: reverse, bias: bih != nil, needX: x.RequiresGrad()}}
	in := []*autograd.Var{x, h0, c0, wih, whh}
	if bih != nil {
		in = append(in, bih, bhh)
	}
	y := autograd.Apply(l, in...)
	return autograd.Narrow(y, 0, l.outStart(), T), autograd.Select(y, 0, l.last(T)), autograd.Select(y, 0, T+1)
}

// gruLayer is the fused GRU layer. Inputs: x, h0, w_ih, w_hh and, with
// bias, b_ih, b_hh. Output: Y (T+1, B, hidden), see above.
type gruLayer struct {
	layerDims
	// kept for backward
	x, xc, wih, whh, y *tensor.Tensor
	act                *tensor.Tensor // (T, B, 3h): r, z, n
	hn                 *tensor.Tensor // (T, B, h): h·W_hnᵀ + b_hn
	bhh                *tensor.Tensor
}

var _ autograd.Owned = (*gruLayer)(nil)

func (l *gruLayer) Forward(in []*tensor.Tensor) *tensor.Tensor {
	h := l.hidden
	T, B := checkLayer("GRU", in[0], in[2], in[3], 3, h, in[1])
	l.x = in[0].Contiguous()
	if l.x != in[0] {
		l.xc = l.x
	}
	l.wih, l.whh = in[2], in[3]
	dt := l.x.DType()
	// act starts as the input projection plus b_ih, and b_hh for the
	// reset and update gates (the new gate's b_hn is inside r ⊙ (...)).
	l.act = tensor.Empty(dt, T, B, 3*h)
	if l.bias {
		b := in[4].Clone()
		b.Narrow(0, 0, 2*h).Add(b.Narrow(0, 0, 2*h), in[5].Narrow(0, 0, 2*h))
		l.bhh = in[5].Contiguous()
		switch dt {
		case tensor.Float32:
			fillRows(l.act, b.Float32s())
		default:
			fillRows(l.act, b.Float64s())
		}
		b.Recycle()
		l.act.Reshape(T*B, 3*h).AddMatMul(l.x.Reshape(T*B, -1), l.wih.T())
	} else {
		l.act.Reshape(T*B, 3*h).MatMul(l.x.Reshape(T*B, -1), l.wih.T())
	}
	l.y = tensor.Empty(dt, T+1, B, h)
	l.y.Select(0, l.h0Block(T)).Copy(in[1])
	l.hn = tensor.Empty(dt, T, B, h)
	hw := tensor.Empty(dt, B, 3*h)
	for s := range T {
		t := l.time(s, T)
		hw.MatMul(l.y.Select(0, l.prev(t)), l.whh.T())
		switch dt {
		case tensor.Float32:
			gruForwardStep(kernels32, l, t, hw.Float32s())
		default:
			gruForwardStep(kernels64, l, t, hw.Float64s())
		}
	}
	hw.Recycle()
	return l.y
}

// gruForwardStep turns the gates of time t into r, z and n in place, from
// the hidden projection hw (without b_hh), and writes h·W_hnᵀ + b_hn and
// h_t.
func gruForwardStep[F float](k kernels[F], l *gruLayer, t int, hw []F) {
	h := l.hidden
	g := floats[F](l.act.Select(0, t))
	hn := floats[F](l.hn.Select(0, t))
	hprev, hout := floats[F](l.y.Select(0, l.prev(t))), floats[F](l.y.Select(0, l.out(t)))
	var bn []F
	if l.bhh != nil {
		bn = floats[F](l.bhh)[2*h:]
	}
	for r := range len(hn) / h {
		gr, hwr := g[r*3*h:(r+1)*3*h], hw[r*3*h:(r+1)*3*h]
		k.add(gr[:2*h], hwr[:2*h])
		k.sigmoid(gr[:2*h], gr[:2*h])
		hnr := hn[r*h : (r+1)*h]
		copy(hnr, hwr[2*h:])
		if bn != nil {
			k.add(hnr, bn)
		}
		n := gr[2*h:]
		k.mulAdd(n, gr[:h], hnr)
		k.tanh(n, n)
		k.gruOut(hout[r*h:(r+1)*h], n, gr[h:2*h], hprev[r*h:(r+1)*h])
	}
}

func (l *gruLayer) Backward(grad *tensor.Tensor) []*tensor.Tensor {
	h := l.hidden
	T, B := l.x.Size(0), l.x.Size(1)
	gy := grad.Contiguous()
	dt := gy.DType()
	dGi := tensor.Empty(dt, T, B, 3*h) // the gates' input parts' gradients
	dGh := tensor.Empty(dt, T, B, 3*h) // their hidden parts'
	dh := tensor.New(dt, B, h)
	for s := T - 1; s >= 0; s-- {
		t := l.time(s, T)
		switch dt {
		case tensor.Float32:
			gruBackwardStep(kernels32, l, t, dGi.Select(0, t).Float32s(), dGh.Select(0, t).Float32s(), dh.Float32s(), gy.Select(0, l.out(t)).Float32s())
		default:
			gruBackwardStep(kernels64, l, t, dGi.Select(0, t).Float64s(), dGh.Select(0, t).Float64s(), dh.Float64s(), gy.Select(0, l.out(t)).Float64s())
		}
		dh.AddMatMul(dGh.Select(0, t), l.whh)
	}
	dh.Add(dh, gy.Select(0, l.h0Block(T)))
	dx := inputGrad(dGi, l.wih, l.needX)
	dwih, dbih := weightGrads(dGi, l.x, l.bias)
	dwhh, dbhh := weightGrads(dGh, l.y.Narrow(0, l.prevStart(), T), l.bias)
	dGi.Recycle()
	dGh.Recycle()
	if gy != grad {
		gy.Recycle()
	}
	grads := []*tensor.Tensor{dx, dh, dwih, dwhh}
	if l.bias {
		grads = append(grads, dbih, dbhh)
	}
	return grads
}

// gruBackwardStep writes the gradients of the gates of time t, their
// input parts' dgi and their hidden parts' dgh, from the output's gradient
// gy and the recurrent gradient dh, which it replaces by the part of the
// previous hidden state's gradient that does not go through W_hh.
func gruBackwardStep[F float](k kernels[F], l *gruLayer, t int, dgi, dgh, dh, gy []F) {
	h := l.hidden
	act, hn := floats[F](l.act.Select(0, t)), floats[F](l.hn.Select(0, t))
	hprev := floats[F](l.y.Select(0, l.prev(t)))
	for r := range len(dh) / h {
		a, di, dhh := act[r*3*h:(r+1)*3*h], dgi[r*3*h:(r+1)*3*h], dgh[r*3*h:(r+1)*3*h]
		rows := func(x []F) []F { return x[r*h : (r+1)*h] }
		k.gruBackward(rows(dh), rows(gy), a[:h], a[h:2*h], a[2*h:], rows(hn), rows(hprev), di[:h], di[h:2*h], di[2*h:], dhh[2*h:])
		copy(dhh[:2*h], di[:2*h]) // r's and z's hidden parts are their input parts
	}
}

// Release recycles what Forward kept for backward.
func (l *gruLayer) Release() {
	for _, t := range []*tensor.Tensor{l.act, l.hn, l.xc} {
		if t != nil {
			t.Recycle()
		}
	}
	*l = gruLayer{layerDims: l.layerDims}
}

// gruLayerForward runs one direction of one GRU layer fused: x (T, B,
// in), h0 (B, hidden); it returns the hidden states of every step (T, B,
// hidden) and the final hidden state.
func gruLayerForward(x, h0, wih, whh, bih, bhh *autograd.Var, hidden int, reverse bool) (out, hn *autograd.Var) {
	T := x.Value().Size(0)
	l := &gruLayer{layerDims: layerDims{hidden: hidden, reverse: reverse, bias: bih != nil, needX: x.RequiresGrad()}}
	in := []*autograd.Var{x, h0, wih, whh}
	if bih != nil {
		in = append(in, bih, bhh)
	}
	y := autograd.Apply(l, in...)
	return autograd.Narrow(y, 0, l.outStart(), T), autograd.Select(y, 0, l.last(T))
}

// inputGrad returns the gradient of a layer's input x (T, B, in), dG·W_ih
// from the gates' gradients dG (T, B, gates), or nil unless need.
func inputGrad(dG, wih *tensor.Tensor, need bool) *tensor.Tensor {
	if !need {
		return nil
	}
	T, B := dG.Size(0), dG.Size(1)
	dx := tensor.Empty(dG.DType(), T, B, wih.Size(1))
	dx.Reshape(T*B, -1).MatMul(dG.Reshape(T*B, -1), wih)
	return dx
}

// weightGrads returns the gradient of a weight by which a (T, B, k) was
// multiplied into gates whose gradients are dG (T, B, gates): dGᵀ·a, over
// all steps at once; and with bias, the gradient of the gates' bias, the
// sum of dG over steps and batch.
func weightGrads(dG, a *tensor.Tensor, bias bool) (dw, db *tensor.Tensor) {
	T, B, G := dG.Size(0), dG.Size(1), dG.Size(2)
	dG2 := dG.Reshape(T*B, G)
	dw = tensor.Empty(dG.DType(), G, a.Size(2)).MatMul(dG2.T(), a.Reshape(T*B, -1))
	if bias {
		db = tensor.Empty(dG.DType(), G)
		switch dG.DType() {
		case tensor.Float32:
			sumSteps32(db.Float32s(), dG.Float32s(), T, B)
		default:
			sumSteps64(db.Float64s(), dG.Float64s(), T, B)
		}
	}
	return dw, db
}

// sumSteps32 sets db to the sum of the T·B rows of g: each step's B rows
// summed in float32 by vector adds, the steps' sums added in float64.
// (tensor's Sum adds every element in float64, one column at a time: five
// times slower on a GRU's bias gradients.)
func sumSteps32(db, g []float32, T, B int) {
	G := len(db)
	acc := make([]float64, G)
	for t := range T * min(B, 1) {
		blk := g[t*B*G : (t+1)*B*G]
		copy(db, blk[:G])
		for b := 1; b < B; b++ {
			simd.AddF32(db, blk[b*G:(b+1)*G])
		}
		for j, v := range db {
			acc[j] += float64(v)
		}
	}
	for j := range db {
		db[j] = float32(acc[j])
	}
}

func sumSteps64(db, g []float64, T, B int) {
	clear(db)
	G := len(db)
	for r := range T * B {
		for j, v := range g[r*G : (r+1)*G] {
			db[j] += v
		}
	}
}
