package autograd_test

import (
	"path/filepath"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint/paritytest"
	"github.com/godist/godist/tensor"
)

var autocastRef = &paritytest.Ref{Path: filepath.Join("..", "testdata", "parity", "autocast_parity.safetensors")}

// TestAutocastParity runs PyTorch's bfloat16 autocast reference
// (testdata/parity/make_autocast_parity.py: Linear, GELU, Linear under
// torch.autocast("cpu", bfloat16), float32 loss and backward) and checks
// the output, the loss and the float32 parameters' gradients. The output
// is bfloat16 on both sides, within two bfloat16 steps of the largest
// (2^-7): the products agree exactly, but PyTorch's GELU of a bfloat16
// tensor lands a step away from the float32 GELU rounded once (which
// godist's is) on some elements, and the second layer carries that on.
// The gradients are float32 sums of bfloat16 products in different
// orders. Those tolerances would pass the float32 model too; what tells
// them apart is the first layer's output, a product rounded once on both
// sides, which must be PyTorch's bit for bit (and the output's values,
// which must be bfloat16 values).
func TestAutocastParity(t *testing.T) {
	p := func(name string) *autograd.Var { return autograd.Param(autocastRef.Get(t, name).Clone()) }
	x := autograd.Const(autocastRef.Get(t, "x"))
	w1, b1, w2, b2 := p("w1"), p("b1"), p("w2"), p("b2")
	forward := func() *autograd.Var {
		return autograd.Linear(autograd.Gelu(autograd.Linear(x, w1, b1)), w2, b2)
	}
	var y, h *autograd.Var
	autograd.Autocast(tensor.BFloat16, func() {
		y = forward()
		h = autograd.Linear(x, w1, b1)
	})
	want := autocastRef.Get(t, "h").Values()
	for i, v := range h.Value().Values() {
		if v != want[i] {
			t.Fatalf("first layer's output[%d] = %v, PyTorch's %v: want the same bfloat16 product", i, v, want[i])
		}
	}
	if _, on := autograd.AutocastDType(); on {
		t.Fatal("Autocast still on after it returned")
	}
	if y.DType() != tensor.Float32 {
		t.Fatalf("output %v, want float32 holding bfloat16 values", y.DType())
	}
	for i, v := range y.Value().Values() {
		if float64(tensor.BFloat16ToFloat32(tensor.BFloat16FromFloat32(float32(v)))) != v {
			t.Fatalf("output[%d] = %v is not a bfloat16 value", i, v)
		}
	}
	autocastRef.Expect(t, "output", y.Value(), "y", 2.0/256)
	loss := autograd.MeanAll(autograd.Square(y))
	autocastRef.ExpectValues(t, "loss", loss.Value().Values(), "loss", 1e-2)
	if err := loss.Backward(nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		v    *autograd.Var
		name string
	}{{w1, "g_w1"}, {b1, "g_b1"}, {w2, "g_w2"}, {b2, "g_b2"}} {
		if c.v.Grad().DType() != tensor.Float32 {
			t.Fatalf("%s is %v, want float32", c.name, c.v.Grad().DType())
		}
		autocastRef.Expect(t, c.name, c.v.Grad(), c.name, 2e-2)
	}
	if e := paritytest.RelErr(autograd.Linear(x, w1, b1).Value(), autocastRef.Get(t, "h")); e == 0 {
		t.Error("the first layer in float32 gives PyTorch's bfloat16 output: the test cannot tell them apart")
	}
}

// TestAutocastAttention checks that attention under Autocast is the
// float32 attention of its input rounded to bfloat16 (float16), with its
// output rounded likewise, and that its gradient reaches the float32
// input.
func TestAutocastAttention(t *testing.T) {
	for _, d := range []tensor.DType{tensor.BFloat16, tensor.Float16} {
		rng := tensor.NewRNG(3)
		x := tensor.Randn(rng, 2, 5, 3*8)
		in := autograd.Param(x.Clone())
		var out *autograd.Var
		autograd.Autocast(d, func() { out = autograd.Attention(in, 2, true) })
		rounded := x.To(d).To(tensor.Float32)
		want := autograd.Attention(autograd.Const(rounded), 2, true).Value().To(d).To(tensor.Float32).Values()
		for i, v := range out.Value().Values() {
			if v != want[i] {
				t.Fatalf("%v: output[%d] = %v, want %v", d, i, v, want[i])
			}
		}
		if err := autograd.SumAll(out).Backward(nil); err != nil {
			t.Fatal(err)
		}
		if g := in.Grad(); g == nil || g.DType() != tensor.Float32 || !tensor.SameShape(g, x) {
			t.Fatalf("%v: input gradient %v", d, g)
		}
	}
}

// TestAutocastOverlapping: two goroutines' Autocast regions that end in
// the order they began (ranks of one process, each around its own
// forward pass) leave the products in bfloat16 until the last one ends;
// nested regions take the innermost dtype and give the outer one back.
func TestAutocastOverlapping(t *testing.T) {
	entered, firstDone, secondDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var during tensor.DType
	var on bool
	go func() {
		autograd.Autocast(tensor.BFloat16, func() {
			close(entered)
			<-secondDone // the other has entered: end first
		})
		close(firstDone)
	}()
	<-entered
	autograd.Autocast(tensor.BFloat16, func() {
		close(secondDone)
		<-firstDone
		during, on = autograd.AutocastDType()
	})
	if !on || during != tensor.BFloat16 {
		t.Fatalf("after the first region ended, inside the second: %v %v, want bfloat16", during, on)
	}
	if _, on := autograd.AutocastDType(); on {
		t.Fatal("Autocast on after both regions ended")
	}
	autograd.Autocast(tensor.BFloat16, func() {
		autograd.Autocast(tensor.Float16, func() {
			if d, _ := autograd.AutocastDType(); d != tensor.Float16 {
				t.Errorf("inner region: %v, want float16", d)
			}
		})
		if d, _ := autograd.AutocastDType(); d != tensor.BFloat16 {
			t.Errorf("outer region after the inner: %v, want bfloat16", d)
		}
	})
}
