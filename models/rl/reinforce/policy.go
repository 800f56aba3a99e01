package reinforce

import (
	"github.com/godist/godist/autograd"
	"github.com/godist/godist/models/rl/cartpole"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// The policy's input and output sizes: CartPole's four state variables and
// its two actions.
const (
	ObsSize    = len(cartpole.Obs{})
	NumActions = cartpole.NumActions
)

// Policy is the tutorial's policy network: Linear(4, 128), Dropout(0.6),
// ReLU, Linear(128, 2), then softmax over the actions. Its parameters are
// named as the tutorial's PyTorch module names them ("affine1.weight",
// "affine2.bias"), so its state dict loads into that module.
type Policy struct {
	nn.Base
	Affine1 *nn.Linear
	Dropout *nn.Dropout
	Affine2 *nn.Linear
}

var _ nn.Layer = (*Policy)(nil)

// NewPolicy returns a Policy initialised as PyTorch initialises the
// tutorial's, drawing its weights and then its dropout masks from rng. The
// Policy keeps rng; it is not safe for concurrent use.
func NewPolicy(rng *tensor.RNG) *Policy {
	p := &Policy{
		Affine1: nn.NewLinear(rng, ObsSize, 128, true),
		Dropout: nn.NewDropout(0.6, rng),
		Affine2: nn.NewLinear(rng, 128, NumActions, true),
	}
	p.RegisterModule("affine1", p.Affine1)
	p.RegisterModule("dropout", p.Dropout)
	p.RegisterModule("affine2", p.Affine2)
	return p
}

// Scores returns the action scores (logits), n×NumActions, for n×ObsSize
// observations x.
func (p *Policy) Scores(x *autograd.Var) *autograd.Var {
	h := nn.Call(p.Affine1, x)
	h = nn.Call(p.Dropout, h)
	h = autograd.Relu(h)
	return nn.Call(p.Affine2, h)
}

// Forward returns the action probabilities, n×NumActions, for n×ObsSize
// observations x, as the tutorial's forward.
func (p *Policy) Forward(x *autograd.Var) *autograd.Var {
	return autograd.Softmax(p.Scores(x), 1)
}

// LogProbs returns the log-probabilities of the actions: the log of
// Forward's result, computed without forming the probabilities, so that it
// stays finite when a probability underflows.
func (p *Policy) LogProbs(x *autograd.Var) *autograd.Var {
	return autograd.LogSoftmax(p.Scores(x), 1)
}
