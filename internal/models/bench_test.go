package models

import (
	"runtime"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

// benchStep measures one training step (forward, loss, backward, SGD) on a
// batch of 64 random Fashion-MNIST-shaped inputs.
func benchStep(b *testing.B, net *nn.Sequential) {
	rng := tensor.NewRNG(1)
	x := autograd.Const(tensor.Randn(rng, 64, 1, 28, 28))
	labels := make([]int64, 64)
	for i := range labels {
		labels[i] = int64(rng.IntN(10))
	}
	y := tensor.FromInt64(labels)
	opt := optim.NewSGD(nn.Parameters(net), optim.SGDOptions{LR: 0.01, Momentum: 0.9})
	b.ResetTimer()
	for range b.N {
		opt.ZeroGrad(true)
		loss := nn.CrossEntropy(nn.Call(net, x), y)
		loss.Backward(nil)
		opt.Step()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/step")
}

func BenchmarkStepMLP(b *testing.B)   { benchStep(b, MLP(tensor.NewRNG(0))) }
func BenchmarkStepLeNet(b *testing.B) { benchStep(b, LeNet(tensor.NewRNG(0))) }

// lstmClassifier is the recurrent model of issue 18, written as a new user
// would: a 1-layer LSTM (hidden 64) over the 28 rows of each image, the
// last step's output through a Linear to 10 classes.
type lstmClassifier struct {
	nn.Base
	LSTM *nn.LSTM
	FC   *nn.Linear
}

func newLSTMClassifier(rng *tensor.RNG) *lstmClassifier {
	m := &lstmClassifier{
		LSTM: nn.NewLSTM(rng, 28, 64, nn.RNNOptions{BatchFirst: true}),
		FC:   nn.NewLinear(rng, 64, 10, true),
	}
	m.RegisterModule("lstm", m.LSTM)
	m.RegisterModule("fc", m.FC)
	return m
}

func (m *lstmClassifier) Forward(x *autograd.Var) *autograd.Var {
	out, _, _ := m.LSTM.Forward(x, nil, nil)
	return m.FC.Forward(autograd.Select(out, 1, -1+out.Value().Size(1)))
}

// BenchmarkLSTMStep measures one training step (forward, loss, backward,
// Adam) of the LSTM classifier on a batch of 64 random Fashion-MNIST-shaped
// inputs (64, 28 rows, 28 columns). internal/tools/lstmbench runs the same
// step in PyTorch.
func BenchmarkLSTMStep(b *testing.B) {
	net := newLSTMClassifier(tensor.NewRNG(0))
	rng := tensor.NewRNG(1)
	x := autograd.Const(tensor.Randn(rng, 64, 28, 28))
	labels := make([]int64, 64)
	for i := range labels {
		labels[i] = int64(rng.IntN(10))
	}
	y := tensor.FromInt64(labels)
	opt := optim.NewAdam(nn.Parameters(net), optim.AdamOptions{LR: 1e-3})
	b.ReportAllocs()
	var gc0 runtime.MemStats
	runtime.ReadMemStats(&gc0)
	b.ResetTimer()
	for range b.N {
		opt.ZeroGrad(true)
		loss := nn.CrossEntropy(net.Forward(x), y)
		loss.Backward(nil)
		opt.Step()
	}
	b.StopTimer()
	var gc1 runtime.MemStats
	runtime.ReadMemStats(&gc1)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/step")
	b.ReportMetric(float64(gc1.NumGC-gc0.NumGC)/float64(b.N), "gc/step")
}
