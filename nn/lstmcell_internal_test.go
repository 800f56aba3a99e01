package nn

import (
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// TestLSTMCellGradCheck: the fused cell's gradients (of the gates and of
// the previous cell state, through both outputs) against finite
// differences in float64.
func TestLSTMCellGradCheck(t *testing.T) {
	rng := tensor.NewRNG(11)
	const b, h = 3, 4
	gates := tensor.New(tensor.Float64, b, 4*h).Normal(rng, 0, 1.5)
	c := tensor.New(tensor.Float64, b, h).Normal(rng, 0, 1)
	err := autograd.GradCheck(func(in []*autograd.Var) *autograd.Var {
		return autograd.Apply(&lstmCell{hidden: h}, in[0], in[1])
	}, []*tensor.Tensor{gates, c}, 1e-6, 1e-7, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
}

// TestLSTMCellMatchesUnfused: the fused cell's outputs and gradients
// equal (within float32 rounding) those of the cell written with
// separate operations.
func TestLSTMCellMatchesUnfused(t *testing.T) {
	rng := tensor.NewRNG(12)
	const b, h = 5, 8
	g0 := tensor.New(tensor.Float32, b, 4*h).Normal(rng, 0, 2)
	c0 := tensor.New(tensor.Float32, b, h).Normal(rng, 0, 1)
	up := tensor.New(tensor.Float32, b, 2*h).Normal(rng, 0, 1)

	gf, cf := autograd.Param(g0.Clone()), autograd.Param(c0.Clone())
	fh, fc := lstmStep(gf, cf, h)
	autograd.Cat(1, fh, fc).Backward(up)

	gu, cu := autograd.Param(g0.Clone()), autograd.Param(c0.Clone())
	ch := autograd.Chunk(gu, 1, 4)
	i, f, gg, o := autograd.Sigmoid(ch[0]), autograd.Sigmoid(ch[1]), autograd.Tanh(ch[2]), autograd.Sigmoid(ch[3])
	uc := autograd.Add(autograd.Mul(f, cu), autograd.Mul(i, gg))
	uh := autograd.Mul(o, autograd.Tanh(uc))
	autograd.Cat(1, uh, uc).Backward(up)

	for _, p := range []struct {
		what      string
		got, want *tensor.Tensor
	}{
		{"h", fh.Value(), uh.Value()}, {"c", fc.Value(), uc.Value()},
		{"d gates", gf.Grad(), gu.Grad()}, {"d c", cf.Grad(), cu.Grad()},
	} {
		a, w := p.got.Contiguous().Float32s(), p.want.Contiguous().Float32s()
		for k := range a {
			if d := a[k] - w[k]; d > 1e-6 || d < -1e-6 {
				t.Fatalf("%s[%d]: fused %v, unfused %v", p.what, k, a[k], w[k])
			}
		}
	}
}
