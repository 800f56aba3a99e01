package nn

import (
	"slices"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

func seqBatch(step int) (*autograd.Var, *tensor.Tensor) {
	rng := tensor.NewRNG(uint64(10 + step))
	y := make([]int64, 16)
	for i := range y {
		y[i] = int64(rng.IntN(4))
	}
	return autograd.Const(tensor.Randn(rng, 16, 2, 6, 6)), tensor.FromInt64(y)
}

// TestSequentialOutputSurvivesLaterSteps holds what a training loop holds
// across steps (the model's output, its loss, a parameter's gradient after
// ZeroGrad(true)) while later steps recycle the Sequential's inner
// activations and the backward pass's gradients: none of it may change.
func TestSequentialOutputSurvivesLaterSteps(t *testing.T) {
	rng := tensor.NewRNG(1)
	model := NewSequential(
		NewConv2d(rng, 2, 4, 3, tensor.Conv2dParams{PadH: 1, PadW: 1}, true), NewReLU(), NewMaxPool2d(2),
		NewFlatten(), NewLinear(rng, 36, 16, true), NewReLU(), NewLinear(rng, 16, 4, true))
	params := Parameters(model)
	x, y := seqBatch(0)
	out := Call(model, x)
	loss := CrossEntropy(out, y)
	if err := loss.Backward(nil); err != nil {
		t.Fatal(err)
	}
	held := map[string]*tensor.Tensor{"output": out.Value(), "loss": loss.Value(), "weight gradient": params[0].Grad()}
	want := map[string][]float64{}
	for k, v := range held {
		want[k] = v.Values()
	}
	for step := 1; step < 4; step++ {
		for _, p := range params {
			p.ZeroGrad(true)
		}
		x, y := seqBatch(step)
		if err := CrossEntropy(Call(model, x), y).Backward(nil); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range held {
		if !slices.Equal(v.Values(), want[k]) {
			t.Errorf("the %s held from step 0 changed in later steps", k)
		}
	}
}

// peek is a layer that remembers its output without a hook, which a
// layer inside a Sequential must not do: the test uses it to look at an
// output the Sequential gave up.
type peek struct {
	Base
	out *autograd.Var
}

func (p *peek) Forward(x *autograd.Var) *autograd.Var {
	p.out = autograd.Tanh(x)
	return p.out
}

// TestSequentialMarksOnlyInnerOutputs checks which layer outputs a
// Sequential gives up: inner ones nobody saw, not one a forward hook or
// pre-hook saw, not its result (here a Flatten view of an inner output).
func TestSequentialMarksOnlyInnerOutputs(t *testing.T) {
	rng := tensor.NewRNG(2)
	var preSeen, postSeen *autograd.Var
	relu := NewReLU()
	relu.base().RegisterForwardPreHook(func(_ Module, x *autograd.Var) *autograd.Var {
		if preSeen == nil {
			preSeen = x
		}
		return nil
	})
	lin2 := NewLinear(rng, 8, 8, true)
	lin2.RegisterForwardHook(func(_ Module, _, y *autograd.Var) *autograd.Var {
		if postSeen == nil {
			postSeen = y
		}
		return nil
	})
	hidden := &peek{}
	model := NewSequential(NewLinear(rng, 8, 8, true), relu, lin2, hidden, NewLinear(rng, 8, 8, true), NewTanh(), NewFlatten())
	x := autograd.Const(tensor.Randn(rng, 32, 8))
	out := Call(model, x)
	seen := hidden.out
	step := func(out *autograd.Var) {
		if err := autograd.MeanAll(autograd.Square(out)).Backward(nil); err != nil {
			t.Fatal(err)
		}
	}
	step(out)
	for range 3 { // later steps reuse what the first gave up
		step(Call(model, autograd.Const(tensor.Randn(rng, 32, 8))))
	}
	// Nothing was read before backward (that would keep it anyway): the
	// values held are compared with the same layers run again now (the
	// weights have not changed).
	upTo := func(n int) []float64 {
		var v *autograd.Var
		autograd.NoGrad(func() { v = Call(NewSequential(model.Layers[:n]...), x) })
		return v.Value().Values()
	}
	for _, c := range []struct {
		name string
		v    *autograd.Var
		n    int
	}{{"the output a pre-hook saw", preSeen, 1}, {"the output a hook saw", postSeen, 3}, {"the result", out, len(model.Layers)}} {
		if !slices.Equal(c.v.Value().Values(), upTo(c.n)) {
			t.Errorf("%s changed in later steps", c.name)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("an inner output nobody saw was not given up (its Value did not panic)")
		}
	}()
	seen.Value()
}
