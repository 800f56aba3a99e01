package dp_test

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/dp"
	"github.com/godist/godist/tensor"
)

func mlp(seed uint64) *nn.Sequential {
	rng := tensor.NewRNG(seed)
	return nn.NewSequential(nn.NewLinear(rng, 6, 16, true), nn.NewTanh(), nn.NewLinear(rng, 16, 3, true))
}

// cnn is a small CNN over 1×8×8 inputs.
func cnn(seed uint64) *nn.Sequential {
	rng := tensor.NewRNG(seed)
	return nn.NewSequential(
		nn.NewConv2d(rng, 1, 4, 3, tensor.Conv2dParams{PadH: 1, PadW: 1}, true), nn.NewReLU(), nn.NewMaxPool2d(2),
		nn.NewConv2d(rng, 4, 6, 3, tensor.Conv2dParams{}, true), nn.NewReLU(),
		nn.NewFlatten(), nn.NewLinear(rng, 6*2*2, 3, true))
}

func batch(seed uint64, n int, shape ...int) (*tensor.Tensor, *tensor.Tensor) {
	rng := tensor.NewRNG(seed)
	x := tensor.Randn(rng, append([]int{n}, shape...)...)
	y := make([]int64, n)
	for i := range y {
		y[i] = int64(rng.IntN(3))
	}
	return x, tensor.FromInt64(y)
}

func closeTo(a, b *tensor.Tensor, tol float64) error {
	if !tensor.SameShape(a, b) {
		return fmt.Errorf("shape %v, want %v", a.Shape(), b.Shape())
	}
	av, bv := a.Values(), b.Values()
	for i := range av {
		if math.Abs(av[i]-bv[i]) > tol*(1+math.Abs(bv[i])) {
			return fmt.Errorf("element %d: %v, want %v", i, av[i], bv[i])
		}
	}
	return nil
}

// grads runs forward and backward of the mean cross-entropy through l and
// returns the loss, the output and every parameter's gradient (and the
// input's).
func grads(t *testing.T, l nn.Layer, params nn.Module, x, y *tensor.Tensor) (loss, out *tensor.Tensor, g map[string]*tensor.Tensor) {
	t.Helper()
	nn.ZeroGrad(params, true)
	xv := autograd.Param(x)
	o := nn.Call(l, xv)
	lv := nn.CrossEntropy(o, y)
	lv.Backward(nil)
	g = map[string]*tensor.Tensor{"input": xv.Grad()}
	for _, p := range nn.NamedParameters(params) {
		if p.Value.Grad() == nil {
			t.Fatalf("%s has no gradient", p.Name)
		}
		g[p.Name] = p.Value.Grad().Clone()
	}
	return lv.Value(), o.Value(), g
}

func TestGradientsEqualWholeBatch(t *testing.T) {
	models := []struct {
		name  string
		new   func(uint64) *nn.Sequential
		shape []int
	}{
		{"mlp", mlp, []int{6}},
		{"cnn", cnn, []int{1, 8, 8}},
	}
	for _, m := range models {
		// Batches smaller than, equal to and larger than the workers; odd
		// sizes; sizes that leave torch.chunk fewer chunks than workers.
		for _, n := range []int{1, 2, 3, 5, 7, 8, 13} {
			for _, workers := range []int{1, 2, 3, 4, 8} {
				t.Run(fmt.Sprintf("%s/n%d/w%d", m.name, n, workers), func(t *testing.T) {
					net := m.new(1)
					x, y := batch(uint64(n), n, m.shape...)
					wantLoss, wantOut, want := grads(t, net, net, x, y)
					par := dp.New(net, workers)
					if r := par.SerialReason(); r != "" {
						t.Fatalf("SerialReason %q for a stateless model", r)
					}
					loss, out, got := grads(t, par, net, x, y)
					if err := closeTo(out, wantOut, 1e-5); err != nil {
						t.Errorf("output: %v", err)
					}
					if err := closeTo(loss, wantLoss, 1e-5); err != nil {
						t.Errorf("loss: %v", err)
					}
					for name, g := range want {
						if err := closeTo(got[name], g, 1e-5); err != nil {
							t.Errorf("gradient of %s: %v", name, err)
						}
					}
				})
			}
		}
	}
}

