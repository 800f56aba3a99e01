package nn

import (
	"fmt"
	"math"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// TestFusedLayerGradCheck: the fused LSTM and GRU layers' gradients (of
// the input, the initial states, the weights and the biases, through
// every block of the output) against finite differences in float64, in
// both directions, with and without biases.
func TestFusedLayerGradCheck(t *testing.T) {
	const T, B, in, h = 4, 3, 5, 4
	for _, kind := range []string{"lstm", "gru"} {
		for _, reverse := range []bool{false, true} {
			for _, bias := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/reverse=%v/bias=%v", kind, reverse, bias), func(t *testing.T) {
					rng := tensor.NewRNG(21)
					gates := 4
					if kind == "gru" {
						gates = 3
					}
					f64 := func(shape ...int) *tensor.Tensor { return tensor.New(tensor.Float64, shape...).Normal(rng, 0, 0.7) }
					ins := []*tensor.Tensor{f64(T, B, in), f64(B, h)}
					if kind == "lstm" {
						ins = append(ins, f64(B, h))
					}
					ins = append(ins, f64(gates*h, in), f64(gates*h, h))
					if bias {
						ins = append(ins, f64(gates*h), f64(gates*h))
					}
					d := layerDims{hidden: h, reverse: reverse, bias: bias, needX: true}
					err := autograd.GradCheck(func(v []*autograd.Var) *autograd.Var {
						if kind == "lstm" {
							return autograd.Apply(&lstmLayer{layerDims: d}, v...)
						}
						return autograd.Apply(&gruLayer{layerDims: d}, v...)
					}, ins, 1e-6, 1e-7, 1e-5)
					if err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
}

// recurrentCase is a configuration the fused layers are held to the
// step-by-step ones in.
type recurrentCase struct {
	name   string
	opt    RNNOptions
	states bool // pass initial states (else nil: zeros)
}

var recurrentCases = []recurrentCase{
	{"plain", RNNOptions{}, false},
	{"states", RNNOptions{}, true},
	{"batch-first", RNNOptions{BatchFirst: true}, true},
	{"no-bias", RNNOptions{NoBias: true}, true},
	{"2-layer-bidirectional", RNNOptions{Layers: 2, Bidirectional: true}, true},
	{"3-layer-bidirectional-batch-first", RNNOptions{Layers: 3, Bidirectional: true, BatchFirst: true, NoBias: true}, false},
}

// runRecurrent builds kind's module with opt (float64 weights when dt is
// Float64), runs it fused or step by step on fixed inputs, backpropagates
// a fixed weighting of every output, and returns the outputs and the
// gradients of the input, the initial states and every parameter, named.
func runRecurrent(t *testing.T, kind string, c recurrentCase, dt tensor.DType, unfused bool) map[string]*tensor.Tensor {
	t.Helper()
	const seq, batch, in, h = 6, 3, 5, 7
	var m Module
	var r *recurrent
	switch kind {
	case "lstm":
		l := NewLSTM(tensor.NewRNG(3), in, h, c.opt)
		m, r = l, &l.recurrent
	default:
		g := NewGRU(tensor.NewRNG(3), in, h, c.opt)
		m, r = g, &g.recurrent
	}
	r.unfused = unfused
	for _, p := range NamedParameters(m) {
		p.Value.SetValue(p.Value.Value().To(dt))
	}
	rng := tensor.NewRNG(4)
	shape := []int{seq, batch, in}
	if c.opt.BatchFirst {
		shape = []int{batch, seq, in}
	}
	x := autograd.Param(tensor.Randn(rng, shape...).To(dt))
	nst := r.Layers * r.dirs()
	var h0, c0 *autograd.Var
	if c.states {
		h0 = autograd.Param(tensor.Randn(rng, nst, batch, h).To(dt))
		c0 = autograd.Param(tensor.Randn(rng, nst, batch, h).To(dt))
	}
	var outs []*autograd.Var
	switch kind {
	case "lstm":
		out, hn, cn := m.(*LSTM).Forward(x, h0, c0)
		outs = []*autograd.Var{out, hn, cn}
	default:
		out, hn := m.(*GRU).Forward(x, h0)
		outs = []*autograd.Var{out, hn}
	}
	res := map[string]*tensor.Tensor{}
	var loss *autograd.Var
	for i, o := range outs {
		res[fmt.Sprint("out", i)] = o.Value()
		w := autograd.Const(tensor.Randn(tensor.NewRNG(uint64(10+i)), o.Shape()...).To(dt))
		l := autograd.SumAll(autograd.Mul(o, w))
		if loss == nil {
			loss = l
		} else {
			loss = autograd.Add(loss, l)
		}
	}
	loss.Backward(nil)
	res["dx"] = x.Grad()
	if c.states {
		res["dh0"] = h0.Grad()
		if kind == "lstm" {
			res["dc0"] = c0.Grad()
		}
	}
	for _, p := range NamedParameters(m) {
		res["d"+p.Name] = p.Value.Grad()
	}
	return res
}

// TestFusedLayersMatchStepwise: LSTM and GRU give the same outputs, final
// states and gradients fused as recorded step by step (lstmCell and the
// GRU's separate operations), in float64 to rounding and in float32 (the
// vector activations) to float32's accuracy.
func TestFusedLayersMatchStepwise(t *testing.T) {
	for _, kind := range []string{"lstm", "gru"} {
		for _, c := range recurrentCases {
			for _, dt := range []tensor.DType{tensor.Float64, tensor.Float32} {
				t.Run(fmt.Sprintf("%s/%s/%v", kind, c.name, dt), func(t *testing.T) {
					want := runRecurrent(t, kind, c, dt, true)
					got := runRecurrent(t, kind, c, dt, false)
					tol := 1e-12
					if dt == tensor.Float32 {
						tol = 2e-5
					}
					for name, w := range want {
						g := got[name]
						if g == nil || w == nil {
							t.Fatalf("%s: fused %v, step by step %v", name, g, w)
						}
						if !tensor.SameShape(g, w) {
							t.Fatalf("%s: fused shape %v, step by step %v", name, g.Shape(), w.Shape())
						}
						gv, wv := g.Contiguous().To(tensor.Float64).Float64s(), w.Contiguous().To(tensor.Float64).Float64s()
						for i := range gv {
							if d := math.Abs(gv[i] - wv[i]); d > tol*(1+math.Abs(wv[i])) {
								t.Fatalf("%s[%d]: fused %v, step by step %v", name, i, gv[i], wv[i])
							}
						}
					}
				})
			}
		}
	}
}

// TestFusedLayerSteps: a training loop's steps recycle the layers' saved
// buffers (Release) and gradients, and the next steps, which reuse them,
// compute the same gradients as the first; backward through a retained
// graph a second time (nothing released in between) doubles them; and a
// forward without gradients (released at once) gives the same output.
func TestFusedLayerSteps(t *testing.T) {
	for _, kind := range []string{"lstm", "gru"} {
		t.Run(kind, func(t *testing.T) {
			var m Module
			fwd := func(x *autograd.Var) *autograd.Var {
				if l, ok := m.(*LSTM); ok {
					out, _, _ := l.Forward(x, nil, nil)
					return out
				}
				out, _ := m.(*GRU).Forward(x, nil)
				return out
			}
			if kind == "lstm" {
				m = NewLSTM(tensor.NewRNG(5), 6, 8, RNNOptions{BatchFirst: true, Bidirectional: true})
			} else {
				m = NewGRU(tensor.NewRNG(5), 6, 8, RNNOptions{BatchFirst: true, Bidirectional: true})
			}
			x := autograd.Const(tensor.Randn(tensor.NewRNG(6), 4, 9, 6))
			grads := func(opt autograd.BackwardOptions, times int) []float32 {
				for _, p := range Parameters(m) {
					p.ZeroGrad(true)
				}
				loss := autograd.SumAll(autograd.Square(fwd(x)))
				for range times {
					loss.BackwardWith(nil, opt)
				}
				var g []float32
				for _, p := range Parameters(m) {
					g = append(g, p.Grad().Clone().Float32s()...)
				}
				return g
			}
			first := grads(autograd.BackwardOptions{}, 1)
			for step := range 3 {
				again := grads(autograd.BackwardOptions{}, 1)
				for i := range first {
					if again[i] != first[i] {
						t.Fatalf("step %d: gradient %d is %v, the first step's %v", step+2, i, again[i], first[i])
					}
				}
			}
			twice := grads(autograd.BackwardOptions{RetainGraph: true}, 2)
			for i := range first {
				if d := twice[i] - 2*first[i]; d > 1e-5 || d < -1e-5 {
					t.Fatalf("retained graph: gradient %d after two passes %v, want %v", i, twice[i], 2*first[i])
				}
			}
			withGrad := fwd(x).Value().Clone()
			var noGrad *tensor.Tensor
			autograd.NoGrad(func() { noGrad = fwd(x).Value() })
			a, b := withGrad.Float32s(), noGrad.Contiguous().Float32s()
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("output %d: %v with gradients, %v without", i, a[i], b[i])
				}
			}
		})
	}
}
