// Package models holds the models that examples, tests and tools share:
// the two Fashion-MNIST models, defined exactly as
// shared/anchors/train_ddp.py defines them so that the numbers compare with
// PyTorch's, and GPT, the tiny byte-level language model of
// examples/tinygpt (tools/peers/gpt_twin.py is its PyTorch twin).
package models

import (
	"fmt"

	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// MLP is Flatten, 784-256-128-10 with ReLUs (235,146 parameters).
func MLP(rng *tensor.RNG) *nn.Sequential {
	return nn.NewSequential(nn.NewFlatten(),
		nn.NewLinear(rng, 784, 256, true), nn.NewReLU(),
		nn.NewLinear(rng, 256, 128, true), nn.NewReLU(),
		nn.NewLinear(rng, 128, 10, true))
}

// LeNet is the anchor's LeNet-5-style CNN with ReLU and max pooling
// (61,706 parameters): conv 1→6 5×5 pad 2, pool, conv 6→16 5×5, pool,
// 400-120-84-10.
func LeNet(rng *tensor.RNG) *nn.Sequential {
	return nn.NewSequential(
		nn.NewConv2d(rng, 1, 6, 5, tensor.Conv2dParams{PadH: 2, PadW: 2}, true), nn.NewReLU(), nn.NewMaxPool2d(2),
		nn.NewConv2d(rng, 6, 16, 5, tensor.Conv2dParams{}, true), nn.NewReLU(), nn.NewMaxPool2d(2),
		nn.NewFlatten(), nn.NewLinear(rng, 16*5*5, 120, true), nn.NewReLU(),
		nn.NewLinear(rng, 120, 84, true), nn.NewReLU(), nn.NewLinear(rng, 84, 10, true))
}

// New returns the model called name: "mlp", or "lenet" (also "cnn", the
// anchor script's name for it).
func New(name string, rng *tensor.RNG) (*nn.Sequential, error) {
	switch name {
	case "mlp":
		return MLP(rng), nil
	case "lenet", "cnn":
		return LeNet(rng), nil
	}
	return nil, fmt.Errorf("models: unknown model %q (want mlp or lenet)", name)
}