func TestRepeatedStepsTrainLikeOneGoroutine(t *testing.T) {
	// A few SGD steps on each; the weights stay within float rounding.
	a, b := mlp(3), mlp(3)
	par := dp.New(b, 4)
	for step := range 5 {
		x, y := batch(uint64(100+step), 10, 6)
		for _, l := range []nn.Layer{a, par} {
			nn.ZeroGrad(l, true)
			nn.CrossEntropy(nn.Call(l, autograd.Const(x)), y).Backward(nil)
			for _, p := range nn.Parameters(l) {
				p.Value().AddScaled(p.Value(), -0.1, p.Grad())
			}
		}
	}
	pa, pb := nn.NamedParameters(a), nn.NamedParameters(b)
	for i := range pa {
		if err := closeTo(pb[i].Value.Value(), pa[i].Value.Value(), 1e-5); err != nil {
			t.Errorf("%s after 5 steps: %v", pa[i].Name, err)
		}
	}
}

func TestWorkersDefault(t *testing.T) {
	if got := dp.New(mlp(0), 0).Workers(); got != runtime.GOMAXPROCS(0) {
		t.Errorf("Workers() = %d, want GOMAXPROCS %d", got, runtime.GOMAXPROCS(0))
	}
	defer func() {
		if recover() == nil {
			t.Error("New with -1 workers did not panic")
		}
	}()
	dp.New(mlp(0), -1)
}

func TestStateDictNames(t *testing.T) {
	net := mlp(0)
	par := dp.New(net, 2)
	keys := nn.StateDictKeys(par)
	want := []string{"module.0.weight", "module.0.bias", "module.2.weight", "module.2.bias"}
	if !slices.Equal(keys, want) {
		t.Fatalf("state dict keys %v, want %v", keys, want)
	}
	sd := par.StateDict()
	for _, k := range want {
		if sd[k] == nil {
			t.Errorf("StateDict lacks %s", k)
		}
	}
	if sd["module.0.weight"] != net.Layers[0].(*nn.Linear).Weight.Value() {
		t.Error("state dict tensor is not the module's own")
	}
	// The parameters are the module's: an optimizer over either is the same.
	if !slices.Equal(nn.Parameters(par), nn.Parameters(net)) {
		t.Error("DataParallel's parameters differ from the module's")
	}
	// Round trip into a fresh DataParallel.
	other := dp.New(mlp(9), 3)
	if err := nn.LoadStateDict(other, sd, true); err != nil {
		t.Fatal(err)
	}
	if !tensor.Equal(other.Module.(*nn.Sequential).Layers[2].(*nn.Linear).Bias.Value(), net.Layers[2].(*nn.Linear).Bias.Value()) {
		t.Error("loaded state differs")
	}
}

// bnNet is Linear, BatchNorm1d, ReLU, Linear.
func bnNet(seed uint64) *nn.Sequential {
	rng := tensor.NewRNG(seed)
	return nn.NewSequential(nn.NewLinear(rng, 6, 5, true), nn.NewBatchNorm1d(5), nn.NewReLU(), nn.NewLinear(rng, 5, 3, true))
}

func TestBatchNormRunsSeriallyAsPyTorch(t *testing.T) {
	const n, workers = 8, 3 // chunks of 3, 3, 2
	x, y := batch(7, n, 6)
	net := bnNet(2)
	par := dp.New(net, workers)
	reason := par.SerialReason()
	if !strings.Contains(reason, "BatchNorm") || !strings.Contains(reason, "1.running_mean") {
		t.Fatalf("SerialReason %q, want it to name the BatchNorm and its buffers", reason)
	}
	_, out, got := grads(t, par, net, x, y)

	// Reference: each chunk through its own copy of the model (same seed,
	// same weights), as the replicas of torch.nn.DataParallel; the first
	// chunk's copy shares the module's buffers.
	var outs []*autograd.Var
	var firstMean *tensor.Tensor
	for i, c := range autograd.Chunk(autograd.Const(x), 0, workers) {
		r := bnNet(2)
		outs = append(outs, nn.Call(r, c))
		if i == 0 {
			firstMean = r.Layers[1].(*nn.BatchNorm).RunningMean()
		}
	}
	wantOut := autograd.Cat(0, outs...)
	if err := closeTo(out, wantOut.Value(), 1e-5); err != nil {
		t.Errorf("output: %v", err)
	}
	bn := net.Layers[1].(*nn.BatchNorm)
	if err := closeTo(bn.RunningMean(), firstMean, 1e-6); err != nil {
		t.Errorf("running mean after the forward pass is not the first chunk's update: %v", err)
	}
	if nb := bn.Buffer("num_batches_tracked").Item(); nb != 1 {
		t.Errorf("num_batches_tracked %v after one forward pass, want 1", nb)
	}
	if got["1.weight"] == nil {
		t.Error("BatchNorm weight got no gradient")
	}

	// In evaluation mode BatchNorm only reads its statistics: the chunks
	// run concurrently and the output is the whole batch's.
	nn.Eval(par)
	if r := par.SerialReason(); r != "" {
		t.Errorf("SerialReason in eval mode %q, want none", r)
	}
	var whole, split *tensor.Tensor
	autograd.NoGrad(func() {
		whole = nn.Call(net, autograd.Const(x)).Value()
		split = nn.Call(par, autograd.Const(x)).Value()
	})
	if err := closeTo(split, whole, 1e-6); err != nil {
		t.Errorf("eval output: %v", err)
	}
	// Only a module in training mode counts: the BatchNorm alone in eval.
	nn.Train(par)
	nn.Eval(bn)
	if r := par.SerialReason(); r != "" {
		t.Errorf("SerialReason with BatchNorm in eval mode %q, want none", r)
	}
}

