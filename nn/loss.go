package nn

import (
	"fmt"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// CrossEntropy returns the mean over the batch of -log softmax(logits)[target],
// as torch.nn.functional.cross_entropy with reduction "mean". logits is
// N×C; target holds N int64 class indices.
func CrossEntropy(logits *autograd.Var, target *tensor.Tensor) *autograd.Var {
	checkTargets("CrossEntropy", logits, target)
	return autograd.Apply(&crossEntropyFn{target: target}, logits)
}

type crossEntropyFn struct {
	target *tensor.Tensor
	lsm    *tensor.Tensor
}

func (f *crossEntropyFn) Forward(in []*tensor.Tensor) *tensor.Tensor {
	f.lsm = new(tensor.Tensor).LogSoftmax(in[0], 1)
	return nllForward(f.lsm, f.target)
}

func (f *crossEntropyFn) Backward(g *tensor.Tensor) []*tensor.Tensor {
	// d/dlogits = (softmax - onehot(target)) · g / N
	n := f.lsm.Size(0)
	scale := g.Item() / float64(n)
	dx := new(tensor.Tensor).Exp(f.lsm)
	ts := f.target.Contiguous().Int64s()
	switch dx.DType() {
	case tensor.Float32:
		ceGrad(dx.Float32s(), ts, dx.Size(1), float32(scale))
	case tensor.Float64:
		ceGrad(dx.Float64s(), ts, dx.Size(1), scale)
	}
	return []*tensor.Tensor{dx}
}

func ceGrad[T float](p []T, target []int64, c int, scale T) {
	for i, t := range target {
		row := p[i*c : (i+1)*c]
		row[t]--
		for j := range row {
			row[j] *= scale
		}
	}
}

// NLLLoss returns the mean over the batch of -logp[target], as
// torch.nn.functional.nll_loss. logp is N×C log-probabilities.
func NLLLoss(logp *autograd.Var, target *tensor.Tensor) *autograd.Var {
	checkTargets("NLLLoss", logp, target)
	return autograd.Apply(&nllFn{target: target}, logp)
}

type nllFn struct {
	target *tensor.Tensor
	shape  []int
	dtype  tensor.DType
}

func (f *nllFn) Forward(in []*tensor.Tensor) *tensor.Tensor {
	f.shape, f.dtype = in[0].Shape(), in[0].DType()
	return nllForward(in[0], f.target)
}

func (f *nllFn) Backward(g *tensor.Tensor) []*tensor.Tensor {
	dx := tensor.New(f.dtype, f.shape...)
	scale := -g.Item() / float64(f.shape[0])
	for i, t := range f.target.Contiguous().Int64s() {
		dx.Set(scale, i, int(t))
	}
	return []*tensor.Tensor{dx}
}

func nllForward(logp, target *tensor.Tensor) *tensor.Tensor {
	n := logp.Size(0)
	var s float64
	for i, t := range target.Contiguous().Int64s() {
		s -= logp.At(i, int(t))
	}
	out := tensor.New(logp.DType())
	out.Set(s / float64(max(n, 1)))
	return out
}

func checkTargets(op string, x *autograd.Var, target *tensor.Tensor) {
	if x.Value().Dim() != 2 || target.DType() != tensor.Int64 || target.Dim() != 1 || target.Size(0) != x.Value().Size(0) {
		panic(fmt.Sprintf("nn: %s of input %v with target %v%v; want N×C and N int64", op, x.Shape(), target.DType(), target.Shape()))
	}
	c := x.Value().Size(1)
	for _, t := range target.Contiguous().Int64s() {
		if t < 0 || int(t) >= c {
			panic(fmt.Sprintf("nn: %s target %d out of range [0, %d)", op, t, c))
		}
	}
}

// MSELoss returns the mean of (x - y)², as torch.nn.functional.mse_loss.
func MSELoss(x, y *autograd.Var) *autograd.Var {
	return autograd.MeanAll(autograd.Square(autograd.Sub(x, y)))
}
