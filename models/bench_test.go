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
// batch of 64 random Fashion-MNIST-shaped inputs. Besides the time it
// reports what a step costs the Go heap once warm: bytes and allocations
// (B/step, allocs/step) and garbage collections (GCs/step).
func benchStep(b *testing.B, net *nn.Sequential) {
	step := trainStep(net, nil, 1, true)
	for range warmSteps {
		must(b, step())
	}
	b.ReportAllocs()
	m := startMem(b)
	for range b.N {
		must(b, step())
	}
	m.report(b, 1)
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

// benchDDPStep is benchStep under DDP at world 2 (see onDDPRanks). The
// metrics are one rank's bytes and allocations per step, the process's
// collections.
func benchDDPStep(b *testing.B, model func(*tensor.RNG) *nn.Sequential) {
	var m *memStart
	onDDPRanks(b, model, func(rank int, step, barrier func() error) error {
		if err := barrier(); err != nil {
			return err
		}
		if rank == 0 {
			m = startMem(b)
		}
		for range b.N {
			if err := step(); err != nil {
				return err
			}
		}
		if err := barrier(); err != nil {
			return err
		}
		if rank == 0 {
			m.report(b, ddpWorld)
		}
		return nil
	})
}

func BenchmarkDDPStepMLP(b *testing.B)   { benchDDPStep(b, MLP) }
func BenchmarkDDPStepLeNet(b *testing.B) { benchDDPStep(b, LeNet) }

// BenchmarkLSTMStep measures one training step (forward, loss, backward,
// Adam) of the LSTM classifier on a batch of 64 random Fashion-MNIST-shaped
// inputs (64, 28 rows, 28 columns). tools/lstmbench runs the same
// step in PyTorch; `make bench` (tools/corebench) puts both in its
// table.
func BenchmarkLSTMStep(b *testing.B) { benchRecurrentStep(b, LSTMClassifier(tensor.NewRNG(0))) }

// BenchmarkGRUStep is BenchmarkLSTMStep with the GRU classifier.
func BenchmarkGRUStep(b *testing.B) { benchRecurrentStep(b, GRUClassifier(tensor.NewRNG(0))) }

func benchRecurrentStep(b *testing.B, net *RecurrentClassifier) {
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
