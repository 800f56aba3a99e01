package nn

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

func rnd(g *tensor.RNG, shape ...int) *tensor.Tensor {
	return tensor.New(tensor.Float64, shape...).Normal(g, 0, 1)
}

func TestGradCheckFunctions(t *testing.T) {
	g := tensor.NewRNG(3)
	rm, rv := tensor.New(tensor.Float64, 3), tensor.Full(tensor.Float64, 1, 3)
	evalMean := rnd(g, 3)
	cases := []struct {
		name string
		f    func(in []*autograd.Var) *autograd.Var
		in   []*tensor.Tensor
	}{
		{"BatchNorm2d train", func(v []*autograd.Var) *autograd.Var {
			return autograd.Apply(&batchNormFn{training: true, eps: 1e-5, momentum: 0.1, runMean: rm.Clone(), runVar: rv.Clone()}, v...)
		}, []*tensor.Tensor{rnd(g, 4, 3, 2, 2), rnd(g, 3), rnd(g, 3)}},
		{"BatchNorm1d train", func(v []*autograd.Var) *autograd.Var {
			return autograd.Apply(&batchNormFn{training: true, eps: 1e-5, momentum: 0.1, runMean: rm.Clone(), runVar: rv.Clone()}, v...)
		}, []*tensor.Tensor{rnd(g, 5, 3), rnd(g, 3), rnd(g, 3)}},
		{"BatchNorm eval", func(v []*autograd.Var) *autograd.Var {
			return autograd.Apply(&batchNormFn{eps: 1e-5, mean: evalMean, variance: tensor.Full(tensor.Float64, 2, 3)}, v...)
		}, []*tensor.Tensor{rnd(g, 2, 3, 2), rnd(g, 3), rnd(g, 3)}},
		{"LayerNorm", func(v []*autograd.Var) *autograd.Var {
			return autograd.Apply(&layerNormFn{eps: 1e-5, d: 6}, v...)
		}, []*tensor.Tensor{rnd(g, 3, 2, 3), rnd(g, 2, 3), rnd(g, 2, 3)}},
		{"CrossEntropy", func(v []*autograd.Var) *autograd.Var {
			return CrossEntropy(v[0], tensor.FromInt64([]int64{2, 0, 1, 2}))
		}, []*tensor.Tensor{rnd(g, 4, 3)}},
		{"NLLLoss", func(v []*autograd.Var) *autograd.Var {
			return NLLLoss(autograd.LogSoftmax(v[0], 1), tensor.FromInt64([]int64{1, 0, 3}))
		}, []*tensor.Tensor{rnd(g, 3, 4)}},
		{"MSELoss", func(v []*autograd.Var) *autograd.Var { return MSELoss(v[0], v[1]) }, []*tensor.Tensor{rnd(g, 3, 4), rnd(g, 3, 4)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := autograd.GradCheck(c.f, c.in, 1e-6, 1e-6, 1e-5); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// toFloat64 turns a module's float32 parameters into float64 ones.
func toFloat64(m Module) {
	for _, p := range Parameters(m) {
		p.SetValue(p.Value().To(tensor.Float64))
	}
}

func TestGradCheckRecurrent(t *testing.T) {
	g := tensor.NewRNG(4)
	lstm := NewLSTM(g, 3, 4, RNNOptions{Layers: 2})
	toFloat64(lstm)
	ps := Parameters(lstm)
	in := []*tensor.Tensor{rnd(g, 5, 2, 3), rnd(g, 2, 2, 4), rnd(g, 2, 2, 4)}
	for _, p := range ps {
		in = append(in, p.Value())
	}
	err := autograd.GradCheck(func(v []*autograd.Var) *autograd.Var {
		setRecurrent(&lstm.recurrent, v[3:])
		out, hn, cn := lstm.Forward(v[0], v[1], v[2])
		return autograd.Add(autograd.SumAll(out), autograd.Add(autograd.SumAll(autograd.Square(hn)), autograd.SumAll(cn)))
	}, in, 1e-6, 1e-6, 1e-5)
	if err != nil {
		t.Fatal("LSTM:", err)
	}

	rnn := NewRNN(g, 3, 4, RNNOptions{BatchFirst: true})
	toFloat64(rnn)
	in = []*tensor.Tensor{rnd(g, 2, 5, 3)}
	for _, p := range Parameters(rnn) {
		in = append(in, p.Value())
	}
	err = autograd.GradCheck(func(v []*autograd.Var) *autograd.Var {
		setRecurrent(&rnn.recurrent, v[1:])
		out, hn := rnn.Forward(v[0], nil)
		return autograd.Add(autograd.SumAll(out), autograd.SumAll(hn))
	}, in, 1e-6, 1e-6, 1e-5)
	if err != nil {
		t.Fatal("RNN:", err)
	}
}

// setRecurrent points the recurrent weights at v, in registration order.
func setRecurrent(r *recurrent, v []*autograd.Var) {
	for l := range r.Layers {
		r.wih[l], r.whh[l], r.bih[l], r.bhh[l] = v[4*l], v[4*l+1], v[4*l+2], v[4*l+3]
	}
}

func lenetBN(rng *tensor.RNG) *Sequential {
	return NewSequential(
		NewConv2d(rng, 1, 6, 5, tensor.Conv2dParams{PadH: 2, PadW: 2}, true), NewBatchNorm2d(6), NewReLU(), NewMaxPool2d(2),
		NewConv2d(rng, 6, 16, 5, tensor.Conv2dParams{}, true), NewReLU(), NewMaxPool2d(2),
		NewFlatten(), NewLinear(rng, 400, 120, true), NewReLU(), NewLinear(rng, 120, 84, true), NewReLU(),
		NewLinear(rng, 84, 10, true))
}

func TestStateDictNamesAndRoundTrip(t *testing.T) {
	m := lenetBN(tensor.NewRNG(1))
	want := []string{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked",
		"4.weight", "4.bias", "8.weight", "8.bias", "10.weight", "10.bias", "12.weight", "12.bias"}
	if got := StateDictKeys(m); !slices.Equal(got, want) {
		t.Fatalf("keys %v\nwant %v", got, want)
	}
	if n := NumParameters(m); n != 61706+12 {
		t.Fatalf("%d parameters, want 61718 (LeNet 61706 + BatchNorm 12)", n)
	}
	sd := StateDict(m)
	if sd["1.num_batches_tracked"].DType() != tensor.Int64 || sd["1.num_batches_tracked"].Dim() != 0 {
		t.Fatal("num_batches_tracked is not a 0-d int64")
	}
	other := lenetBN(tensor.NewRNG(2))
	if tensor.Equal(StateDict(other)["0.weight"], sd["0.weight"]) {
		t.Fatal("different seeds gave equal weights")
	}
	if err := LoadStateDict(other, sd, true); err != nil {
		t.Fatal(err)
	}
	if !tensor.Equal(StateDict(other)["8.weight"], sd["8.weight"]) {
		t.Fatal("LoadStateDict did not copy")
	}
	delete(sd, "4.bias")
	sd["extra"] = tensor.Zeros(1)
	sd["0.weight"] = tensor.Zeros(3)
	err := LoadStateDict(other, sd, true)
	for _, s := range []string{"missing keys 4.bias", "unexpected keys extra", "0.weight: checkpoint [3], model [6 1 5 5]"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Fatalf("error %v does not mention %q", err, s)
		}
	}
}

func TestTrainEvalAndBatchNormBuffers(t *testing.T) {
	bn := NewBatchNorm2d(2)
	x := autograd.Const(tensor.Randn(tensor.NewRNG(5), 4, 2, 3, 3))
	bn.Forward(x)
	if bn.RunningMean().At(0) == 0 || bn.Buffer("num_batches_tracked").Item() != 1 {
		t.Fatal("training forward did not update running statistics")
	}
	m := NewSequential(bn, NewDropout(0.5, tensor.NewRNG(1)))
	Eval(m)
	if bn.Training() {
		t.Fatal("Eval did not reach children")
	}
	before := bn.RunningMean().Clone()
	y1 := Call(m, x).Value()
	y2 := Call(m, x).Value()
	if !tensor.Equal(y1, y2) || !tensor.Equal(before, bn.RunningMean()) {
		t.Fatal("evaluation is not deterministic or changed running statistics")
	}
	Train(m)
	if !m.Layers[1].(*Dropout).Training() {
		t.Fatal("Train did not reach children")
	}
}

func TestForwardHooks(t *testing.T) {
	l := NewLinear(tensor.NewRNG(1), 2, 2, false)
	var calls []string
	removePre := l.RegisterForwardPreHook(func(m Module, x *autograd.Var) *autograd.Var {
		calls = append(calls, "pre")
		return autograd.MulScalar(x, 0)
	})
	l.RegisterForwardHook(func(m Module, x, y *autograd.Var) *autograd.Var {
		calls = append(calls, "post")
		return nil
	})
	y := Call(NewSequential(l), autograd.Const(tensor.FromFloat32([]float32{1, 2}, 1, 2)))
	if strings.Join(calls, ",") != "pre,post" || y.Value().At(0, 0) != 0 {
		t.Fatalf("calls %v, output %v", calls, y.Value())
	}
	removePre()
	y = Call(l, autograd.Const(tensor.FromFloat32([]float32{1, 2}, 1, 2)))
	if y.Value().At(0, 0) == 0 {
		t.Fatal("removed pre-hook still ran")
	}
}

func TestDefaultInitBounds(t *testing.T) {
	l := NewLinear(tensor.NewRNG(1), 100, 50, true)
	b := 1 / math.Sqrt(100)
	for _, v := range append(l.Weight.Value().Values(), l.Bias.Value().Values()...) {
		if math.Abs(v) > b {
			t.Fatalf("init value %v outside ±%v", v, b)
		}
	}
}

// TestParamNames: parameters listed in any order are named as
// NamedParameters names them (a shared one by its first name), and one
// that is not the module's is an error naming its index.
func TestParamNames(t *testing.T) {
	rng := tensor.NewRNG(1)
	e := NewEmbedding(rng, 5, 3)
	l := NewLinear(rng, 3, 2, true)
	s := NewSequential(e, l, e)
	got, err := ParamNames(s, []*autograd.Var{l.Bias, e.Weight, l.Weight})
	if want := []string{"1.bias", "0.weight", "1.weight"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("names %v (%v), want %v", got, err, want)
	}
	if got, err := ParamNames(s, nil); err != nil || len(got) != 0 {
		t.Fatalf("no parameters: %v (%v)", got, err)
	}
	stranger := autograd.Param(tensor.Zeros(1))
	if _, err := ParamNames(s, []*autograd.Var{e.Weight, stranger}); err == nil || !strings.Contains(err.Error(), "parameter 1 of 2") {
		t.Fatalf("a parameter not the module's: %v", err)
	}
}

func TestEmbeddingAndSharedParameters(t *testing.T) {
	e := NewEmbedding(tensor.NewRNG(1), 5, 3)
	y := e.Forward(autograd.Const(tensor.FromInt64([]int64{4, 4, 1})))
	if !slices.Equal(y.Shape(), []int{3, 3}) {
		t.Fatalf("shape %v", y.Shape())
	}
	autograd.SumAll(y).Backward(nil)
	if e.Weight.Grad().At(4, 0) != 2 || e.Weight.Grad().At(0, 0) != 0 {
		t.Fatalf("embedding grad %v", e.Weight.Grad())
	}
	s := NewSequential(e, e)
	if len(NamedParameters(s)) != 1 {
		t.Fatal("a shared parameter was listed twice")
	}
}
