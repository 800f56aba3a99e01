package models

import (
	"fmt"
	"slices"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// TestRecurrentClassifierParameters checks the classifiers' parameter
// names and shapes against their PyTorch twin's
// (tools/lstmbench/lstm_step.py) and the shape of the logits.
func TestRecurrentClassifierParameters(t *testing.T) {
	for _, c := range []struct {
		name  string
		net   *RecurrentClassifier
		gates int
	}{
		{"lstm", LSTMClassifier(tensor.NewRNG(0)), 4},
		{"gru", GRUClassifier(tensor.NewRNG(0)), 3},
	} {
		var got []string
		for _, p := range nn.NamedParameters(c.net) {
			got = append(got, fmt.Sprint(p.Name, p.Value.Value().Shape()))
		}
		g := c.gates * 64
		want := []string{
			fmt.Sprint(c.name+".weight_ih_l0", []int{g, 28}),
			fmt.Sprint(c.name+".weight_hh_l0", []int{g, 64}),
			fmt.Sprint(c.name+".bias_ih_l0", []int{g}),
			fmt.Sprint(c.name+".bias_hh_l0", []int{g}),
			fmt.Sprint("fc.weight", []int{10, 64}),
			fmt.Sprint("fc.bias", []int{10}),
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: parameters %v, want %v", c.name, got, want)
		}
		x := tensor.Randn(tensor.NewRNG(1), 3, 28, 28)
		y := nn.Call(c.net, autograd.Const(x))
		if s := y.Value().Shape(); !slices.Equal(s, []int{3, 10}) {
			t.Errorf("%s: logits of shape %v, want [3 10]", c.name, s)
		}
		// images with their channel dimension, as the data loaders give
		// them, are the same rows
		y4 := nn.Call(c.net, autograd.Const(x.Reshape(3, 1, 28, 28)))
		a, b := y.Value().Float32s(), y4.Value().Contiguous().Float32s()
		if !slices.Equal(a, b) {
			t.Errorf("%s: logits of (3, 1, 28, 28) images %v, of (3, 28, 28) rows %v", c.name, b, a)
		}
	}
}
