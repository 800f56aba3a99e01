package autograd

import (
	"slices"
	"testing"

	"github.com/godist/godist/tensor"
)

// net is a small two-layer model with the hidden values exposed, so that
// tests can mark them, hold them and look at their storage.
type net struct {
	w1, b1, w2 *Var
}

func newNet() *net {
	rng := tensor.NewRNG(7)
	return &net{w1: Param(tensor.Randn(rng, 32, 24)), b1: Param(tensor.Randn(rng, 32)), w2: Param(tensor.Randn(rng, 8, 32))}
}

// forward returns the pre-activation a, the activation h and the output y.
func (m *net) forward(x *tensor.Tensor, transient bool) (a, h, y *Var) {
	a = Linear(Const(x), m.w1, m.b1)
	h = Tanh(a)
	y = Linear(h, m.w2, nil)
	if transient {
		a.MarkTransient()
		h.MarkTransient()
	}
	return a, h, y
}

func batch(step int) *tensor.Tensor { return tensor.Randn(tensor.NewRNG(uint64(100+step)), 16, 24) }

// recycled reports whether v's storage went back to the pool (the values
// in these tests are all large enough to come from it).
func recycled(v *Var) bool { return !v.value.Recyclable() }

func TestTransientValuesAreRecycled(t *testing.T) {
	m := newNet()
	a, h, y := m.forward(batch(0), true)
	if err := MeanAll(Square(y)).Backward(nil); err != nil {
		t.Fatal(err)
	}
	if !recycled(a) || !recycled(h) {
		t.Fatal("transient values were not recycled")
	}
	if recycled(y) {
		t.Fatal("the unmarked output was recycled")
	}
	for _, p := range []*Var{m.w1, m.b1, m.w2} {
		if !p.Grad().Sized() || !p.Value().Sized() {
			t.Fatal("a parameter or its gradient was recycled")
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Value of a recycled transient Var did not panic")
		}
	}()
	h.Value()
}

// TestRecyclingKeepsResults runs a few steps with and without transient
// values: the pool hands the second run the first steps' buffers, and the
// gradients must be the same bit for bit.
func TestRecyclingKeepsResults(t *testing.T) {
	run := func(transient bool) [][]float64 {
		m := newNet()
		var out [][]float64
		for step := range 4 {
			for _, p := range []*Var{m.w1, m.b1, m.w2} {
				p.ZeroGrad(step%2 == 0) // both kinds of ZeroGrad
			}
			_, _, y := m.forward(batch(step), transient)
			if err := MeanAll(Square(y)).Backward(nil); err != nil {
				t.Fatal(err)
			}
			for _, p := range []*Var{m.w1, m.b1, m.w2} {
				out = append(out, p.Grad().Values())
			}
		}
		return out
	}
	want, got := run(false), run(true)
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("gradient %d differs with recycling", i)
		}
	}
}

