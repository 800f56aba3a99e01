package autograd

import (
	"fmt"
	"math"
	"testing"

	"github.com/godist/godist/tensor"
)

// recurrent is the pattern of issue 18's LSTM, scaled down: an input
// projection of all time steps (one Var, a Select per step), a recurrent
// product, the gates cut by Chunk, a cell and a hidden state each used
// twice, and the hidden states stacked.
func recurrent(x, wih, whh, b *Var) *Var {
	seq, batch, hidden := x.value.Size(0), x.value.Size(1), whh.value.Size(1)
	xw := Linear(x, wih, b)
	h := Const(tensor.New(x.DType(), batch, hidden))
	c := Const(tensor.New(x.DType(), batch, hidden))
	hs := make([]*Var, seq)
	for t := range seq {
		gates := Add(Select(xw, 0, t), Linear(h, whh, nil))
		g := Chunk(gates, 1, 4)
		i, f, cc, o := Sigmoid(g[0]), Sigmoid(g[1]), Tanh(g[2]), Sigmoid(g[3])
		c = Add(Mul(f, c), Mul(i, cc))
		h = Mul(o, Tanh(c))
		hs[t] = h
	}
	return Stack(0, hs...)
}

func TestGradCheckViews(t *testing.T) {
	g := tensor.NewRNG(7)
	cases := []struct {
		name string
		f    func(in []*Var) *Var
		in   []*tensor.Tensor
	}{
		{"Narrow overlapping uses", func(v []*Var) *Var {
			return Mul(Narrow(v[0], 1, 0, 3), Narrow(v[0], 1, 2, 3))
		}, []*tensor.Tensor{rnd(g, 2, 5)}},
		{"Narrow negative dim", func(v []*Var) *Var { return Narrow(v[0], -1, 1, 2) }, []*tensor.Tensor{rnd(g, 2, 3, 4)}},
		{"Narrow of nothing", func(v []*Var) *Var { return Add(Narrow(v[0], 0, 1, 0), Narrow(v[0], 0, 2, 0)) }, []*tensor.Tensor{rnd(g, 3, 2)}},
		{"Select every row", func(v []*Var) *Var {
			acc := Select(v[0], 0, 0)
			for i := 1; i < 4; i++ {
				acc = Add(Mul(acc, Select(v[0], 0, i)), Select(v[0], 0, i))
			}
			return acc
		}, []*tensor.Tensor{rnd(g, 4, 3)}},
		{"Select negative dim, middle", func(v []*Var) *Var {
			return Mul(Select(v[0], -1, 2), Select(v[0], 1, 0))
		}, []*tensor.Tensor{rnd(g, 2, 3, 3)}},
		{"Select of a Select", func(v []*Var) *Var { return Select(Select(v[0], 1, 2), 0, 1) }, []*tensor.Tensor{rnd(g, 2, 3, 4)}},
		{"Narrow of a Select", func(v []*Var) *Var {
			s := Select(v[0], 0, 1)
			return Mul(Narrow(s, 0, 1, 2), Narrow(s, 0, 0, 2))
		}, []*tensor.Tensor{rnd(g, 2, 4)}},
		// The whole Var's gradient is a pass-through of another (not the
		// engine's to change) and arrives before the slice's.
		{"shared whole gradient, then a slice", func(v []*Var) *Var {
			s := Select(v[0], 0, 1)
			p := AddScalar(v[0], 2)
			return Add(p, s)
		}, []*tensor.Tensor{rnd(g, 3, 4)}},
		// The whole Var's gradient is a fresh tensor, added into in place.
		{"fresh whole gradient, then a slice", func(v []*Var) *Var {
			s := Select(v[0], 1, 2)
			return Mul(Tanh(v[0]), Unsqueeze(s, 1))
		}, []*tensor.Tensor{rnd(g, 3, 4)}},
		{"a slice, then whole gradients", func(v []*Var) *Var {
			y := Tanh(v[0])
			s := Mul(Narrow(y, 0, 1, 2), Narrow(y, 0, 0, 2))
			return Add(Add(s, Narrow(Square(y), 0, 0, 2)), Narrow(AddScalar(y, 1), 0, 1, 2))
		}, []*tensor.Tensor{rnd(g, 3, 4)}},
		{"Chunk uneven", func(v []*Var) *Var {
			p := Chunk(v[0], 1, 3)
			return Cat(1, Mul(p[0], p[1]), p[2], p[0])
		}, []*tensor.Tensor{rnd(g, 2, 8)}},
		{"Chunk used partly", func(v []*Var) *Var { return Chunk(v[0], 0, 3)[1] }, []*tensor.Tensor{rnd(g, 6, 2)}},
		{"Split, last smaller", func(v []*Var) *Var {
			p := Split(v[0], 0, 2)
			return Add(Mul(p[0], p[1]), Narrow(Cat(0, p[2], p[2]), 0, 0, 2))
		}, []*tensor.Tensor{rnd(g, 5, 3)}},
		{"recurrent", func(v []*Var) *Var { return recurrent(v[0], v[1], v[2], v[3]) },
			[]*tensor.Tensor{rnd(g, 3, 2, 3), rnd(g, 8, 3), rnd(g, 8, 2), rnd(g, 8)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := GradCheck(c.f, c.in, 1e-6, 1e-6, 1e-5); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// recurrentGrads runs the recurrent pattern in float32 and returns the
// gradients of its input and parameters.
func recurrentGrads(t *testing.T) []*tensor.Tensor {
	rng := tensor.NewRNG(3)
	x := Param(tensor.Randn(rng, 7, 5, 6))
	wih := Param(tensor.Randn(rng, 4*8, 6))
	whh := Param(tensor.Randn(rng, 4*8, 8))
	b := Param(tensor.Randn(rng, 4*8))
	out := recurrent(x, wih, whh, b)
	w := Const(tensor.Randn(rng, out.Shape()...))
	// The last step's output is used again, as a classifier would.
	last := Select(out, 0, out.value.Size(0)-1)
	loss := Add(SumAll(Mul(out, w)), SumAll(Square(last)))
	if err := loss.Backward(nil); err != nil {
		t.Fatal(err)
	}
	return []*tensor.Tensor{x.Grad(), wih.Grad(), whh.Grad(), b.Grad()}
}

// TestViewGradientsBitIdentical checks that adding view gradients into
// slices of one buffer changes no bit: the gradients equal those of the
// views' stand-alone backward functions (a zero tensor of the base's shape
// per use, summed), and are the same on every run.
func TestViewGradientsBitIdentical(t *testing.T) {
	want := func() []*tensor.Tensor {
		sliceAccumulation = false
		defer func() { sliceAccumulation = true }()
		return recurrentGrads(t)
	}()
	for run := range 3 {
		got := recurrentGrads(t)
		for i := range want {
			if err := sameBits(got[i], want[i]); err != nil {
				t.Fatalf("run %d, gradient %d: %v", run, i, err)
			}
		}
	}
}

func sameBits(a, b *tensor.Tensor) error {
	if !tensor.SameShape(a, b) {
		return fmt.Errorf("shape %v, want %v", a.Shape(), b.Shape())
	}
	av, bv := a.Contiguous().Float32s(), b.Contiguous().Float32s()
	for i := range av {
		if math.Float32bits(av[i]) != math.Float32bits(bv[i]) {
			return fmt.Errorf("element %d is %v (%#x), want %v (%#x)", i, av[i], math.Float32bits(av[i]), bv[i], math.Float32bits(bv[i]))
		}
	}
	return nil
}

// TestInPlaceAccumulationSparesSharedGradients checks that summing a Var's
// gradient in place never writes into a tensor someone else holds: a
// retained gradient passed through to it, or the gradient Add gives both
// of its inputs.
func TestInPlaceAccumulationSparesSharedGradients(t *testing.T) {
	x := Param(tensor.FromFloat32([]float32{1, 2, 3, 4}, 2, 2))
	h := Tanh(x)
	u := AddScalar(h, 1) // passes its gradient through to h unchanged
	u.RetainGrad()
	v := Add(h, u) // gives one tensor to both h and u
	v.RetainGrad()
	loss := Add(SumAll(Mul(v, Const(tensor.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)))),
		SumAll(Add(Select(h, 0, 1), Reshape(Narrow(h, 1, 0, 1), 2))))
	if err := loss.Backward(nil); err != nil {
		t.Fatal(err)
	}
	for name, g := range map[string]*tensor.Tensor{"u": u.Grad(), "v": v.Grad()} {
		if got := g.Values(); got[0] != 1 || got[1] != 2 || got[2] != 3 || got[3] != 4 {
			t.Errorf("%s's retained gradient %v, want [1 2 3 4]", name, got)
		}
	}
	// h's gradient: 2·w from v (directly and through u), 1 from Select
	// (row 1), 1 from Narrow (column 0).
	want := []float64{2 + 1, 4, 6 + 1 + 1, 8 + 1}
	hv := h.value.Values()
	for i, got := range x.Grad().Values() {
		if w := want[i] * (1 - hv[i]*hv[i]); math.Abs(got-w) > 1e-6 {
			t.Errorf("x.grad[%d] = %v, want %v", i, got, w)
		}
	}
}
