package ddp

import (
	"context"
	"fmt"
	"math"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// SyncBatchNorm is batch normalisation whose training statistics are taken
// over the whole group's batch, as torch.nn.SyncBatchNorm: the forward pass
// all-reduces each channel's sum, sum of squares and count; the backward
// pass all-reduces the sums its input gradient needs. In evaluation mode it
// is an ordinary BatchNorm. Its parameter and buffer names are
// BatchNorm's, so checkpoints move between the two.
type SyncBatchNorm struct {
	nn.Base
	Weight, Bias  *autograd.Var
	Eps, Momentum float64
	group         *dist.Group
	runMean       *tensor.Tensor
	runVar        *tensor.Tensor
	numBatches    *tensor.Tensor
}

// NewSyncBatchNorm returns a SyncBatchNorm over c channels for group.
func NewSyncBatchNorm(c int, group *dist.Group) *SyncBatchNorm {
	s := &SyncBatchNorm{
		Weight: autograd.Param(tensor.Full(tensor.Float32, 1, c)),
		Bias:   autograd.Param(tensor.Zeros(c)),
		Eps:    1e-5, Momentum: 0.1, group: group,
		runMean: tensor.Zeros(c), runVar: tensor.Full(tensor.Float32, 1, c), numBatches: tensor.New(tensor.Int64),
	}
	s.register()
	return s
}

func (s *SyncBatchNorm) register() {
	s.RegisterParameter("weight", s.Weight)
	s.RegisterParameter("bias", s.Bias)
	s.RegisterBuffer("running_mean", s.runMean)
	s.RegisterBuffer("running_var", s.runVar)
	s.RegisterBuffer("num_batches_tracked", s.numBatches)
}

// ConvertSyncBatchNorm replaces every nn.BatchNorm in m by a SyncBatchNorm
// on group that shares its parameters and buffers, as
// torch.nn.SyncBatchNorm.convert_sync_batchnorm. It returns the module to
// use (m itself unless m is a BatchNorm).
func ConvertSyncBatchNorm(m nn.Module, group *dist.Group) nn.Module {
	return nn.ReplaceModules(m, func(x nn.Module) nn.Module {
		bn, ok := x.(*nn.BatchNorm)
		if !ok {
			return nil
		}
		s := &SyncBatchNorm{Weight: bn.Weight, Bias: bn.Bias, Eps: bn.Eps, Momentum: bn.Momentum, group: group,
			runMean: bn.RunningMean(), runVar: bn.RunningVar(), numBatches: bn.Buffer("num_batches_tracked")}
		s.register()
		if !bn.Training() {
			nn.Eval(s)
		}
		return s
	})
}

// Forward normalises x (N×C×...).
func (s *SyncBatchNorm) Forward(x *autograd.Var) *autograd.Var {
	c := s.Weight.Value().Numel()
	if x.Value().Dim() < 2 || x.Value().Size(1) != c {
		panic(fmt.Sprintf("ddp: SyncBatchNorm of %d channels given input of shape %v", c, x.Shape()))
	}
	if !s.Training() {
		// Evaluation: the running statistics, no communication.
		mean, variance := s.runMean, s.runVar
		shape := make([]int, x.Value().Dim())
		for i := range shape {
			shape[i] = 1
		}
		shape[1] = c
		inv := new(tensor.Tensor).AddScalar(variance, s.Eps)
		inv.Sqrt(inv)
		xm := autograd.Sub(x, autograd.Const(mean.Reshape(shape...)))
		w := autograd.Div(s.Weight, autograd.Const(inv))
		return autograd.Add(autograd.Mul(xm, autograd.Reshape(w, shape...)), autograd.Reshape(s.Bias, shape...))
	}
	s.numBatches.Set(s.numBatches.Item() + 1)
	return autograd.ApplyFallible(&syncBNFn{s: s}, x, s.Weight, s.Bias)
}

// syncBNFn is SyncBatchNorm's training forward and backward.
type syncBNFn struct {
	s      *SyncBatchNorm
	xhat   []float64
	invstd []float64
	count  float64
	shape  []int
	w      []float32
}

var _ autograd.Fallible = (*syncBNFn)(nil)

// TryForward normalises with the group's statistics. When their
// all-reduce fails it returns a zero output of the input's shape and the
// error (autograd carries it to Backward), and leaves the running
// statistics as they were.
func (f *syncBNFn) TryForward(in []*tensor.Tensor) (*tensor.Tensor, error) {
	s := f.s
	x := in[0].Contiguous()
	if x.DType() != tensor.Float32 {
		panic("ddp: SyncBatchNorm needs float32 input")
	}
	n, c := x.Size(0), x.Size(1)
	sp := x.Numel() / max(n*c, 1)
	xs := x.Float32s()
	// Local sums, then the group's: [sum (C), sum of squares (C), count].
	stats := make([]float64, 2*c+1)
	for i := range n {
		for ch := range c {
			for _, v := range xs[(i*c+ch)*sp : (i*c+ch+1)*sp] {
				stats[ch] += float64(v)
				stats[c+ch] += float64(v) * float64(v)
			}
		}
	}
	stats[2*c] = float64(n * sp)
	st := tensor.FromFloat64(stats)
	if err := s.group.AllReduce(context.Background(), st, dist.Sum); err != nil {
		return tensor.New(tensor.Float32, x.Shape()...), fmt.Errorf("ddp: SyncBatchNorm statistics: %w", err)
	}
	stats = st.Float64s()
	m := stats[2*c]
	f.count = m
	mean := make([]float64, c)
	f.invstd = make([]float64, c)
	for ch := range c {
		mean[ch] = stats[ch] / m
		variance := max(stats[c+ch]/m-mean[ch]*mean[ch], 0)
		f.invstd[ch] = 1 / math.Sqrt(variance+s.Eps)
		if m > 1 {
			rm, rv := s.runMean.At(ch), s.runVar.At(ch)
			s.runMean.Set((1-s.Momentum)*rm+s.Momentum*mean[ch], ch)
			s.runVar.Set((1-s.Momentum)*rv+s.Momentum*variance*m/(m-1), ch)
		}
	}
	w, b := in[1].Contiguous().Float32s(), in[2].Contiguous().Float32s()
	f.w = w
	f.shape = x.Shape()
	f.xhat = make([]float64, len(xs))
	out := tensor.New(tensor.Float32, x.Shape()...)
	ys := out.Float32s()
	for i := range n {
		for ch := range c {
			o := (i*c + ch) * sp
			for k := range sp {
				h := (float64(xs[o+k]) - mean[ch]) * f.invstd[ch]
				f.xhat[o+k] = h
				ys[o+k] = float32(h*float64(w[ch]) + float64(b[ch]))
			}
		}
	}
	return out, nil
}

// TryBackward computes the input, weight and bias gradients; the input's
// needs an all-reduce, whose failure it returns.
func (f *syncBNFn) TryBackward(g *tensor.Tensor) ([]*tensor.Tensor, error) {
	g = g.Contiguous()
	gs := g.Float32s()
	n, c := f.shape[0], f.shape[1]
	sp := g.Numel() / max(n*c, 1)
	// Local sums of dy and dy·xhat; the weight and bias gradients are the
	// local ones (DDP averages them); the input gradient needs the
	// group's.
	sums := make([]float64, 2*c)
	for i := range n {
		for ch := range c {
			o := (i*c + ch) * sp
			for k := range sp {
				sums[ch] += float64(gs[o+k])
				sums[c+ch] += float64(gs[o+k]) * f.xhat[o+k]
			}
		}
	}
	db, dw := tensor.New(tensor.Float32, c), tensor.New(tensor.Float32, c)
	for ch := range c {
		db.Set(sums[ch], ch)
		dw.Set(sums[c+ch], ch)
	}
	all := tensor.FromFloat64(append([]float64(nil), sums...))
	if err := f.s.group.AllReduce(context.Background(), all, dist.Sum); err != nil {
		return nil, fmt.Errorf("ddp: SyncBatchNorm backward: %w", err)
	}
	tot := all.Float64s()
	dx := tensor.New(tensor.Float32, f.shape...)
	ds := dx.Float32s()
	for i := range n {
		for ch := range c {
			o := (i*c + ch) * sp
			scale := float64(f.w[ch]) * f.invstd[ch] / f.count
			for k := range sp {
				ds[o+k] = float32(scale * (f.count*float64(gs[o+k]) - tot[ch] - f.xhat[o+k]*tot[c+ch]))
			}
		}
	}
	return []*tensor.Tensor{dx, dw, db}, nil
}
