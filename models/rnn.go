package models

import (
	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// RecurrentClassifier is the recurrent model of issue 18, written as a new
// user would: a 1-layer recurrent network (input 28, hidden 64,
// batch-first) over the 28 rows of each image (batch, 28, 28), the last
// step's output through a Linear to 10 classes. Its parameters are named
// as in tools/lstmbench/lstm_step.py's Classifier, its PyTorch
// twin: lstm.* (or gru.*) and fc.*.
type RecurrentClassifier struct {
	nn.Base
	FC *nn.Linear
	// outputs runs the recurrent layer and returns its output at every
	// step (batch, time, hidden).
	outputs func(x *autograd.Var) *autograd.Var
}

// LSTMClassifier returns a RecurrentClassifier with an nn.LSTM.
func LSTMClassifier(rng *tensor.RNG) *RecurrentClassifier {
	lstm := nn.NewLSTM(rng, 28, 64, nn.RNNOptions{BatchFirst: true})
	return newRecurrentClassifier(rng, "lstm", lstm, func(x *autograd.Var) *autograd.Var {
		out, _, _ := lstm.Forward(x, nil, nil)
		return out
	})
}

// GRUClassifier returns a RecurrentClassifier with an nn.GRU.
func GRUClassifier(rng *tensor.RNG) *RecurrentClassifier {
	gru := nn.NewGRU(rng, 28, 64, nn.RNNOptions{BatchFirst: true})
	return newRecurrentClassifier(rng, "gru", gru, func(x *autograd.Var) *autograd.Var {
		out, _ := gru.Forward(x, nil)
		return out
	})
}

func newRecurrentClassifier(rng *tensor.RNG, name string, rnn nn.Module, outputs func(*autograd.Var) *autograd.Var) *RecurrentClassifier {
	m := &RecurrentClassifier{FC: nn.NewLinear(rng, 64, 10, true), outputs: outputs}
	m.RegisterModule(name, rnn)
	m.RegisterModule("fc", m.FC)
	return m
}

// Forward returns the logits (batch, 10) for x (batch, 28, 28), or for
// images (batch, 1, 28, 28) as the Fashion-MNIST loaders give them.
func (m *RecurrentClassifier) Forward(x *autograd.Var) *autograd.Var {
	if x.Value().Dim() == 4 && x.Value().Size(1) == 1 {
		x = autograd.Select(x, 1, 0)
	}
	out := m.outputs(x)
	return m.FC.Forward(autograd.Select(out, 1, out.Value().Size(1)-1))
}
