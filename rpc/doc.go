// Package rpc is godist's torch.distributed.rpc: remote calls between the
// workers of a job, futures, remote references (RRefs) with PyTorch's
// reference-counting protocol, asynchronous execution, and a graceful
// shutdown that all workers agree on. Distributed autograd and the
// distributed optimizer (rpc/distautograd, rpc/distoptim) build on it.
//
// Unlike PyTorch's, no code crosses the wire: a worker runs only the
// functions registered in it, by name, with typed arguments and results.
// Arguments travel in a small typed codec (rpc/internal/wire): numbers,
// strings, slices, maps, structs of those, types with
// encoding.BinaryMarshaler, *tensor.Tensor (sent from its own memory and
// received in place in the message's buffer) and *RRef values. Caller and
// callee compare a fingerprint of each type's structure, so a disagreement
// is an error, not garbage. Every decoder is bounded for hostile input.
//
//	reg := rpc.NewRegistry()
//	add, err := rpc.Register(reg, "add", func(ctx context.Context, p Pair) (int, error) {
//		return p.X + p.Y, nil
//	})
//	agent, err := rpc.Init(ctx, "", rpc.Options{Functions: reg}) // "worker<rank>", env://
//	n, err := add.Call(ctx, agent, "worker1", Pair{2, 40})        // rpc_sync
//	f := add.Go(ctx, agent, "worker1", Pair{1, 1})                // rpc_async
//	ref, err := add.Remote(ctx, agent, "worker1", Pair{3, 4})     // remote: *RRef[int]
//	v, err := ref.ToHere(ctx)
//	err = agent.Shutdown(ctx, true)
//
// The agent shares the job's authenticated transport with its process
// groups (Options.Group, or a dist.Init of its own): its messages are a
// frame kind of their own (transport.KindMessage), large ones move
// through the same-host shared-memory path, and a peer without the job's
// token is refused at the handshake, before anything it sends is read.
//
// # Functions, methods and asynchronous execution
//
// Register serves a function; RegisterMethod a method of objects that
// live behind RRefs on their owner (PyTorch's rref.rpc_sync().method());
// RegisterAsync and RegisterMethodAsync a function that returns a Future,
// whose completion sends the reply without a goroutine waiting for it
// (PyTorch's @rpc.functions.async_execution: what batching needs). A
// handler finds its agent with AgentFrom(ctx); its ctx carries the
// caller's deadline. Each returns a typed handle (Fn, Method) with Call,
// Go and Remote; Func and MethodOf make handles for functions registered
// only on other workers.
//
// # RRefs
//
// An RRef[T] names a value on its owner. Remote creates one with the
// function's result, NewRRef one around a local value; passing an RRef in
// arguments or results gives the receiver a handle of its own (a fork).
// The owner keeps the value while any handle anywhere is alive, by the
// protocol of package rpc/rref (a pure state machine tested under
// reordered, duplicated and delayed messages); Release drops a handle,
// and a cleanup does when a handle becomes unreachable. Calls through a
// handle wait until the owner counts it.
//
// # Failure
//
// Every call's error is a *CallError naming the worker and the function.
// It wraps a *RemoteError (the function's error, or its recovered panic:
// the agent goes on serving), a *WorkerDownError (the connection to the
// worker dropped: every call pending on it fails at once), a deadline,
// or one of ErrUnknownFunction, ErrTypeMismatch, ErrTooLarge,
// ErrUnknownWorker, ErrShutdown (nothing ran for these), ErrMalformed (a
// request or reply that did not decode) or ErrRefused (one that decoded
// but that its receiver would not take; for a request, nothing ran). A
// call whose ctx ends first fails with a *CallError wrapping ctx's error
// (context.DeadlineExceeded); only Future.Wait, whose ctx bounds the
// wait and not the call, returns ctx's error as it is.
//
// # Shutdown
//
// Shutdown(ctx, true) releases this worker's RRefs and then waits, in
// rounds led by rank 0, until every worker has called it and no worker
// has calls in flight or being served; Shutdown(ctx, false) stops at
// once, failing what is pending. The graceful wait is bounded by ctx and
// by Options.Timeout: a worker that is dead or gone fails it at once,
// and one that answers nothing for Options.Timeout (stopped, hung, cut
// off) fails it then; every worker's Shutdown returns a *ShutdownError
// naming that worker, and every agent stops. A worker that is only slow
// to reach Shutdown, and answers meanwhile, is waited for as long as ctx
// allows.
package rpc
