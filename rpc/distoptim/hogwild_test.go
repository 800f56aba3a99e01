package distoptim_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/rpc/distoptim"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// TestConcurrentOptimizersSameParams: two trainers each make their own
// distributed optimizer over the same parameter on one owner (as in the
// parameter-server tutorial) and step concurrently, each with its own
// gradient (1 and 2 everywhere). Every step must use its own context's
// gradient: after n steps each the parameter is exactly -lr·3n (the
// values are multiples of a power of two, so no rounding), and the race
// detector sees the steps take turns.
func TestConcurrentOptimizersSameParams(t *testing.T) {
	const lr, n = 1.0 / 1024, 100
	var inside, overlaps atomic.Int32
	distoptim.RegisterConstructor("sgd-hogwild", func(ps []*autograd.Var) optim.Optimizer {
		return &slowStep{SGD: optim.NewSGD(ps, optim.SGDOptions{LR: lr}), inside: &inside, overlaps: &overlaps}
	})
	w := autograd.Param(tensor.Zeros(2, 3))
	var scaled rpc.Fn[*distautograd.Var, *distautograd.Var]
	var param rpc.Fn[struct{}, *autograd.Var]
	m := transport.NewInProc(3, transport.Faults{})
	agents := make([]*rpc.Agent, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		reg := rpc.NewRegistry()
		if err := distoptim.Register(reg); err != nil {
			t.Fatal(err)
		}
		param, _ = rpc.Register(reg, "param", func(context.Context, struct{}) (*autograd.Var, error) { return w, nil })
		// The gradient of w is k everywhere.
		scaled, _ = rpc.Register(reg, "scaled", func(_ context.Context, k *distautograd.Var) (*distautograd.Var, error) {
			return distautograd.Wrap(autograd.Apply(gradOf{k.Value()}, w)), nil
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			a, err := rpc.Init(ctx, "", rpc.Options{Group: dist.FromEndpoint(m.Endpoints[r], nil, "inproc", 10*time.Second), Functions: reg})
			if err != nil {
				t.Error(err)
			}
			agents[r] = a
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, a := range agents {
			if a != nil {
				a.Shutdown(context.Background(), false)
			}
		}
		m.Close()
	})
	if t.Failed() {
		t.FailNow()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for i, r := range []int{0, 2} {
		k := float64(i + 1)
		go func() {
			errs <- func() error {
				a := agents[r]
				ref, err := param.Remote(ctx, a, "worker1", struct{}{})
				if err != nil {
					return err
				}
				opt, err := distoptim.New(ctx, a, "sgd-hogwild", []*rpc.RRef[*autograd.Var]{ref})
				if err != nil {
					return err
				}
				defer opt.Release()
				for range n {
					cctx, id, err := distautograd.NewContext(ctx, a)
					if err != nil {
						return err
					}
					y, err := scaled.Call(cctx, a, "worker1", distautograd.Wrap(autograd.Const(tensor.Full(tensor.Float32, k, 2, 3))))
					if err != nil {
						return err
					}
					if err := distautograd.Backward(cctx, id, y.Var); err != nil {
						return err
					}
					if err := opt.Step(cctx, id); err != nil {
						return err
					}
					distautograd.Release(cctx, id)
				}
				return nil
			}()
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if o := overlaps.Load(); o > 0 {
		t.Errorf("%d steps of the owner's two optimizers overlapped", o)
	}
	for i, v := range w.Value().Values() {
		if v != -lr*3*n {
			t.Fatalf("w[%d] = %v after %d steps of gradient 1 and %d of gradient 2 at lr %v, want %v", i, v, n, n, lr, -lr*3*n)
		}
	}
}

// gradOf is a scalar function of its input whose gradient is g. Its
// forward does not read the input, which the other trainer's step may be
// writing (the test is about the steps, not about Hogwild reads).
type gradOf struct{ g *tensor.Tensor }

func (f gradOf) Forward([]*tensor.Tensor) *tensor.Tensor { return tensor.Zeros() }
func (f gradOf) Backward(*tensor.Tensor) []*tensor.Tensor {
	return []*tensor.Tensor{f.g.Clone()}
}

// slowStep is SGD whose step takes a millisecond and counts the steps that
// began while another was running.
type slowStep struct {
	*optim.SGD
	inside, overlaps *atomic.Int32
}

func (s *slowStep) Step() {
	if s.inside.Add(1) > 1 {
		s.overlaps.Add(1)
	}
	time.Sleep(time.Millisecond)
	s.SGD.Step()
	s.inside.Add(-1)
}
