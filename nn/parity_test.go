package nn_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint"
	"github.com/godist/godist/checkpoint/paritytest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

// The reference values come from PyTorch 1.13 via
// testdata/parity/make_parity.py. Tolerance: the largest elementwise
// difference, relative to the largest magnitude in PyTorch's tensor, is at
// most 1e-5 (float32 throughout).
const parityTol = 1e-5

var parityRef = &paritytest.Ref{Path: filepath.Join("..", "testdata", "parity", "parity.safetensors")}

func reference(t *testing.T) map[string]*tensor.Tensor { t.Helper(); return parityRef.All(t) }

func get(t *testing.T, name string) *tensor.Tensor { t.Helper(); return parityRef.Get(t, name) }

func relErr(got, want *tensor.Tensor) float64 { return paritytest.RelErr(got, want) }

func expect(t *testing.T, what string, got *tensor.Tensor, wantName string) {
	t.Helper()
	parityRef.Expect(t, what, got, wantName, parityTol)
}

func param(t *testing.T, name string) *autograd.Var { return autograd.Param(get(t, name).Clone()) }

func TestParityLinear(t *testing.T) {
	x := param(t, "linear.x")
	l := nn.NewLinear(tensor.NewRNG(0), 5, 3, true)
	loadInto(t, l, "linear.")
	y := nn.Call(l, x)
	expect(t, "y", y.Value(), "linear.y")
	y.Backward(get(t, "linear.g"))
	expect(t, "dx", x.Grad(), "linear.grad.x")
	expect(t, "dW", l.Weight.Grad(), "linear.grad.weight")
	expect(t, "db", l.Bias.Grad(), "linear.grad.bias")
}

// loadInto loads reference tensors prefix+name into m's state dict.
func loadInto(t *testing.T, m nn.Module, prefix string) {
	t.Helper()
	sd := map[string]*tensor.Tensor{}
	for _, k := range nn.StateDictKeys(m) {
		if v, ok := reference(t)[prefix+k]; ok {
			sd[k] = v
		}
	}
	if err := nn.LoadStateDict(m, sd, false); err != nil {
		t.Fatal(err)
	}
}

func TestParityConv2d(t *testing.T) {
	for _, c := range []struct {
		name   string
		kernel int
		p      tensor.Conv2dParams
	}{
		{"conv", 5, tensor.Conv2dParams{PadH: 2, PadW: 2}},
		{"conv_s2", 3, tensor.Conv2dParams{StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := param(t, c.name+".x")
			conv := nn.NewConv2d(tensor.NewRNG(0), 3, 4, c.kernel, c.p, true)
			loadInto(t, conv, c.name+".")
			y := nn.Call(conv, x)
			expect(t, "y", y.Value(), c.name+".y")
			y.Backward(get(t, c.name+".g"))
			expect(t, "dx", x.Grad(), c.name+".grad.x")
			expect(t, "dW", conv.Weight.Grad(), c.name+".grad.weight")
			expect(t, "db", conv.Bias.Grad(), c.name+".grad.bias")
		})
	}
}

func TestParityMaxPool2d(t *testing.T) {
	x := param(t, "maxpool.x")
	y := nn.Call(nn.NewMaxPool2d(2), x)
	expect(t, "y", y.Value(), "maxpool.y")
	y.Backward(get(t, "maxpool.g"))
	expect(t, "dx", x.Grad(), "maxpool.grad.x")
}

func TestParityBatchNorm2d(t *testing.T) {
	bn := nn.NewBatchNorm2d(3)
	loadInto(t, bn, "bn.")
	x := param(t, "bn_train.x")
	y := nn.Call(bn, x)
	expect(t, "train y", y.Value(), "bn_train.y")
	y.Backward(get(t, "bn_train.g"))
	expect(t, "train dx", x.Grad(), "bn_train.grad.x")
	expect(t, "train dw", bn.Weight.Grad(), "bn_train.grad.weight")
	expect(t, "train db", bn.Bias.Grad(), "bn_train.grad.bias")
	expect(t, "running mean", bn.RunningMean(), "bn_train.running_mean")
	expect(t, "running var", bn.RunningVar(), "bn_train.running_var")

	nn.ZeroGrad(bn, true)
	nn.Eval(bn)
	x = param(t, "bn_eval.x")
	y = nn.Call(bn, x)
	expect(t, "eval y", y.Value(), "bn_eval.y")
	y.Backward(get(t, "bn_eval.g"))
	expect(t, "eval dx", x.Grad(), "bn_eval.grad.x")
	expect(t, "eval dw", bn.Weight.Grad(), "bn_eval.grad.weight")
	expect(t, "eval db", bn.Bias.Grad(), "bn_eval.grad.bias")
}

func TestParityLSTM(t *testing.T) {
	lstm := nn.NewLSTM(tensor.NewRNG(0), 5, 4, nn.RNNOptions{Layers: 2})
	loadInto(t, lstm, "lstm.")
	x, h0, c0 := param(t, "lstm.x"), param(t, "lstm.h0"), param(t, "lstm.c0")
	out, hn, cn := lstm.Forward(x, h0, c0)
	expect(t, "out", out.Value(), "lstm.out")
	expect(t, "hn", hn.Value(), "lstm.hn")
	expect(t, "cn", cn.Value(), "lstm.cn")
	dot := func(v *autograd.Var, g string) *autograd.Var {
		return autograd.SumAll(autograd.Mul(v, autograd.Const(get(t, g))))
	}
	loss := autograd.Add(dot(out, "lstm.g_out"), autograd.Add(dot(hn, "lstm.g_hn"), dot(cn, "lstm.g_cn")))
	loss.Backward(nil)
	expect(t, "dx", x.Grad(), "lstm.grad.x")
	expect(t, "dh0", h0.Grad(), "lstm.grad.h0")
	expect(t, "dc0", c0.Grad(), "lstm.grad.c0")
	for _, p := range nn.NamedParameters(lstm) {
		expect(t, "d"+p.Name, p.Value.Grad(), "lstm.grad."+p.Name)
	}
}

