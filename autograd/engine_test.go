package autograd_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

func vec(v ...float32) *tensor.Tensor { return tensor.FromFloat32(v) }

func TestAccumulatesAcrossPasses(t *testing.T) {
	w := autograd.Param(vec(1, 2, 3))
	for range 2 {
		autograd.SumAll(autograd.MulScalar(w, 2)).Backward(nil)
	}
	if got := w.Grad().Values(); got[0] != 4 || got[2] != 4 {
		t.Fatalf("grad after two passes %v, want all 4", got)
	}
	w.ZeroGrad(false)
	if w.Grad().Values()[1] != 0 {
		t.Fatal("ZeroGrad(false) did not zero")
	}
	w.ZeroGrad(true)
	if w.Grad() != nil {
		t.Fatal("ZeroGrad(true) kept the tensor")
	}
}

func TestSharedGradientIsNotAliased(t *testing.T) {
	// Add passes one gradient tensor to both inputs; each leaf must own its
	// gradient so that accumulating into one does not change the other.
	a, b := autograd.Param(vec(1, 1)), autograd.Param(vec(1, 1))
	autograd.SumAll(autograd.Add(a, b)).Backward(nil)
	autograd.SumAll(autograd.MulScalar(a, 5)).Backward(nil)
	if a.Grad().Values()[0] != 6 || b.Grad().Values()[0] != 1 {
		t.Fatalf("a.grad %v b.grad %v, want 6 and 1", a.Grad().Values(), b.Grad().Values())
	}
}

// TestGradReadyHookFiresWhenComplete checks the contract DDP relies on: a
// leaf's hook fires once per pass, after its last use has been processed,
// and before backward has finished with nodes that do not feed it.
func TestGradReadyHookFiresWhenComplete(t *testing.T) {
	x := autograd.Const(vec(1, 2))
	w1 := autograd.Param(vec(3, 4)) // used first in forward: its gradient is ready last
	w2 := autograd.Param(vec(5, 6)) // used twice
	var events []string
	w1.RegisterGradReadyHook(func(v *autograd.Var) {
		events = append(events, "w1")
		if v.Grad() == nil {
			t.Error("w1 hook fired before its gradient was accumulated")
		}
	})
	w2.RegisterGradReadyHook(func(v *autograd.Var) {
		events = append(events, "w2")
		// d/dw2 of sum(h*w2 + w2) = h + 1 = x*w1 + 1
		if g := v.Grad().Values(); g[0] != 4 || g[1] != 9 {
			t.Errorf("w2 hook saw incomplete gradient %v", g)
		}
	})
	h := autograd.Mul(x, w1)
	h.RegisterHook(func(g *tensor.Tensor) *tensor.Tensor {
		events = append(events, "h")
		return nil
	})
	y := autograd.Add(autograd.Mul(h, w2), w2)
	autograd.SumAll(y).Backward(nil)
	if got := strings.Join(events, ","); got != "w2,h,w1" {
		t.Fatalf("event order %s, want w2,h,w1", got)
	}
	if g := w1.Grad().Values(); g[0] != 5 || g[1] != 12 {
		t.Fatalf("w1 grad %v, want [5 12]", g)
	}
}

func TestTensorHookReplacesGradient(t *testing.T) {
	w := autograd.Param(vec(1, 1))
	remove := w.RegisterHook(func(g *tensor.Tensor) *tensor.Tensor { return new(tensor.Tensor).MulScalar(g, 10) })
	autograd.SumAll(w).Backward(nil)
	if w.Grad().Values()[0] != 10 {
		t.Fatalf("hooked grad %v", w.Grad().Values())
	}
	remove()
	w.ZeroGrad(true)
	autograd.SumAll(w).Backward(nil)
	if w.Grad().Values()[0] != 1 {
		t.Fatalf("grad after removing the hook %v", w.Grad().Values())
	}
}

