package nn_test

import (
	"math"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// TestDropout: in training, about P of the elements are zeroed and the
// rest scaled by 1/(1-P), the same elements for the same seed whatever
// the dtype; the gradient goes through the same mask; in evaluation the
// input passes through.
func TestDropout(t *testing.T) {
	const n, p = 20000, 0.3
	x32 := tensor.Full(tensor.Float32, 1, n)
	x64 := tensor.Full(tensor.Float64, 1, n)
	in := autograd.Param(x32)
	y32 := nn.Call(nn.NewDropout(p, tensor.NewRNG(5)), in)
	y64 := nn.Call(nn.NewDropout(p, tensor.NewRNG(5)), autograd.Const(x64)).Value().Values()
	zeros := 0
	for i, v := range y32.Value().Values() { // evaluated once
		switch {
		case v == 0:
			zeros++
		case math.Abs(v-1/(1-p)) > 1e-6:
			t.Fatalf("element %d kept as %v, want %v", i, v, 1/(1-p))
		}
		if math.Abs(v-y64[i]) > 1e-6 {
			t.Fatalf("element %d: float32 %v, float64 %v: different masks for one seed", i, v, y64[i])
		}
	}
	if f := float64(zeros) / n; math.Abs(f-p) > 0.02 {
		t.Fatalf("%.3f of the elements zeroed, want about %v", f, p)
	}
	if err := autograd.SumAll(y32).Backward(nil); err != nil {
		t.Fatal(err)
	}
	mask := y32.Value().Values() // the input was all ones
	for i, g := range in.Grad().Values() {
		if g != mask[i] {
			t.Fatalf("gradient %d is %v, want the mask's %v", i, g, mask[i])
		}
	}
	d := nn.NewDropout(p, tensor.NewRNG(5))
	nn.Eval(d)
	if got := nn.Call(d, autograd.Const(x32)).Value(); !tensor.Equal(got, x32) {
		t.Fatal("evaluation mode changed the input")
	}
	all := nn.Call(nn.NewDropout(1, tensor.NewRNG(5)), autograd.Const(x32)).Value()
	for _, v := range all.Values() {
		if v != 0 {
			t.Fatal("P = 1 kept an element")
		}
	}
}