func TestParityCrossEntropy(t *testing.T) {
	logits := param(t, "ce.logits")
	loss := nn.CrossEntropy(logits, get(t, "ce.target"))
	expect(t, "loss", loss.Value(), "ce.loss")
	loss.Backward(nil)
	expect(t, "dlogits", logits.Grad(), "ce.grad.logits")
}

func TestParityLeNetSteps(t *testing.T) {
	net := models.LeNet(tensor.NewRNG(0))
	loadInto(t, net, "lenet.init.")
	opt := optim.NewSGD(nn.Parameters(net), optim.SGDOptions{LR: 0.01, Momentum: 0.9})
	for step := range 3 {
		pre := fmt.Sprintf("lenet.step%d.", step)
		opt.ZeroGrad(true)
		loss := nn.CrossEntropy(nn.Call(net, autograd.Const(get(t, pre+"x"))), get(t, pre+"y"))
		expect(t, pre+"loss", loss.Value(), pre+"loss")
		loss.Backward(nil)
		if step == 0 {
			for _, p := range nn.NamedParameters(net) {
				expect(t, "step 0 grad "+p.Name, p.Value.Grad(), pre+"grad."+p.Name)
			}
		}
		opt.Step()
	}
	for name, v := range nn.StateDict(net) {
		expect(t, "after 3 steps "+name, v, "lenet.final."+name)
	}
}

func TestParityOptimizers(t *testing.T) {
	for _, c := range []struct {
		name string
		make func([]*autograd.Var) optim.Optimizer
	}{
		{"sgd", func(p []*autograd.Var) optim.Optimizer { return optim.NewSGD(p, optim.SGDOptions{LR: 0.1}) }},
		{"sgd_momentum", func(p []*autograd.Var) optim.Optimizer {
			return optim.NewSGD(p, optim.SGDOptions{LR: 0.1, Momentum: 0.9, Dampening: 0.1, WeightDecay: 0.01})
		}},
		{"sgd_nesterov", func(p []*autograd.Var) optim.Optimizer {
			return optim.NewSGD(p, optim.SGDOptions{LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 0.01})
		}},
		{"adam", func(p []*autograd.Var) optim.Optimizer {
			return optim.NewAdam(p, optim.AdamOptions{LR: 0.01, WeightDecay: 0.01})
		}},
		{"adam_amsgrad", func(p []*autograd.Var) optim.Optimizer {
			return optim.NewAdam(p, optim.AdamOptions{LR: 0.01, Beta1: 0.8, Beta2: 0.99, AMSGrad: true})
		}},
		{"adamw", func(p []*autograd.Var) optim.Optimizer {
			return optim.NewAdamW(p, optim.AdamOptions{LR: 0.01, WeightDecay: 0.1})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := param(t, "optim.p0")
			opt := c.make([]*autograd.Var{p})
			for i := range 4 {
				p.SetGrad(get(t, fmt.Sprintf("optim.g%d", i)).Clone())
				opt.Step()
				expect(t, fmt.Sprintf("after step %d", i), p.Value(), fmt.Sprintf("optim.%s.after%d", c.name, i))
				if i == 1 {
					// A state dict taken mid-run restores the trajectory.
					sd := opt.StateDict()
					clone := c.make([]*autograd.Var{p})
					if err := clone.LoadStateDict(sd); err != nil {
						t.Fatal(err)
					}
					opt = clone
				}
			}
		})
	}
}

func TestParityStepLR(t *testing.T) {
	p := autograd.Param(tensor.Zeros(1))
	opt := optim.NewSGD([]*autograd.Var{p}, optim.SGDOptions{LR: 1})
	s := optim.NewStepLR(opt, 2, 0.5)
	var lrs []float64
	for range 5 {
		s.Step()
		lrs = append(lrs, opt.LR())
	}
	expect(t, "lrs", tensor.FromFloat64(lrs), "steplr.lrs")
}

func TestReferenceIsFromPyTorch(t *testing.T) {
	_, meta, err := checkpoint.LoadFile(filepath.Join("..", "testdata", "parity", "parity.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(meta["torch"], "1.13") {
		t.Fatalf("reference made by torch %q, want 1.13", meta["torch"])
	}
}

// TestParityTorchInit checks that a torch-compatible generator gives the
// anchor models exactly PyTorch's initial weights after torch.manual_seed(0),
// and torch.randperm's order.
func TestParityTorchInit(t *testing.T) {
	for _, kind := range []string{"mlp", "lenet"} {
		m, err := models.New(kind, tensor.NewTorchRNG(0))
		if err != nil {
			t.Fatal(err)
		}
		for name, v := range nn.StateDict(m) {
			want := get(t, "init0."+kind+"."+name)
			if !tensor.Equal(v, want) {
				t.Fatalf("%s %s: initial weights differ from PyTorch's (relative error %.3g)", kind, name, relErr(v, want))
			}
		}
	}
	perm := tensor.NewTorchRNG(3).Perm(1000)
	want := get(t, "randperm.seed3").Values()
	for i := range perm {
		if float64(perm[i]) != want[i] {
			t.Fatalf("randperm(1000) with seed 3 differs at %d: %d, PyTorch %v", i, perm[i], want[i])
		}
	}
}
