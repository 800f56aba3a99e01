// Package nn provides modules (layers with named parameters and buffers),
// losses and PyTorch-compatible state dicts.
//
//	rng := tensor.NewRNG(0)
//	model := nn.NewSequential(
//		nn.NewFlatten(),
//		nn.NewLinear(rng, 784, 256, true), nn.NewReLU(),
//		nn.NewLinear(rng, 256, 10, true))
//	logits := nn.Call(model, autograd.Const(images))
//	loss := nn.CrossEntropy(logits, labels)
//	loss.Backward(nil)
//
// A module embeds Base and registers its parameters, buffers and submodules
// in its constructor; NamedParameters and StateDict walk them in
// registration order and name them as PyTorch does ("1.weight",
// "bn.running_mean"), so a safetensors checkpoint written from StateDict
// loads into the same model in PyTorch and back. Initialisation follows
// PyTorch's defaults, drawn from an explicit seeded tensor.RNG.
//
// Call runs a Layer with its forward pre- and post-hooks; Train and Eval
// switch a module tree's mode.
//
// BatchNorm, LayerNorm and the losses are autograd.Functions defined here,
// outside the autograd package.
package nn
