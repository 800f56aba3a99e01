package autograd

import (
	"fmt"
	"math"

	"github.com/godist/godist/tensor"
)

// GradCheck compares the gradients that backward computes for f with
// central finite differences, as torch.autograd.gradcheck. The inputs must
// be float64; f may return any shape (its output is contracted with fixed
// random weights to a scalar). It returns an error naming the first input
// and element whose gradients differ by more than atol + rtol·|numeric|.
func GradCheck(f func(in []*Var) *Var, inputs []*tensor.Tensor, eps, atol, rtol float64) error {
	vars := make([]*Var, len(inputs))
	for i, t := range inputs {
		if t.DType() != tensor.Float64 {
			return fmt.Errorf("autograd: GradCheck input %d is %v, want float64", i, t.DType())
		}
		vars[i] = Param(t)
	}
	out := f(vars)
	w := tensor.New(tensor.Float64, out.Shape()...).Uniform(tensor.NewRNG(99), 0.5, 1.5)
	scalar := func(o *Var) float64 {
		return new(tensor.Tensor).SumAll(new(tensor.Tensor).Mul(o.Value(), w)).Item()
	}
	SumAll(Mul(out, Const(w))).Backward(nil)
	for i, t := range inputs {
		analytic := vars[i].Grad()
		for j := range t.Numel() {
			idx := unravel(j, t.Shape())
			orig := t.At(idx...)
			var fp, fm float64
			NoGrad(func() {
				t.Set(orig+eps, idx...)
				fp = scalar(f(consts(inputs)))
				t.Set(orig-eps, idx...)
				fm = scalar(f(consts(inputs)))
			})
			t.Set(orig, idx...)
			num := (fp - fm) / (2 * eps)
			var an float64
			if analytic != nil {
				an = analytic.At(idx...)
			}
			if math.Abs(an-num) > atol+rtol*math.Abs(num) || math.IsNaN(an) {
				return fmt.Errorf("autograd: gradient of input %d at %v: backward %.10g, finite difference %.10g", i, idx, an, num)
			}
		}
	}
	return nil
}

func consts(ts []*tensor.Tensor) []*Var {
	out := make([]*Var, len(ts))
	for i, t := range ts {
		out[i] = Const(t)
	}
	return out
}

func unravel(i int, shape []int) []int {
	idx := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		idx[d] = i % shape[d]
		i /= shape[d]
	}
	return idx
}
