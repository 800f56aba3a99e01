// Package autograd is godist's eager, define-by-run automatic
// differentiation: every operation on Vars that require gradients records a
// node, and Backward runs the recorded nodes in reverse.
//
//	w := autograd.Param(tensor.Randn(rng, 10, 784))
//	x := autograd.Const(batch)
//	loss := autograd.MeanAll(autograd.Square(autograd.Linear(x, w, nil)))
//	loss.Backward(nil)
//	w.Grad() // d loss / d w
//
// The engine counts, for every node and leaf, the edges that lead into it.
// A node runs when all its incoming gradients have arrived; among ready
// nodes the newest runs first, so the order is deterministic. A leaf's
// gradient is accumulated the moment its last use has been processed, and
// its grad-ready hooks (RegisterGradReadyHook) fire right then: DDP's
// reducer starts the all-reduce of a bucket from these hooks while the rest
// of backward is still running.
//
// Code outside the package adds differentiable operations by implementing
// Function and calling Apply (SyncBatchNorm and distributed autograd's send
// and receive nodes do).
//
// Recording can be switched off with NoGrad. The switch is process-wide.
package autograd
