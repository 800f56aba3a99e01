package nn_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint/paritytest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// rnnRef holds PyTorch 1.13's values for GRU and bidirectional recurrent
// layers (testdata/parity/make_rnn_parity.py).
var rnnRef = &paritytest.Ref{Path: filepath.Join("..", "testdata", "parity", "rnn.safetensors")}

// TestParityRecurrent: GRU (2 layers; and bidirectional, batch first),
// a bidirectional 2-layer LSTM and a bidirectional RNN without bias give
// PyTorch's outputs, final states and every gradient (inputs, initial
// states, each weight under PyTorch's name, "_reverse" included).
func TestParityRecurrent(t *testing.T) {
	for _, c := range []struct {
		name   string
		states int
		make   func() nn.Module
	}{
		{"gru", 1, func() nn.Module { return nn.NewGRU(tensor.NewRNG(0), 5, 4, nn.RNNOptions{Layers: 2}) }},
		{"gru_bi", 1, func() nn.Module {
			return nn.NewGRU(tensor.NewRNG(0), 5, 4, nn.RNNOptions{Layers: 2, Bidirectional: true, BatchFirst: true})
		}},
		{"lstm_bi", 2, func() nn.Module {
			return nn.NewLSTM(tensor.NewRNG(0), 5, 4, nn.RNNOptions{Layers: 2, Bidirectional: true})
		}},
		{"rnn_bi", 1, func() nn.Module {
			return nn.NewRNN(tensor.NewRNG(0), 5, 4, nn.RNNOptions{Bidirectional: true, NoBias: true})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			get := func(k string) *tensor.Tensor { return rnnRef.Get(t, c.name+"."+k) }
			m := c.make()
			sd := map[string]*tensor.Tensor{}
			for _, k := range nn.StateDictKeys(m) {
				sd[k] = get(k)
			}
			if err := nn.LoadStateDict(m, sd, true); err != nil {
				t.Fatal(err)
			}
			x := autograd.Param(get("x").Clone())
			states := make([]*autograd.Var, c.states)
			for i := range states {
				states[i] = autograd.Param(get(fmt.Sprintf("s%d", i)).Clone())
			}
			var outs []*autograd.Var
			switch m := m.(type) {
			case *nn.GRU:
				o, h := m.Forward(x, states[0])
				outs = []*autograd.Var{o, h}
			case *nn.RNN:
				o, h := m.Forward(x, states[0])
				outs = []*autograd.Var{o, h}
			case *nn.LSTM:
				o, h, cc := m.Forward(x, states[0], states[1])
				outs = []*autograd.Var{o, h, cc}
			}
			var loss *autograd.Var
			for i, o := range outs {
				rnnRef.Expect(t, fmt.Sprintf("output %d", i), o.Value(), fmt.Sprintf("%s.out%d", c.name, i), parityTol)
				term := autograd.SumAll(autograd.Mul(o, autograd.Const(get(fmt.Sprintf("g%d", i)))))
				if loss == nil {
					loss = term
				} else {
					loss = autograd.Add(loss, term)
				}
			}
			if err := loss.Backward(nil); err != nil {
				t.Fatal(err)
			}
			rnnRef.Expect(t, "dx", x.Grad(), c.name+".grad.x", parityTol)
			for i, s := range states {
				rnnRef.Expect(t, fmt.Sprintf("ds%d", i), s.Grad(), fmt.Sprintf("%s.grad.s%d", c.name, i), parityTol)
			}
			for _, p := range nn.NamedParameters(m) {
				rnnRef.Expect(t, "d"+p.Name, p.Value.Grad(), c.name+".grad."+p.Name, parityTol)
			}
		})
	}
}

// TestRecurrentDropout: a 2-layer LSTM with Dropout p in training mode is,
// bit for bit, its first layer, then nn.Dropout(p) drawing from the same
// generator, then its second layer (PyTorch's placement: between layers,
// never after the last); in evaluation mode it drops nothing.
func TestRecurrentDropout(t *testing.T) {
	const p = 0.4
	m := nn.NewLSTM(tensor.NewRNG(1), 5, 4, nn.RNNOptions{Layers: 2, Dropout: p, DropoutRNG: tensor.NewRNG(9)})
	first := nn.NewLSTM(tensor.NewRNG(2), 5, 4, nn.RNNOptions{})
	second := nn.NewLSTM(tensor.NewRNG(3), 4, 4, nn.RNNOptions{})
	sd := nn.StateDict(m)
	load := func(dst nn.Module, layer string) {
		part := map[string]*tensor.Tensor{}
		for _, k := range []string{"weight_ih", "weight_hh", "bias_ih", "bias_hh"} {
			part[k+"_l0"] = sd[k+"_"+layer]
		}
		if err := nn.LoadStateDict(dst, part, true); err != nil {
			t.Fatal(err)
		}
	}
	load(first, "l0")
	load(second, "l1")
	x := autograd.Const(tensor.New(tensor.Float32, 7, 3, 5).Normal(tensor.NewRNG(5), 0, 1))
	drop := nn.NewDropout(p, tensor.NewRNG(9))
	for _, train := range []bool{true, false} {
		if train {
			nn.Train(m)
			nn.Train(drop)
		} else {
			nn.Eval(m)
			nn.Eval(drop)
		}
		got, _, _ := m.Forward(x, nil, nil)
		h, _, _ := first.Forward(x, nil, nil)
		want, _, _ := second.Forward(nn.Call(drop, h), nil, nil)
		if err := sameFloat32s(got.Value(), want.Value()); err != nil {
			t.Fatalf("training %v: %v", train, err)
		}
	}
}

func sameFloat32s(a, b *tensor.Tensor) error {
	av, bv := a.Contiguous().Float32s(), b.Contiguous().Float32s()
	if len(av) != len(bv) {
		return fmt.Errorf("%d elements against %d", len(av), len(bv))
	}
	for i := range av {
		if av[i] != bv[i] {
			return fmt.Errorf("element %d: %v against %v", i, av[i], bv[i])
		}
	}
	return nil
}