func TestRetainGraphAndSecondBackward(t *testing.T) {
	w := autograd.Param(vec(2))
	y := autograd.SumAll(autograd.Square(w))
	y.BackwardWith(nil, autograd.BackwardOptions{RetainGraph: true})
	y.Backward(nil)
	if w.Grad().Values()[0] != 8 {
		t.Fatalf("grad %v, want 8", w.Grad().Values())
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "RetainGraph") {
			t.Fatalf("third backward: %v", r)
		}
	}()
	y.Backward(nil)
}

func TestNoGradRecordsNothing(t *testing.T) {
	w := autograd.Param(vec(1))
	var y *autograd.Var
	autograd.NoGrad(func() { y = autograd.MulScalar(w, 3) })
	if y.RequiresGrad() || !y.IsLeaf() {
		t.Fatal("operation under NoGrad was recorded")
	}
	if !autograd.GradEnabled() {
		t.Fatal("NoGrad did not restore grad mode")
	}
}

func TestDeterministicOrder(t *testing.T) {
	run := func() string {
		var order []string
		ws := make([]*autograd.Var, 6)
		x := autograd.Const(vec(1, 2, 3))
		var acc *autograd.Var
		for i := range ws {
			ws[i] = autograd.Param(vec(1, 1, 1))
			name := string(rune('a' + i))
			ws[i].RegisterGradReadyHook(func(*autograd.Var) { order = append(order, name) })
			term := autograd.Tanh(autograd.Mul(x, ws[i]))
			if acc == nil {
				acc = term
			} else {
				acc = autograd.Add(acc, term)
			}
		}
		autograd.SumAll(acc).Backward(nil)
		return strings.Join(order, "")
	}
	first := run()
	if first != "fedcba" {
		t.Fatalf("order %q, want reverse registration order", first)
	}
	for range 20 {
		if got := run(); got != first {
			t.Fatalf("order changed: %q then %q", first, got)
		}
	}
}

// cube is a Function implemented outside the package: y = x³.
type cube struct{ x *tensor.Tensor }

func (c *cube) Forward(in []*tensor.Tensor) *tensor.Tensor {
	c.x = in[0]
	sq := new(tensor.Tensor).Mul(in[0], in[0])
	return sq.Mul(sq, in[0])
}

func (c *cube) Backward(g *tensor.Tensor) []*tensor.Tensor {
	d := new(tensor.Tensor).Mul(c.x, c.x)
	d.Scale(3)
	return []*tensor.Tensor{d.Mul(d, g)}
}