// TestHeldTensorsSurviveLaterSteps holds everything a program may hold
// across steps (the output and the loss, values read out before backward,
// parameter gradients after ZeroGrad(true), retained gradients, gradients
// a hook kept) and checks that the next steps, which reuse the recycled
// storage, do not write into any of it.
func TestHeldTensorsSurviveLaterSteps(t *testing.T) {
	m := newNet()
	type held struct {
		name string
		t    *tensor.Tensor
		want []float64
	}
	var hold []held
	keep := func(name string, x *tensor.Tensor) { hold = append(hold, held{name, x, x.Values()}) }

	a, h, y := m.forward(batch(0), true)
	keep("a read before backward", a.Value()) // read out: kept
	h.RetainGrad()
	loss := MeanAll(Square(y))
	var hooked *tensor.Tensor
	y.RegisterHook(func(g *tensor.Tensor) *tensor.Tensor { hooked = g; return nil })
	if err := loss.Backward(nil); err != nil {
		t.Fatal(err)
	}
	keep("output", y.Value())
	keep("loss", loss.Value())
	keep("retained gradient", h.Grad())
	keep("gradient a hook kept", hooked)
	keep("weight gradient", m.w1.Grad())
	keep("bias gradient", m.b1.Grad())
	if recycled(a) || recycled(h) {
		t.Fatal("a value read out, or one whose gradient is retained, was recycled")
	}
	for step := 1; step < 4; step++ {
		for _, p := range []*Var{m.w1, m.b1, m.w2} {
			p.ZeroGrad(true)
		}
		_, _, y := m.forward(batch(step), true)
		if err := MeanAll(Square(y)).Backward(nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range hold {
		if !slices.Equal(k.t.Values(), k.want) {
			t.Errorf("%s changed in later steps", k.name)
		}
	}
}

func TestViewOfKeptValueIsNotRecycled(t *testing.T) {
	m := newNet()
	a, h, _ := m.forward(batch(0), true)
	v := Reshape(h, 32, 16) // not transient: h's storage must live
	if err := MeanAll(Square(v)).Backward(nil); err != nil {
		t.Fatal(err)
	}
	if recycled(h) || recycled(v) {
		t.Fatal("storage that an unmarked view shares was recycled")
	}
	if !recycled(a) {
		t.Fatal("a was not recycled")
	}
	// A view made from a transient Var, transient itself, goes with it.
	a, h, _ = m.forward(batch(1), true)
	v = Reshape(h, 32, 16)
	v.MarkTransient()
	if err := SumAll(Mul(v, v)).Backward(nil); err != nil {
		t.Fatal(err)
	}
	if !recycled(h) || !recycled(a) {
		t.Fatal("storage whose every view is transient was not recycled")
	}
}

func TestNoRecyclingWhenGraphKept(t *testing.T) {
	m := newNet()
	a, h, y := m.forward(batch(0), true)
	loss := MeanAll(Square(y))
	if err := loss.BackwardWith(nil, BackwardOptions{RetainGraph: true}); err != nil {
		t.Fatal(err)
	}
	if recycled(a) || recycled(h) {
		t.Fatal("a kept graph's values were recycled")
	}
	first := m.w1.Grad().Values()
	if err := loss.Backward(nil); err != nil { // through the kept graph again
		t.Fatal(err)
	}
	for i, g := range m.w1.Grad().Values() {
		if g != 2*first[i] {
			t.Fatal("second pass through a kept graph went wrong")
		}
	}
	if !recycled(a) || !recycled(h) {
		t.Fatal("the pass that freed the graph did not recycle")
	}
}

// keeper is an outside Function that keeps what it is given.
type keeper struct{ in, grad *tensor.Tensor }

func (k *keeper) Forward(in []*tensor.Tensor) *tensor.Tensor {
	k.in = in[0]
	return new(tensor.Tensor).MulScalar(in[0], 2)
}

func (k *keeper) Backward(g *tensor.Tensor) []*tensor.Tensor {
	k.grad = g
	return []*tensor.Tensor{new(tensor.Tensor).MulScalar(g, 2)}
}

func TestOutsideFunctionKeepsWhatItSaw(t *testing.T) {
	m := newNet()
	_, h, _ := m.forward(batch(0), true)
	k := &keeper{}
	out := Apply(k, h)
	out.MarkTransient()
	y := Linear(out, m.w2, nil)
	if err := MeanAll(Square(y)).Backward(nil); err != nil {
		t.Fatal(err)
	}
	if recycled(h) || recycled(out) || !k.in.Sized() || !k.grad.Sized() {
		t.Fatal("an outside Function's input, output or gradient was recycled")
	}
}

// doubler is an Owned Function: it keeps nothing it is given, and counts
// its Release calls.
type doubler struct{ released int }

func (d *doubler) Forward(in []*tensor.Tensor) *tensor.Tensor {
	return new(tensor.Tensor).MulScalar(in[0], 2)
}

func (d *doubler) Backward(g *tensor.Tensor) []*tensor.Tensor {
	return []*tensor.Tensor{new(tensor.Tensor).MulScalar(g, 2)}
}

func (d *doubler) Release() { d.released++ }

func TestOwnedFunctionLetsValuesBeRecycled(t *testing.T) {
	m := newNet()
	_, h, _ := m.forward(batch(0), true)
	d := &doubler{}
	out := Apply(d, h)
	out.MarkTransient()
	y := Linear(out, m.w2, nil)
	if err := MeanAll(Square(y)).Backward(nil); err != nil {
		t.Fatal(err)
	}
	if !recycled(h) || !recycled(out) {
		t.Fatalf("an Owned Function's transient input (recycled %v) or output (%v) was kept", recycled(h), recycled(out))
	}
	if d.released != 1 {
		t.Fatalf("Release ran %d times, want once", d.released)
	}

	// With the graph retained nothing is recycled and nothing released.
	_, h, _ = m.forward(batch(1), true)
	d = &doubler{}
	out = Apply(d, h)
	out.MarkTransient()
	if err := MeanAll(Square(Linear(out, m.w2, nil))).BackwardWith(nil, BackwardOptions{RetainGraph: true}); err != nil {
		t.Fatal(err)
	}
	if recycled(h) || recycled(out) || d.released != 0 {
		t.Fatalf("with RetainGraph: input recycled %v, output recycled %v, released %d times", recycled(h), recycled(out), d.released)
	}
}

func TestComputingWithRecycledVarPanics(t *testing.T) {
	m := newNet()
	_, h, y := m.forward(batch(0), true)
	if err := MeanAll(Square(y)).Backward(nil); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("an operation on a recycled transient Var did not panic")
		}
	}()
	Linear(h, m.w2, nil) // h was kept past its step, against the rule
}
