package nn

import (
	"fmt"
	"math"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/internal/simd"
	"github.com/godist/godist/tensor"
)

type float interface{ ~float32 | ~float64 }

// BatchNorm normalises each channel of an (N, C, ...) input over the batch
// and spatial dimensions, as torch.nn.BatchNorm1d/2d. In training mode it
// uses the batch's statistics and updates the running ones; in evaluation
// mode it uses the running ones.
type BatchNorm struct {
	Base
	Weight, Bias                        *autograd.Var
	Eps, Momentum                       float64
	runningMean, runningVar, numBatches *tensor.Tensor
}

// NewBatchNorm2d returns a BatchNorm for N×C×H×W inputs with eps 1e-5 and
// momentum 0.1, weight 1 and bias 0.
func NewBatchNorm2d(c int) *BatchNorm { return newBatchNorm(c) }

// NewBatchNorm1d returns a BatchNorm for N×C or N×C×L inputs.
func NewBatchNorm1d(c int) *BatchNorm { return newBatchNorm(c) }

func newBatchNorm(c int) *BatchNorm {
	b := &BatchNorm{
		Weight:      autograd.Param(tensor.Full(tensor.Float32, 1, c)),
		Bias:        autograd.Param(tensor.Zeros(c)),
		Eps:         1e-5,
		Momentum:    0.1,
		runningMean: tensor.Zeros(c),
		runningVar:  tensor.Full(tensor.Float32, 1, c),
		numBatches:  tensor.New(tensor.Int64),
	}
	b.RegisterParameter("weight", b.Weight)
	b.RegisterParameter("bias", b.Bias)
	b.RegisterBuffer("running_mean", b.runningMean)
	b.RegisterBuffer("running_var", b.runningVar)
	b.RegisterBuffer("num_batches_tracked", b.numBatches)
	return b
}

// RunningMean returns the running mean buffer.
func (b *BatchNorm) RunningMean() *tensor.Tensor { return b.Buffer("running_mean") }

// RunningVar returns the running variance buffer.
func (b *BatchNorm) RunningVar() *tensor.Tensor { return b.Buffer("running_var") }

// Forward normalises x.
func (b *BatchNorm) Forward(x *autograd.Var) *autograd.Var {
	if x.Value().Dim() < 2 || x.Value().Size(1) != b.Weight.Value().Numel() {
		panic(fmt.Sprintf("nn: BatchNorm of %d channels given input of shape %v", b.Weight.Value().Numel(), x.Shape()))
	}
	f := &batchNormFn{training: b.Training(), eps: b.Eps}
	if b.Training() {
		f.momentum = b.Momentum
		f.runMean, f.runVar = b.RunningMean(), b.RunningVar()
		nb := b.Buffer("num_batches_tracked")
		nb.Set(nb.Item() + 1)
	} else {
		f.mean, f.variance = b.RunningMean(), b.RunningVar()
	}
	return autograd.Apply(f, x, b.Weight, b.Bias)
}

// batchNormFn is batch normalisation as an autograd.Function over inputs
// (x, weight, bias).
type batchNormFn struct {
	training bool
	eps      float64
	momentum float64
	// training: running statistics to update; evaluation: statistics to use
	runMean, runVar, mean, variance *tensor.Tensor

	xhat   *tensor.Tensor
	invstd []float64
	w      *tensor.Tensor
	n, c   int
}

