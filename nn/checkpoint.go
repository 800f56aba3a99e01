package nn

import (
	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// Checkpointed runs a layer under activation checkpointing, as PyTorch's
// checkpoint_wrapper: the layer's intermediate values are not kept for
// backward but recomputed when backward reaches its output
// (autograd.CheckpointWith). The random generators of the modules inside
// it (those with an RNG method, as Dropout) are replayed, so the
// recomputation draws the same dropout masks and the gradients are those
// of the layer run plainly, bit for bit.
//
//	for i, b := range blocks {
//		blocks[i] = nn.NewCheckpointed(b)
//	}
//
// The layer is registered under PyTorch's name for it,
// "_checkpoint_wrapped_module", so its parameters' names carry that
// prefix. It is called through Call, so its own hooks (FSDP's gathering)
// run in the forward pass and again in the recomputation.
type Checkpointed struct {
	Base
	Layer Layer
}

// NewCheckpointed wraps l.
func NewCheckpointed(l Layer) *Checkpointed {
	c := &Checkpointed{Layer: l}
	c.RegisterModule("_checkpoint_wrapped_module", l)
	return c
}

// Forward runs the layer without keeping its activations.
func (c *Checkpointed) Forward(x *autograd.Var) *autograd.Var {
	return autograd.CheckpointWith(autograd.CheckpointOptions{RNGs: RNGs(c.Layer)},
		func(xs ...*autograd.Var) *autograd.Var { return Call(c.Layer, xs[0]) }, x)
}

// RNG returns the generator the layer draws its masks from.
func (d *Dropout) RNG() *tensor.RNG { return d.rng }

// RNGs returns the random generators that m and the modules below it draw
// from in their forward passes, each once: those of every module with an
// RNG() *tensor.RNG method (Dropout). A module of one's own that draws
// random numbers in Forward should have one, so that activation
// checkpointing replays them.
func RNGs(m Module) []*tensor.RNG {
	var out []*tensor.RNG
	seen := map[*tensor.RNG]bool{}
	for _, nm := range NamedModules(m) {
		r, ok := nm.Value.(interface{ RNG() *tensor.RNG })
		if !ok {
			continue
		}
		if g := r.RNG(); g != nil && !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	return out
}
