package models

import (
	"context"
	"runtime"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/tensor"
)

// benchStep measures one training step (forward, loss, backward, SGD) on a
// batch of 64 random Fashion-MNIST-shaped inputs. Besides the time it
// reports what a step costs the Go heap once warm: bytes and allocations
// (B/op, allocs/op) and garbage collections (GCs/step).
func benchStep(b *testing.B, net *nn.Sequential) {
	x, y := fashionBatch(1)
	opt := optim.NewSGD(nn.Parameters(net), optim.SGDOptions{LR: 0.01, Momentum: 0.9})
	step := func() {
		opt.ZeroGrad(true)
		loss := nn.CrossEntropy(nn.Call(net, x), y)
		loss.Backward(nil)
		opt.Step()
	}
	for range 3 { // warm up: momentum buffers, pools
		step()
	}
	b.ReportAllocs()
	m := startMem(b)
	for range b.N {
		step()
	}
	m.report(b, 1)
}

// fashionBatch returns 64 random Fashion-MNIST-shaped inputs and labels.
func fashionBatch(seed uint64) (*autograd.Var, *tensor.Tensor) {
	rng := tensor.NewRNG(seed)
	x := autograd.Const(tensor.Randn(rng, 64, 1, 28, 28))
	labels := make([]int64, 64)
	for i := range labels {
		labels[i] = int64(rng.IntN(10))
	}
	return x, tensor.FromInt64(labels)
}

// memStart is the heap's state when a benchmark's timed part began.
type memStart struct{ ms runtime.MemStats }

func startMem(b *testing.B) *memStart {
	m := &memStart{}
	runtime.ReadMemStats(&m.ms)
	b.ResetTimer()
	return m
}

// report adds ms/step, B/step, allocs/step and GCs/step over b.N steps
// of world ranks in this process: bytes and allocations are one rank's
// share (the process's divided by world), collections the process's.
func (m *memStart) report(b *testing.B, world int) {
	b.StopTimer()
	var end runtime.MemStats
	runtime.ReadMemStats(&end)
	n := float64(b.N)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/n, "ms/step")
	b.ReportMetric(float64(end.TotalAlloc-m.ms.TotalAlloc)/n/float64(world), "B/step")
	b.ReportMetric(float64(end.Mallocs-m.ms.Mallocs)/n/float64(world), "allocs/step")
	b.ReportMetric(float64(end.NumGC-m.ms.NumGC)/n, "GCs/step")
}

func BenchmarkStepMLP(b *testing.B)   { benchStep(b, MLP(tensor.NewRNG(0))) }
func BenchmarkStepLeNet(b *testing.B) { benchStep(b, LeNet(tensor.NewRNG(0))) }

// benchDDPStep is benchStep under DDP at world 2, the step written as
// examples/ddp-fashion-mnist writes it (gradients as bucket views). The
// ranks are goroutines over loopback TCP with shared memory and the frame
// ring, what dist.Init gives ranks on one host (the in-process transport
// copies every frame, as a test network should, and would be measured
// instead of DDP). The metrics are one rank's bytes and allocations per
// step, the process's collections.
func benchDDPStep(b *testing.B, model func(*tensor.RNG) *nn.Sequential) {
	const world = 2
	var m *memStart
	opt := disttest.Options{TCP: true, SharedMemory: true, ShmRing: true}
	disttest.SpawnWith(b, world, opt, func(_ *disttest.Job, g *dist.Group) error {
		ctx := context.Background()
		d, err := ddp.New(ctx, model(tensor.NewRNG(uint64(g.Rank()))), g, ddp.Options{GradientAsBucketView: true})
		if err != nil {
			return err
		}
		x, y := fashionBatch(uint64(1 + g.Rank()))
		opt := optim.NewSGD(nn.Parameters(d), optim.SGDOptions{LR: 0.01, Momentum: 0.9})
		step := func() error {
			opt.ZeroGrad(true)
			if err := d.Prepare(ctx); err != nil {
				return err
			}
			loss := nn.CrossEntropy(nn.Call(d, x), y)
			if err := loss.Backward(nil); err != nil {
				return err
			}
			if err := d.Wait(ctx); err != nil {
				return err
			}
			opt.Step()
			return nil
		}
		for range 3 { // warm up: bucket rebuild, momentum buffers, pools
			if err := step(); err != nil {
				return err
			}
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		if g.Rank() == 0 {
			m = startMem(b)
		}
		for range b.N {
			if err := step(); err != nil {
				return err
			}
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		if g.Rank() == 0 {
			m.report(b, world)
		}
		return nil
	})
}

func BenchmarkDDPStepMLP(b *testing.B)   { benchDDPStep(b, MLP) }
func BenchmarkDDPStepLeNet(b *testing.B) { benchDDPStep(b, LeNet) }

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