func (f *batchNormFn) Forward(in []*tensor.Tensor) *tensor.Tensor {
	x, w, b := in[0].Contiguous(), in[1].Contiguous(), in[2].Contiguous()
	n, c := x.Size(0), x.Size(1)
	s := x.Numel() / max(n*c, 1)
	f.w, f.n, f.c = w, n, c
	mean, variance := make([]float64, c), make([]float64, c)
	if f.training {
		switch x.DType() {
		case tensor.Float32:
			channelStats(x.Float32s(), n, c, s, mean, variance)
		case tensor.Float64:
			channelStats(x.Float64s(), n, c, s, mean, variance)
		}
		m := float64(n * s)
		if m > 1 {
			for i := range c {
				rm := f.runMean.At(i)
				rv := f.runVar.At(i)
				f.runMean.Set((1-f.momentum)*rm+f.momentum*mean[i], i)
				f.runVar.Set((1-f.momentum)*rv+f.momentum*variance[i]*m/(m-1), i)
			}
		}
	} else {
		for i := range c {
			mean[i], variance[i] = f.mean.At(i), f.variance.At(i)
		}
	}
	f.invstd = make([]float64, c)
	for i := range c {
		f.invstd[i] = 1 / math.Sqrt(variance[i]+f.eps)
	}
	f.xhat = tensor.New(x.DType(), x.Shape()...)
	y := tensor.New(x.DType(), x.Shape()...)
	switch x.DType() {
	case tensor.Float32:
		normalize(y.Float32s(), f.xhat.Float32s(), x.Float32s(), w.Float32s(), b.Float32s(), mean, f.invstd, n, c, s)
	case tensor.Float64:
		normalize(y.Float64s(), f.xhat.Float64s(), x.Float64s(), w.Float64s(), b.Float64s(), mean, f.invstd, n, c, s)
	default:
		panic(fmt.Sprintf("nn: BatchNorm of a %v tensor", x.DType()))
	}
	return y
}

func (f *batchNormFn) Backward(g *tensor.Tensor) []*tensor.Tensor {
	g = g.Contiguous()
	s := g.Numel() / max(f.n*f.c, 1)
	dx := tensor.New(g.DType(), g.Shape()...)
	dw, db := tensor.New(g.DType(), f.c), tensor.New(g.DType(), f.c)
	switch g.DType() {
	case tensor.Float32:
		batchNormBack(dx.Float32s(), dw.Float32s(), db.Float32s(), g.Float32s(), f.xhat.Float32s(), f.w.Float32s(), f.invstd, f.n, f.c, s, f.training)
	case tensor.Float64:
		batchNormBack(dx.Float64s(), dw.Float64s(), db.Float64s(), g.Float64s(), f.xhat.Float64s(), f.w.Float64s(), f.invstd, f.n, f.c, s, f.training)
	}
	return []*tensor.Tensor{dx, dw, db}
}

// channelStats computes the per-channel mean and biased variance of an
// [n, c, s] array.
func channelStats[T float](x []T, n, c, s int, mean, variance []float64) {
	m := float64(n * s)
	for ch := range c {
		var sum float64
		for i := range n {
			for _, v := range x[(i*c+ch)*s : (i*c+ch+1)*s] {
				sum += float64(v)
			}
		}
		mu := sum / m
		var sq float64
		for i := range n {
			for _, v := range x[(i*c+ch)*s : (i*c+ch+1)*s] {
				d := float64(v) - mu
				sq += d * d
			}
		}
		mean[ch], variance[ch] = mu, sq/m
	}
}

func normalize[T float](y, xhat, x, w, b []T, mean, invstd []float64, n, c, s int) {
	for i := range n {
		for ch := range c {
			o := (i*c + ch) * s
			mu, is := mean[ch], invstd[ch]
			wc, bc := float64(w[ch]), float64(b[ch])
			for k, v := range x[o : o+s] {
				h := (float64(v) - mu) * is
				xhat[o+k] = T(h)
				y[o+k] = T(h*wc + bc)
			}
		}
	}
}

func batchNormBack[T float](dx, dw, db, g, xhat, w []T, invstd []float64, n, c, s int, training bool) {
	m := float64(n * s)
	for ch := range c {
		var sg, sgx float64
		for i := range n {
			o := (i*c + ch) * s
			for k := range s {
				sg += float64(g[o+k])
				sgx += float64(g[o+k]) * float64(xhat[o+k])
			}
		}
		dw[ch], db[ch] = T(sgx), T(sg)
		scale := float64(w[ch]) * invstd[ch]
		for i := range n {
			o := (i*c + ch) * s
			for k := range s {
				if training {
					dx[o+k] = T(scale / m * (m*float64(g[o+k]) - sg - float64(xhat[o+k])*sgx))
				} else {
					dx[o+k] = T(scale * float64(g[o+k]))
				}
			}
		}
	}
}

