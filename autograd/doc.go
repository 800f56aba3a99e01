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
//
// # Who owns the tensors of a step
//
// A backward pass that frees its graph (no RetainGraph) recycles, when it
// is over, the storage that nothing can read any more (tensor.Recycle),
// and the next step's operations take it from the pool instead of the Go
// heap. In a steady training loop the heap then barely grows and the
// collector barely runs. The rule that makes this safe:
//
//   - Gradients flowing through the graph belong to the engine: it
//     recycles them all, except those that became a leaf's gradient
//     (Grad), a retained gradient (RetainGrad), or were given to a tensor
//     hook or to an outside Function's backward (Apply), which may keep
//     them. A hook or Function that keeps a gradient keeps it intact.
//   - Forward values are the program's: a Var's value is recycled only if
//     the program marked the Var transient (MarkTransient: nothing reads
//     it after the pass) and so is every Var viewing its storage, and
//     none of them was read out (Value, Detach) or given to an outside
//     Function. nn.Sequential marks the outputs of its inner layers; the
//     Var it returns, the loss, the leaves (parameters, inputs) and every
//     value nobody marked are never recycled.
//   - Saved tensors that only a node's backward reads (im2col matrices,
//     max-pooling indices) are recycled when the graph is freed.
//
// Value of a transient Var after its storage was recycled panics rather
// than show another step's numbers. Built with the tag godist_guard, any
// use of recycled storage through a stale view panics too.
package autograd
