package optim_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint/paritytest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

var scalerRef = &paritytest.Ref{Path: filepath.Join("..", "testdata", "parity", "gradscaler_parity.safetensors")}

// TestGradScalerParity trains PyTorch's float16 reference
// (testdata/parity/make_gradscaler_parity.py: a two-layer perceptron with
// its products in float16, torch.cuda.amp.GradScaler's own logic from a
// scale of 2^24 growing every 4 steps, SGD with momentum, 40 steps) under
// autograd.Autocast(tensor.Float16, ...) and a GradScaler, and checks
// that every step used PyTorch's scale and skipped (its gradients
// overflowed float16) exactly where PyTorch's did, that the losses follow
// PyTorch's, and that the trained parameters are PyTorch's. The same
// training in float32 without the scaler steps at every step, so the
// skips cannot come from anything but float16's range.
func TestGradScalerParity(t *testing.T) {
	ctx := context.Background()
	xs, labels := scalerRef.Get(t, "x"), scalerRef.Get(t, "labels")
	wantScale, wantSkip := scalerRef.Get(t, "scale").Values(), scalerRef.Get(t, "skipped").Values()
	steps := xs.Size(0)
	p := func(name string) *autograd.Var { return autograd.Param(scalerRef.Get(t, name).Clone()) }
	w1, b1, w2, b2 := p("w1"), p("b1"), p("w2"), p("b2")
	opt := optim.NewSGD([]*autograd.Var{w1, b1, w2, b2}, optim.SGDOptions{LR: 0.05, Momentum: 0.9})
	scaler := optim.NewGradScaler(optim.GradScalerOptions{InitScale: 1 << 24, GrowthInterval: 4})
	var losses []float64
	skips := 0
	for s := range steps {
		x := autograd.Const(xs.Select(0, s).Contiguous())
		y := labels.Select(0, s).Contiguous().To(tensor.Int64)
		opt.ZeroGrad(true)
		var loss *autograd.Var
		autograd.Autocast(tensor.Float16, func() {
			h := autograd.Gelu(autograd.Linear(x, w1, b1))
			loss = nn.CrossEntropy(autograd.Linear(h, w2, b2), y)
		})
		if scale := scaler.GetScale(); scale != wantScale[s] {
			t.Fatalf("step %d: scale %v, PyTorch's %v", s, scale, wantScale[s])
		}
		if err := scaler.Scale(loss).Backward(nil); err != nil {
			t.Fatal(err)
		}
		stepped, err := scaler.Step(ctx, opt)
		if err != nil {
			t.Fatal(err)
		}
		if skip := !stepped; skip != (wantSkip[s] == 1) {
			t.Fatalf("step %d (scale %v): skipped %v, PyTorch's %v", s, wantScale[s], skip, wantSkip[s] == 1)
		}
		if !stepped {
			skips++
		}
		if err := scaler.Update(); err != nil {
			t.Fatal(err)
		}
		losses = append(losses, loss.Value().Item())
	}
	t.Logf("%d of %d steps skipped", skips, steps)
	scalerRef.ExpectValues(t, "losses", losses, "loss", 1e-4)
	for _, c := range []struct {
		v    *autograd.Var
		name string
	}{{w1, "f_w1"}, {b1, "f_b1"}, {w2, "f_w2"}, {b2, "f_b2"}} {
		scalerRef.Expect(t, c.name, c.v.Value(), c.name, 1e-4)
	}

	// float32, no scaler: the same scale of 2^24 overflows nothing.
	w1, b1, w2, b2 = p("w1"), p("b1"), p("w2"), p("b2")
	opt = optim.NewSGD([]*autograd.Var{w1, b1, w2, b2}, optim.SGDOptions{LR: 0.05, Momentum: 0.9})
	scaler = optim.NewGradScaler(optim.GradScalerOptions{InitScale: 1 << 24, GrowthInterval: 4})
	for s := range 8 {
		opt.ZeroGrad(true)
		x := autograd.Const(xs.Select(0, s).Contiguous())
		loss := nn.CrossEntropy(autograd.Linear(autograd.Gelu(autograd.Linear(x, w1, b1)), w2, b2), labels.Select(0, s).Contiguous().To(tensor.Int64))
		if err := scaler.Scale(loss).Backward(nil); err != nil {
			t.Fatal(err)
		}
		if stepped, err := scaler.Step(ctx, opt); err != nil || !stepped {
			t.Fatalf("float32 step %d: stepped %v, %v; want a step (nothing overflows float32)", s, stepped, err)
		}
		if err := scaler.Update(); err != nil {
			t.Fatal(err)
		}
	}
}
