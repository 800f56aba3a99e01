package optim

import (
	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
)

// ParamGroup is one entry of the parameter-group list NewAdamWGroups and
// NewSGDGroups take, or the group AddParamGroup adds, as a dict of
// torch.optim's param_groups.
type ParamGroup struct {
	// Params are the group's parameters. The optimizer keeps the slice's
	// elements, not the slice.
	Params []*autograd.Var
	// WeightDecay is the group's decoupled weight decay; zero means none.
	// It is always the group's own (unlike a PyTorch group without the
	// key, it does not fall back to a default).
	WeightDecay float64
	// LR, if not zero, is the group's learning rate in place of the
	// optimizer's default. Schedulers scale each group's rate from its
	// own base.
	LR float64
}

// DecayGroups splits named parameters (nn.NamedParameters' result) into
// the two groups GPT training uses, in this order: those that get weight
// decay weightDecay, and those that get none. The rule:
//
//   - a parameter with fewer than 2 dimensions (biases, LayerNorm and
//     BatchNorm weights, any scalar gain) gets no decay;
//   - a parameter for which noDecay(name) is true gets no decay either
//     (noDecay may be nil);
//   - every other parameter (the weights of Linear, Conv and the like)
//     decays.
//
// The dimension rule alone is nanoGPT's configure_optimizers. minGPT also
// exempts embeddings, which are 2-D: pass a noDecay that recognises their
// names, for example
//
//	func(name string) bool { return strings.HasPrefix(name, "wte.") || strings.HasPrefix(name, "wpe.") }
//
// Both groups keep the order of named and either may be empty.
func DecayGroups(named []nn.Named[*autograd.Var], weightDecay float64, noDecay func(name string) bool) []ParamGroup {
	decay := ParamGroup{WeightDecay: weightDecay}
	var none ParamGroup
	for _, p := range named {
		if p.Value.Value().Dim() < 2 || (noDecay != nil && noDecay(p.Name)) {
			none.Params = append(none.Params, p.Value)
		} else {
			decay.Params = append(decay.Params, p.Value)
		}
	}
	return []ParamGroup{decay, none}
}