// LayerNorm normalises over the last dimensions of its input (their shape
// is NormalizedShape) with a learned elementwise affine, as
// torch.nn.LayerNorm.
type LayerNorm struct {
	Base
	Weight, Bias    *autograd.Var
	NormalizedShape []int
	Eps             float64
}

// NewLayerNorm returns a LayerNorm with eps 1e-5, weight 1 and bias 0.
func NewLayerNorm(shape ...int) *LayerNorm {
	l := &LayerNorm{
		Weight:          autograd.Param(tensor.Full(tensor.Float32, 1, shape...)),
		Bias:            autograd.Param(tensor.Zeros(shape...)),
		NormalizedShape: append([]int(nil), shape...),
		Eps:             1e-5,
	}
	l.RegisterParameter("weight", l.Weight)
	l.RegisterParameter("bias", l.Bias)
	return l
}

// Forward normalises x.
func (l *LayerNorm) Forward(x *autograd.Var) *autograd.Var {
	return autograd.Apply(&layerNormFn{eps: l.Eps, d: l.Weight.Value().Numel()}, x, l.Weight, l.Bias)
}

type layerNormFn struct {
	eps    float64
	d      int
	xhat   *tensor.Tensor
	invstd []float64
	w      *tensor.Tensor
}

func (f *layerNormFn) Forward(in []*tensor.Tensor) *tensor.Tensor {
	x, w, b := in[0].Contiguous(), in[1].Contiguous(), in[2].Contiguous()
	if x.Numel()%max(f.d, 1) != 0 {
		panic(fmt.Sprintf("nn: LayerNorm over %d elements given input of shape %v", f.d, x.Shape()))
	}
	rows := x.Numel() / f.d
	f.w = w
	f.xhat = tensor.Empty(x.DType(), x.Shape()...)
	f.invstd = make([]float64, rows)
	y := tensor.Empty(x.DType(), x.Shape()...)
	switch x.DType() {
	case tensor.Float32:
		layerNorm32(y.Float32s(), f.xhat.Float32s(), x.Float32s(), w.Float32s(), b.Float32s(), f.invstd, rows, f.d, f.eps)
	case tensor.Float64:
		layerNorm(y.Float64s(), f.xhat.Float64s(), x.Float64s(), w.Float64s(), b.Float64s(), f.invstd, rows, f.d, f.eps)
	default:
		panic(fmt.Sprintf("nn: LayerNorm of a %v tensor", x.DType()))
	}
	return y
}

func (f *layerNormFn) Backward(g *tensor.Tensor) []*tensor.Tensor {
	g = g.Contiguous()
	rows := g.Numel() / f.d
	dx := tensor.Empty(g.DType(), g.Shape()...)
	dw, db := tensor.Empty(g.DType(), f.w.Shape()...), tensor.Empty(g.DType(), f.w.Shape()...)
	switch g.DType() {
	case tensor.Float32:
		layerNormBack32(dx.Float32s(), dw.Float32s(), db.Float32s(), g.Float32s(), f.xhat.Float32s(), f.w.Float32s(), f.invstd, rows, f.d)
	case tensor.Float64:
		layerNormBack(dx.Float64s(), dw.Float64s(), db.Float64s(), g.Float64s(), f.xhat.Float64s(), f.w.Float64s(), f.invstd, rows, f.d)
	}
	return []*tensor.Tensor{dx, dw, db}
}

// Release gives back the normalised input saved for Backward
// (autograd.Owned: the function keeps nothing else it was given).
func (f *layerNormFn) Release() {
	f.xhat.Recycle()
	f.xhat, f.w = nil, nil
}

func layerNorm[T float](y, xhat, x, w, b []T, invstd []float64, rows, d int, eps float64) {
	for r := range rows {
		row := x[r*d : (r+1)*d]
		var sum float64
		for _, v := range row {
			sum += float64(v)
		}
		mu := sum / float64(d)
		var sq float64
		for _, v := range row {
			sq += (float64(v) - mu) * (float64(v) - mu)
		}
		is := 1 / math.Sqrt(sq/float64(d)+eps)
		invstd[r] = is
		for k, v := range row {
			h := (float64(v) - mu) * is
			xhat[r*d+k] = T(h)
			y[r*d+k] = T(h*float64(w[k]) + float64(b[k]))
		}
	}
}

