// Package distautograd is distributed autograd (PyTorch's
// torch.distributed.autograd): the forward pass records, in a context,
// where Vars that need gradients cross an RPC, and backward uses those
// records to carry gradients back across workers.
//
//	ctx, id, err := distautograd.NewContext(ctx, agent)
//	defer distautograd.Release(ctx, id)
//	h, err := layer.Call(ctx, agent, "ps", distautograd.Wrap(x)) // h: *distautograd.Var
//	loss := autograd.MeanAll(autograd.Square(h.Var))
//	err = distautograd.Backward(ctx, id, loss)
//	grads, err := distautograd.GetGradients(ctx, id) // this worker's leaves
//
// # How Vars cross an RPC
//
// A *Var (an *autograd.Var wrapped with Wrap) may sit anywhere in a
// registered function's arguments or result, inside structs, slices and
// maps too. It encodes itself (it is a wire.Extension): when it needs
// gradients and the call happens inside a context, the sender records a
// send node whose input is the Var, gives the message an id, and sends
// the context id and that id beside the tensor; the receiver creates the
// context under the same id if it has not seen it, and hands the handler
// a Var whose node is a receive node. Which context: the one NewContext
// put in the caller's ctx, or, inside a handler, the one the arguments
// arrived in (the handler's ctx carries it, so its own calls and its
// result are recorded in it too, as PyTorch's thread-local context is).
// A Var that needs no gradient (indices to look up, say) records nothing.
//
// Every call made in a context carries the context's id, whatever its
// arguments hold, as PyTorch attaches the context to every RPC made in
// one (rpc.CallNote): the callee joins the context, and its handler's
// ctx is in it. So a result the callee computes from its own parameters
// is recorded, and so is a value fetched with RRef.ToHere: the owner
// records a send node for it, the fetcher a receive node (PyTorch records
// to_here). A reply that needs gradients but comes from outside the call's
// context (a handler that made its calls with another ctx) is refused with
// an *OutsideContextError. Outside a context a Var travels as a plain
// leaf that keeps its RequiresGrad flag.
//
// A context id is the creating worker's rank in the top 16 bits and a
// counter below, unique across the job. Every other worker that joins a
// context holds a call to the creator open (a lease); Release on the
// creator answers it, and each worker drops its context; a creator that
// dies ends them too.
//
// # Backward
//
// Backward runs on the worker that created the context. Its worker's
// pass starts at once; it then learns every worker of the context by
// asking each it knows for the workers they exchanged Vars with (which
// starts their passes), and waits for every pass to end. Each worker
// computes its dependencies before it runs anything (PyTorch's FAST
// mode): everything reachable from the roots and from every send node of
// the context. A receive node whose gradient is ready sends it to its
// send node's worker. Unlike PyTorch's FAST mode, a receive node that no
// root or send node reaches reports "no gradient" to its sender at the
// start, so that a send whose Var was not used still lets its worker's
// counts reach zero: the gradients are those of local backward on the
// same composite model, and bit for bit so when no Var gathers more than
// two contributions (more may be added in another order).
//
// Gradients of leaves go to the context's map (GetGradients), never to
// Var.Grad; as in ordinary backward, a leaf's tensor hooks run on its
// gradient first and its grad-ready hooks fire once it is in, told the
// context's store (autograd.RegisterGradReadyHookIn), so that DDP
// averages the gradients of a context (PyTorch's DDP with distributed
// autograd). Several backward passes may run through one context, one at
// a time, each before the last keeping the graph (BackwardWith,
// Options.RetainGraph); their gradients add up in the context. Backward
// may start on any worker of the context; BackwardRRef starts it on the
// owner of an RRef whose value is the loss (PyTorch's RRef.backward). distoptim steps the parameters'
// owners with these gradients. When any worker's pass fails
// or a worker dies, Backward returns an error naming it and the context
// is released on every worker.
package distautograd
