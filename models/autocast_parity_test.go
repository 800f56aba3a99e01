package models_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint/paritytest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

var castRef = &paritytest.Ref{Path: filepath.Join("..", "testdata", "parity", "autocast_block_parity.safetensors")}

// castRun is one run of a model: its output, loss and gradients by
// PyTorch's parameter names.
type castRun struct {
	y, loss *tensor.Tensor
	grads   map[string]*tensor.Tensor
}

// runCast loads prefix's weights into m, runs forward (under bfloat16
// Autocast when bf16) and backward, and returns what it gave.
func runCast(t *testing.T, m nn.Module, prefix string, bf16 bool, forward func() (y, loss *autograd.Var)) castRun {
	t.Helper()
	sd := map[string]*tensor.Tensor{}
	for k, v := range castRef.All(t) {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if ok && !strings.HasPrefix(rest, "bf16.") && !strings.HasPrefix(rest, "f32.") && !slices.Contains([]string{"x", "g", "idx", "tgt"}, rest) {
			sd[rest] = v
		}
	}
	if err := nn.LoadStateDict(m, sd, true); err != nil {
		t.Fatal(err)
	}
	nn.ZeroGrad(m, true)
	var y, loss *autograd.Var
	if bf16 {
		autograd.Autocast(tensor.BFloat16, func() { y, loss = forward() })
	} else {
		y, loss = forward()
	}
	if err := loss.Backward(nil); err != nil {
		t.Fatal(err)
	}
	r := castRun{y: y.Value(), loss: loss.Value(), grads: map[string]*tensor.Tensor{}}
	for _, p := range nn.NamedParameters(m) {
		r.grads[p.Name] = p.Value.Grad()
	}
	return r
}

// checkCast compares godist's bfloat16 and float32 runs with PyTorch's:
// float32 with float32 within 1e-5 (the same model); the bfloat16 output
// with PyTorch's within outTol, relative to its largest magnitude, and
// not equal to float32's (it is bfloat16's arithmetic); every bfloat16
// gradient within gradTol of float32's and no farther from it than
// PyTorch's bfloat16 gradient is, with a 25% allowance, and within
// PyTorch's own distance from float32 (or gradTol) of PyTorch's. On this
// CPU PyTorch's bfloat16 batched products keep bfloat16 partial sums and
// its attention rounds scores and probabilities to bfloat16, so its
// gradients are the farther from float32 (up to 8% in the GPT), godist's
// within 1%.
func checkCast(t *testing.T, prefix string, bf, f32 castRun, outTol, gradTol float64) {
	t.Helper()
	castRef.Expect(t, "float32 output", f32.y, prefix+".f32.y", 1e-5)
	castRef.Expect(t, "bfloat16 output", bf.y, prefix+".bf16.y", outTol)
	if d := paritytest.RelErr(bf.y, f32.y); d < 1e-4 {
		t.Errorf("the bfloat16 output is %.3g from float32's: not computed in bfloat16", d)
	}
	farther := func(what string, got, torchBF, torchF32 *tensor.Tensor) (theirs float64) {
		t.Helper()
		ours := paritytest.RelErr(got, torchF32)
		theirs = paritytest.RelErr(torchBF, torchF32)
		t.Logf("%s: from float32, godist's bfloat16 %.3g, PyTorch's %.3g", what, ours, theirs)
		if ours > 1.25*theirs+1e-4 || ours > gradTol {
			t.Errorf("%s: godist's bfloat16 is %.3g from float32, PyTorch's %.3g (at most %g)", what, ours, theirs, gradTol)
		}
		return theirs
	}
	farther("output", bf.y, castRef.Get(t, prefix+".bf16.y"), castRef.Get(t, prefix+".f32.y"))
	for name, g := range bf.grads {
		castRef.Expect(t, "float32 grad "+name, f32.grads[name], prefix+".f32.grad."+name, 1e-5)
		theirs := farther("grad "+name, g, castRef.Get(t, prefix+".bf16.grad."+name), castRef.Get(t, prefix+".f32.grad."+name))
		castRef.Expect(t, "bfloat16 grad "+name, g, prefix+".bf16.grad."+name, max(gradTol, 1.25*theirs))
	}
}

// TestAutocastBlockParity (issue 33): a pre-LayerNorm transformer block
// under bfloat16 Autocast against PyTorch's torch.autocast("cpu",
// bfloat16) (testdata/parity/make_autocast_block_parity.py).
func TestAutocastBlockParity(t *testing.T) {
	b := nn.NewTransformerBlock(tensor.NewRNG(0), 32, 4, 128, 0, true)
	x, g := castRef.Get(t, "block.x"), castRef.Get(t, "block.g")
	forward := func() (*autograd.Var, *autograd.Var) {
		y := nn.Call(b, autograd.Const(x))
		return y, autograd.SumAll(autograd.Mul(y, autograd.Const(g)))
	}
	bf := runCast(t, b, "block", true, forward)
	f32 := runCast(t, b, "block", false, forward)
	checkCast(t, "block", bf, f32, 1e-2, 2e-2)
}

// TestAutocastGPTParity (issue 33): the 2-layer GPT with tied weights
// under bfloat16 Autocast against PyTorch's autocast: logits, loss and
// every gradient.
func TestAutocastGPTParity(t *testing.T) {
	m, err := models.NewGPT(tensor.NewRNG(0), models.GPTConfig{Vocab: 256, Block: 16, Layers: 2, Heads: 2, Dim: 32})
	if err != nil {
		t.Fatal(err)
	}
	idx, tgt := castRef.Get(t, "gpt.idx").To(tensor.Int64), castRef.Get(t, "gpt.tgt").To(tensor.Int64)
	forward := func() (*autograd.Var, *autograd.Var) {
		logits := nn.Call(m, autograd.Const(idx))
		return logits, models.Loss(logits, tgt)
	}
	bf := runCast(t, m, "gpt", true, forward)
	f32 := runCast(t, m, "gpt", false, forward)
	checkCast(t, "gpt", bf, f32, 1e-2, 2e-2)
	castRef.ExpectValues(t, "bfloat16 loss", bf.loss.Values(), "gpt.bf16.loss", 1e-3)
}