func TestExternalFunction(t *testing.T) {
	x := tensor.FromFloat64([]float64{0.5, -1.5, 2})
	err := autograd.GradCheck(func(in []*autograd.Var) *autograd.Var {
		return autograd.Apply(&cube{}, in[0])
	}, []*tensor.Tensor{x}, 1e-6, 1e-6, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	w := autograd.Param(tensor.FromFloat32([]float32{2}))
	autograd.Apply(&cube{}, w).Backward(nil)
	if math.Abs(w.Grad().Item()-12) > 1e-6 {
		t.Fatalf("d(x³)/dx at 2 = %v", w.Grad().Item())
	}
}

// releasingCube is cube as an Owned Function that counts its Release
// calls.
type releasingCube struct {
	cube
	released *int
}

func (c *releasingCube) Release() { *c.released++ }

var _ autograd.Owned = (*releasingCube)(nil)

// TestOwnedRelease: Apply releases an Owned Function once, when the
// backward pass that frees its graph is over; not after a pass that
// retains the graph; and at once when nothing was recorded.
func TestOwnedRelease(t *testing.T) {
	var n int
	w := autograd.Param(tensor.FromFloat32([]float32{2}))
	y := autograd.SumAll(autograd.Apply(&releasingCube{released: &n}, w))
	if n != 0 {
		t.Fatalf("released %d times before backward", n)
	}
	y.BackwardWith(nil, autograd.BackwardOptions{RetainGraph: true})
	if n != 0 {
		t.Fatalf("released %d times after a pass that retains the graph", n)
	}
	y.Backward(nil)
	if n != 1 {
		t.Fatalf("released %d times after the pass that frees the graph, want 1", n)
	}
	if g := w.Grad().Item(); math.Abs(g-24) > 1e-6 {
		t.Fatalf("gradient after two passes %v, want 24", g)
	}
	n = 0
	autograd.Apply(&releasingCube{released: &n}, autograd.Const(tensor.FromFloat32([]float32{2})))
	autograd.NoGrad(func() { autograd.Apply(&releasingCube{released: &n}, w) })
	if n != 2 {
		t.Fatalf("released %d times by two unrecorded calls, want 2", n)
	}
}

// TestGradDestination: a leaf with a destination and no gradient gets its
// gradient computed into the destination (the same tensor, the same
// values as without one); a leaf used twice, one with a gradient already,
// and one with a tensor hook fall back to the usual path.
func TestGradDestination(t *testing.T) {
	x := autograd.Const(tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3))
	newParams := func() (*autograd.Var, *autograd.Var) {
		return autograd.Param(tensor.FromFloat32([]float32{1, -1, 2, 0.5, 3, -2}, 2, 3)), autograd.Param(vec(0.5, -0.5))
	}
	loss := func(w, b *autograd.Var) *autograd.Var { return autograd.SumAll(autograd.Linear(x, w, b)) }
	w0, b0 := newParams()
	loss(w0, b0).Backward(nil)

	w, b := newParams()
	wd, bd := tensor.Full(tensor.Float32, 7, 2, 3), tensor.Full(tensor.Float32, 7, 2)
	w.SetGradDestination(wd)
	b.SetGradDestination(bd)
	loss(w, b).Backward(nil)
	if w.Grad() != wd || b.Grad() != bd {
		t.Fatal("the gradients were not computed into their destinations")
	}
	if !tensor.Equal(wd, w0.Grad()) || !tensor.Equal(bd, b0.Grad()) {
		t.Fatalf("gradients in the destinations %v %v, want %v %v", wd.Values(), bd.Values(), w0.Grad().Values(), b0.Grad().Values())
	}
	// A second pass accumulates into the gradient (the destination), as
	// without one.
	loss(w, b).Backward(nil)
	if w.Grad() != wd || wd.Values()[0] != 2*w0.Grad().Values()[0] {
		t.Fatalf("second pass: %v, want twice %v", wd.Values(), w0.Grad().Values())
	}

	// Used twice in one graph: the contributions are summed elsewhere and
	// the destination is left alone.
	w2, _ := newParams()
	d2 := tensor.Full(tensor.Float32, 7, 2, 3)
	w2.SetGradDestination(d2)
	autograd.Add(autograd.SumAll(autograd.Linear(x, w2, nil)), autograd.SumAll(autograd.Linear(x, w2, nil))).Backward(nil)
	if w2.Grad() == d2 || d2.Values()[0] != 7 || w2.Grad().Values()[0] != 2*w0.Grad().Values()[0] {
		t.Fatalf("leaf used twice: grad %v, destination %v", w2.Grad().Values(), d2.Values())
	}

	// A tensor hook may replace the gradient: no destination.
	w3, _ := newParams()
	d3 := tensor.Full(tensor.Float32, 7, 2, 3)
	w3.SetGradDestination(d3)
	w3.RegisterHook(func(g *tensor.Tensor) *tensor.Tensor { return nil })
	loss(w3, nil).Backward(nil)
	if w3.Grad() == d3 || d3.Values()[0] != 7 {
		t.Fatal("a leaf with a tensor hook used its destination")
	}
}

// scaleOrFail is a Fallible that doubles its input, failing its forward or
// backward pass on request.
type scaleOrFail struct{ failForward, failBackward error }

