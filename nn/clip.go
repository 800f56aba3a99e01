package nn

import (
	"math"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// ClipGradNorm scales the gradients of params in place so that their total
// L2 norm is at most maxNorm, and returns the total norm before clipping,
// as torch.nn.utils.clip_grad_norm_(params, maxNorm) with its defaults
// (norm_type 2, error_if_nonfinite False). It is
//
//	ClipGradsWithNorm(params, maxNorm, math.Sqrt(GradNormSquared(params)))
//
// The total norm is that of all gradient elements taken together (PyTorch's
// norm of the per-parameter norms, which is the same number), accumulated
// in float64. Parameters whose gradient is nil are skipped. List each
// parameter once (nn.Parameters does): one listed twice counts twice and is
// scaled twice, as in PyTorch.
//
// Under DDP, call it after the gradients are synchronised (after Backward
// and Wait): every rank then holds the same averaged gradients, so the
// local norm is the global one and every rank clips alike. Where each rank
// holds only a shard of the gradients (FSDP), sum GradNormSquared across
// the ranks with an all-reduce and pass the square root of the sum to
// ClipGradsWithNorm.
func ClipGradNorm(params []*autograd.Var, maxNorm float64) float64 {
	total := math.Sqrt(GradNormSquared(params))
	ClipGradsWithNorm(params, maxNorm, total)
	return total
}

// GradNormSquared returns the sum of the squares of every element of the
// gradients of params, accumulated in float64; nil gradients are skipped.
// It is the building block for a total norm over gradients spread across
// ranks: all-reduce it with a sum, then take the square root.
func GradNormSquared(params []*autograd.Var) float64 {
	var sum float64
	for _, p := range params {
		if g := p.Grad(); g != nil {
			sum += sumSquares(g)
		}
	}
	return sum
}

func sumSquares(t *tensor.Tensor) float64 {
	var s float64
	switch {
	case t.DType() == tensor.Float32 && t.IsContiguous():
		for _, v := range t.Float32s() {
			s += float64(v) * float64(v)
		}
	case t.DType() == tensor.Float64 && t.IsContiguous():
		for _, v := range t.Float64s() {
			s += v * v
		}
	default:
		for _, v := range t.Values() {
			s += v * v
		}
	}
	return s
}

// ClipGradsWithNorm multiplies every non-nil gradient of params in place
// by maxNorm/(totalNorm+1e-6) when that coefficient is below 1, and leaves
// them as they are otherwise, as PyTorch's clip_grads_with_norm_ (the
// coefficient is rounded to each gradient's dtype). totalNorm is the norm
// the caller measured, on this rank or across ranks (see ClipGradNorm).
//
// A non-finite totalNorm (a gradient holds Inf or NaN) leaves the
// gradients as they are; the caller should skip the step. PyTorch instead
// multiplies them by the coefficient, zero or NaN, which is no more
// usable.
func ClipGradsWithNorm(params []*autograd.Var, maxNorm, totalNorm float64) {
	if math.IsInf(totalNorm, 0) || math.IsNaN(totalNorm) {
		return
	}
	coef := maxNorm / (totalNorm + 1e-6)
	if !(coef < 1) {
		return
	}
	for _, p := range params {
		if g := p.Grad(); g != nil {
			g.Scale(coef)
		}
	}
}