func TestDropoutRunsSerially(t *testing.T) {
	rng := tensor.NewRNG(1)
	net := nn.NewSequential(nn.NewLinear(rng, 6, 8, true), nn.NewDropout(0.5, tensor.NewRNG(5)), nn.NewLinear(rng, 8, 3, true))
	par := dp.New(net, 4)
	if r := par.SerialReason(); !strings.Contains(r, "Dropout") {
		t.Fatalf("SerialReason %q, want it to name the Dropout", r)
	}
	x, y := batch(3, 16, 6)
	// Run serially in chunk order, one Dropout layer draws its masks in the
	// whole batch's row-major order: the same masks as one call.
	ref := nn.NewSequential(nn.NewLinear(tensor.NewRNG(1), 6, 8, true), nn.NewDropout(0.5, tensor.NewRNG(5)), nn.NewLinear(tensor.NewRNG(1), 8, 3, true))
	if err := nn.LoadStateDict(ref, nn.StateDict(net), true); err != nil {
		t.Fatal(err)
	}
	_, want, _ := grads(t, ref, ref, x, y)
	_, got, _ := grads(t, par, net, x, y)
	if err := closeTo(got, want, 1e-5); err != nil {
		t.Errorf("output: %v", err)
	}
	nn.Eval(par)
	if r := par.SerialReason(); r != "" {
		t.Errorf("SerialReason in eval mode %q, want none", r)
	}
}

// picky panics on chunks of one row.
type picky struct {
	nn.Base
	lin *nn.Linear
}

func (p *picky) Forward(x *autograd.Var) *autograd.Var {
	if x.Value().Size(0) == 1 {
		panic(fmt.Errorf("picky: a chunk of one row"))
	}
	return nn.Call(p.lin, x)
}

func TestPanicReachesCaller(t *testing.T) {
	p := &picky{lin: nn.NewLinear(tensor.NewRNG(0), 6, 3, true)}
	p.RegisterModule("lin", p.lin)
	par := dp.New(p, 4)
	x, _ := batch(0, 7, 6) // chunks of 2, 2, 2, 1
	defer func() {
		r := recover()
		err, ok := r.(error)
		if !ok || err.Error() != "picky: a chunk of one row" {
			t.Errorf("recovered %v, want the module's panic value", r)
		}
	}()
	nn.Call(par, autograd.Const(x))
	t.Error("no panic")
}

// scalarOut returns one number per chunk.
type scalarOut struct{ nn.Base }

func (scalarOut) Forward(x *autograd.Var) *autograd.Var { return autograd.SumAll(x) }

func TestScalarOutputsAreStacked(t *testing.T) {
	x, _ := batch(0, 5, 2)
	out := nn.Call(dp.New(&scalarOut{}, 2), autograd.Const(x)) // chunks of 3, 2
	if got := out.Shape(); !slices.Equal(got, []int{2}) {
		t.Fatalf("output shape %v, want [2]", got)
	}
	want := x.Values()
	s0, s1 := 0.0, 0.0
	for i, v := range want {
		if i < 6 {
			s0 += v
		} else {
			s1 += v
		}
	}
	if err := closeTo(out.Value(), tensor.FromFloat32([]float32{float32(s0), float32(s1)}), 1e-5); err != nil {
		t.Error(err)
	}
}