func (f *scaleOrFail) TryForward(in []*tensor.Tensor) (*tensor.Tensor, error) {
	if f.failForward != nil {
		return tensor.New(in[0].DType(), in[0].Shape()...), f.failForward
	}
	return new(tensor.Tensor).MulScalar(in[0], 2), nil
}

func (f *scaleOrFail) TryBackward(g *tensor.Tensor) ([]*tensor.Tensor, error) {
	if f.failBackward != nil {
		return nil, f.failBackward
	}
	return []*tensor.Tensor{new(tensor.Tensor).MulScalar(g, 2)}, nil
}

func TestFallibleSucceeds(t *testing.T) {
	w := autograd.Param(vec(1, 2))
	y := autograd.ApplyFallible(&scaleOrFail{}, w)
	if err := autograd.SumAll(autograd.MulScalar(y, 3)).Backward(nil); err != nil {
		t.Fatal(err)
	}
	if got := w.Grad().Values(); got[0] != 6 || got[1] != 6 {
		t.Fatalf("grad %v, want all 6", got)
	}
}

func TestFallibleForwardErrorReachesBackward(t *testing.T) {
	boom := errors.New("peer 3 died")
	w := autograd.Param(vec(1, 2))
	y := autograd.ApplyFallible(&scaleOrFail{failForward: boom}, w)
	if !errors.Is(y.Err(), boom) {
		t.Fatalf("Err() = %v, want %v", y.Err(), boom)
	}
	// Everything computed from the failed result carries the error, with
	// or without recording; backward does not run.
	loss := autograd.SumAll(autograd.Add(autograd.MulScalar(y, 3), w))
	if !errors.Is(loss.Err(), boom) {
		t.Fatalf("loss.Err() = %v, want %v", loss.Err(), boom)
	}
	if err := loss.Backward(nil); !errors.Is(err, boom) {
		t.Fatalf("Backward = %v, want %v", err, boom)
	}
	if w.Grad() != nil {
		t.Fatalf("backward ran: grad %v", w.Grad().Values())
	}
	var z *autograd.Var
	autograd.NoGrad(func() { z = autograd.MulScalar(y, 2) })
	if !errors.Is(z.Err(), boom) {
		t.Fatalf("under NoGrad Err() = %v, want %v", z.Err(), boom)
	}
}

func TestFallibleBackwardErrorStopsBackward(t *testing.T) {
	boom := errors.New("all-reduce timed out")
	a, b := autograd.Param(vec(1, 2)), autograd.Param(vec(3, 4))
	y := autograd.ApplyFallible(&scaleOrFail{failBackward: boom}, a)
	loss := autograd.SumAll(autograd.Add(y, autograd.MulScalar(b, 5)))
	if loss.Err() != nil {
		t.Fatal(loss.Err())
	}
	if err := loss.Backward(nil); !errors.Is(err, boom) {
		t.Fatalf("Backward = %v, want %v", err, boom)
	}
	if a.Grad() != nil {
		t.Fatalf("a got a gradient through the failed operation: %v", a.Grad().Values())
	}
	// The graph is freed after a failure as after success.
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "second time") {
			t.Fatalf("second backward through a freed graph: recovered %v", r)
		}
	}()
	loss.Backward(nil)
}

func TestOtherPanicsCrossTheEngine(t *testing.T) {
	w := autograd.Param(vec(1, 2))
	y := autograd.Apply(panicky{}, w)
	defer func() {
		if r := recover(); r != "programmer error" {
			t.Fatalf("recovered %v, want the Function's own panic", r)
		}
	}()
	autograd.SumAll(y).Backward(nil)
}

type panicky struct{}

func (panicky) Forward(in []*tensor.Tensor) *tensor.Tensor { return in[0].Clone() }
func (panicky) Backward(*tensor.Tensor) []*tensor.Tensor   { panic("programmer error") }