func layerNormBack[T float](dx, dw, db, g, xhat, w []T, invstd []float64, rows, d int) {
	acc := make([]float64, 2*d)
	for r := range rows {
		var s1, s2 float64
		for k := range d {
			gk, hk := float64(g[r*d+k]), float64(xhat[r*d+k])
			dh := gk * float64(w[k])
			s1 += dh
			s2 += dh * hk
			acc[k] += gk * hk
			acc[d+k] += gk
		}
		fd := float64(d)
		for k := range d {
			dh := float64(g[r*d+k]) * float64(w[k])
			dx[r*d+k] = T(invstd[r] / fd * (fd*dh - s1 - float64(xhat[r*d+k])*s2))
		}
	}
	for k := range d {
		dw[k], db[k] = T(acc[k]), T(acc[d+k])
	}
}

// layerNorm32 is layerNorm for float32 rows, in float32 arithmetic: a
// row at a time by simd.LayerNormF32 (AVX2: eight-lane partial sums),
// else here with four partial sums (what the compiler can overlap); the
// statistics are the same two passes.
func layerNorm32(y, xhat, x, w, b []float32, invstd []float64, rows, d int, eps float64) {
	for r := range rows {
		row := x[r*d : (r+1)*d]
		if is, ok := simd.LayerNormF32(y[r*d:(r+1)*d], xhat[r*d:(r+1)*d], row, w, b, eps); ok {
			invstd[r] = float64(is)
			continue
		}
		mu := sum4(row) / float32(d)
		var s0, s1, s2, s3 float32
		k := 0
		for ; k+4 <= d; k += 4 {
			a, b, c, e := row[k]-mu, row[k+1]-mu, row[k+2]-mu, row[k+3]-mu
			s0, s1, s2, s3 = s0+a*a, s1+b*b, s2+c*c, s3+e*e
		}
		for ; k < d; k++ {
			a := row[k] - mu
			s0 += a * a
		}
		is := float32(1 / math.Sqrt(float64((s0+s1)+(s2+s3))/float64(d)+eps))
		invstd[r] = float64(is)
		h, out := xhat[r*d:(r+1)*d], y[r*d:(r+1)*d]
		for k, v := range row {
			hk := (v - mu) * is
			h[k] = hk
			out[k] = hk*w[k] + b[k]
		}
	}
}

// sum4 sums v with four partial sums.
func sum4(v []float32) float32 {
	var s0, s1, s2, s3 float32
	k := 0
	for ; k+4 <= len(v); k += 4 {
		s0, s1, s2, s3 = s0+v[k], s1+v[k+1], s2+v[k+2], s3+v[k+3]
	}
	for ; k < len(v); k++ {
		s0 += v[k]
	}
	return (s0 + s1) + (s2 + s3)
}

// layerNormBack32 is layerNormBack for float32 rows in float32 arithmetic
// (by simd.LayerNormBackwardF32 where it has a kernel).
func layerNormBack32(dx, dw, db, g, xhat, w []float32, invstd []float64, rows, d int) {
	clear(dw[:d])
	clear(db[:d])
	fd := float32(d)
	for r := range rows {
		gr, hr, dr := g[r*d:(r+1)*d], xhat[r*d:(r+1)*d], dx[r*d:(r+1)*d]
		if simd.LayerNormBackwardF32(dr, dw, db, gr, hr, w, float32(invstd[r])) {
			continue
		}
		var s1, s2 float32
		for k, gk := range gr {
			hk := hr[k]
			dh := gk * w[k]
			s1 += dh
			s2 += dh * hk
			dw[k] += gk * hk
			db[k] += gk
		}
		is := float32(invstd[r])
		for k, gk := range gr {
			dr[k] = is / fd * (fd*gk*w[k] - s1 - hr[k]*s2)
		}
	}
}
