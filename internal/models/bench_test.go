package models

import (
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
