package nn_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint/paritytest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// Reference values from testdata/parity/make_transformer_parity.py
// (PyTorch 1.13), compared with parityTol.
var trRef = &paritytest.Ref{Path: filepath.Join("..", "testdata", "parity", "transformer.safetensors")}

// trLoad loads every reference tensor under prefix (but its inputs and
// gradients) into m's state dict, failing on any key m lacks or leaves
// unset.
func trLoad(t *testing.T, m nn.Module, prefix string) {
	t.Helper()
	sd := map[string]*tensor.Tensor{}
	for k, v := range trRef.All(t) {
		if rest, ok := strings.CutPrefix(k, prefix); ok && !strings.HasPrefix(rest, "grad.") && rest != "x" && rest != "y" && rest != "g" {
			sd[rest] = v
		}
	}
	if err := nn.LoadStateDict(m, sd, true); err != nil {
		t.Fatal(err)
	}
}

// checkLayer runs m on the reference input, and compares the output and
// the gradients of the input and of every parameter with PyTorch's.
func checkLayer(t *testing.T, m nn.Layer, prefix string) {
	trLoad(t, m, prefix)
	x := autograd.Param(trRef.Get(t, prefix+"x").Clone())
	y := nn.Call(m, x)
	trRef.Expect(t, "output", y.Value(), prefix+"y", parityTol)
	if err := y.Backward(trRef.Get(t, prefix+"g")); err != nil {
		t.Fatal(err)
	}
	trRef.Expect(t, "grad x", x.Grad(), prefix+"grad.x", parityTol)
	for _, p := range nn.NamedParameters(m) {
		trRef.Expect(t, "grad "+p.Name, p.Value.Grad(), prefix+"grad."+p.Name, parityTol)
	}
}

func TestParityMultiheadAttentionCausal(t *testing.T) {
	checkLayer(t, nn.NewMultiheadAttention(tensor.NewRNG(0), 12, 3, true), "mha.")
}

func TestParityMultiheadAttentionFull(t *testing.T) {
	checkLayer(t, nn.NewMultiheadAttention(tensor.NewRNG(0), 12, 3, false), "mha_full.")
}

func TestParityTransformerBlock(t *testing.T) {
	checkLayer(t, nn.NewTransformerBlock(tensor.NewRNG(0), 12, 3, 48, 0, true), "block.")
}
