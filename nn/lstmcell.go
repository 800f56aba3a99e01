package nn

import (
	"fmt"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// lstmCell is the LSTM cell's pointwise part fused into one operation:
// from the gates' pre-activations G (batch, 4·hidden, PyTorch's order
// input, forget, cell, output) and the previous cell state c, it computes
//
//	i, f, g, o = σ(G_i), σ(G_f), tanh(G_g), σ(G_o)
//	c' = f ⊙ c + i ⊙ g
//	h' = o ⊙ tanh(c')
//
// and returns [h' | c'] (batch, 2·hidden); its backward is one pass over
// the elements. It replaces a dozen recorded operations per time step
// (Chunk's views, three sigmoids, two tanhs, three products, a sum), each
// with its own output and gradient buffers.
type lstmCell struct {
	hidden int
	// kept for backward
	act  *tensor.Tensor // σ of all four gates (the cell gate's column unused)
	g    *tensor.Tensor // tanh(G_g)
	tc   *tensor.Tensor // tanh(c')
	prev *tensor.Tensor // c
}

func (l *lstmCell) Forward(in []*tensor.Tensor) *tensor.Tensor {
	gates, c := in[0].Contiguous(), in[1].Contiguous()
	b, h := gates.Size(0), l.hidden
	if gates.Dim() != 2 || gates.Size(1) != 4*h || c.Dim() != 2 || c.Size(0) != b || c.Size(1) != h {
		panic(fmt.Sprintf("nn: LSTM cell given gates %v and cell %v for hidden %d", gates.Shape(), c.Shape(), h))
	}
	l.act = new(tensor.Tensor).Sigmoid(gates)
	l.g = new(tensor.Tensor).Tanh(gates.Narrow(1, 2*h, h))
	l.prev = c
	next := tensor.New(gates.DType(), b, h)
	switch gates.DType() {
	case tensor.Float32:
		cellUpdate(next.Float32s(), l.act.Float32s(), l.g.Float32s(), c.Float32s(), b, h)
	case tensor.Float64:
		cellUpdate(next.Float64s(), l.act.Float64s(), l.g.Float64s(), c.Float64s(), b, h)
	default:
		panic(fmt.Sprintf("nn: LSTM cell of %v", gates.DType()))
	}
	l.tc = new(tensor.Tensor).Tanh(next)
	out := tensor.New(gates.DType(), b, 2*h)
	switch gates.DType() {
	case tensor.Float32:
		cellOutput(out.Float32s(), l.act.Float32s(), l.tc.Float32s(), next.Float32s(), b, h)
	case tensor.Float64:
		cellOutput(out.Float64s(), l.act.Float64s(), l.tc.Float64s(), next.Float64s(), b, h)
	}
	return out
}

func cellUpdate[F float32 | float64](next, act, g, c []F, b, h int) {
	for r := range b {
		a, gr, cr, nr := act[r*4*h:(r+1)*4*h], g[r*h:(r+1)*h], c[r*h:(r+1)*h], next[r*h:(r+1)*h]
		i, f := a[:h], a[h:2*h]
		for j := range nr {
			nr[j] = f[j]*cr[j] + i[j]*gr[j]
		}
	}
}

func cellOutput[F float32 | float64](out, act, tc, next []F, b, h int) {
	for r := range b {
		o, t, n, or := act[r*4*h+3*h:(r+1)*4*h], tc[r*h:(r+1)*h], next[r*h:(r+1)*h], out[r*2*h:(r+1)*2*h]
		for j := range h {
			or[j] = o[j] * t[j]
		}
		copy(or[h:], n)
	}
}

func (l *lstmCell) Backward(grad *tensor.Tensor) []*tensor.Tensor {
	grad = grad.Contiguous()
	b, h := grad.Size(0), l.hidden
	dg := tensor.New(grad.DType(), b, 4*h)
	dc := tensor.New(grad.DType(), b, h)
	switch grad.DType() {
	case tensor.Float32:
		cellBackward(dg.Float32s(), dc.Float32s(), grad.Float32s(), l.act.Float32s(), l.g.Float32s(), l.tc.Float32s(), l.prev.Float32s(), b, h)
	case tensor.Float64:
		cellBackward(dg.Float64s(), dc.Float64s(), grad.Float64s(), l.act.Float64s(), l.g.Float64s(), l.tc.Float64s(), l.prev.Float64s(), b, h)
	}
	return []*tensor.Tensor{dg, dc}
}

func cellBackward[F float32 | float64](dg, dc, grad, act, g, tc, prev []F, b, h int) {
	for r := range b {
		gr := grad[r*2*h : (r+1)*2*h]
		dh, dcn := gr[:h], gr[h:]
		a := act[r*4*h : (r+1)*4*h]
		i, f, o := a[:h], a[h:2*h], a[3*h:]
		gg, t, c := g[r*h:(r+1)*h], tc[r*h:(r+1)*h], prev[r*h:(r+1)*h]
		d := dg[r*4*h : (r+1)*4*h]
		di, df, dgg, do := d[:h], d[h:2*h], d[2*h:3*h], d[3*h:]
		dcr := dc[r*h : (r+1)*h]
		for j := range h {
			dct := dcn[j] + dh[j]*o[j]*(1-t[j]*t[j])
			di[j] = dct * gg[j] * i[j] * (1 - i[j])
			df[j] = dct * c[j] * f[j] * (1 - f[j])
			dgg[j] = dct * i[j] * (1 - gg[j]*gg[j])
			do[j] = dh[j] * t[j] * o[j] * (1 - o[j])
			dcr[j] = dct * f[j]
		}
	}
}

// lstmStep applies the fused cell: the new hidden and cell states from
// the gates' pre-activations and the cell state.
func lstmStep(gates, c *autograd.Var, hidden int) (h, cell *autograd.Var) {
	out := autograd.Apply(&lstmCell{hidden: hidden}, gates, c)
	return autograd.Narrow(out, 1, 0, hidden), autograd.Narrow(out, 1, hidden, hidden)
}
