// Package dp is DataParallel: one process, each batch split along dimension
// 0 across goroutines, as torch.nn.DataParallel on CPU.
//
//	model := dp.New(net, 0) // one worker per GOMAXPROCS
//	opt := optim.NewSGD(nn.Parameters(model), optim.SGDOptions{LR: 0.01})
//	for batch := range loader.Batches() {
//		opt.ZeroGrad(true)
//		loss := nn.CrossEntropy(nn.Call(model, autograd.Const(batch[0])), batch[1])
//		loss.Backward(nil) // every chunk's gradient summed into the shared parameters
//		opt.Step()
//	}
//
// Forward cuts the input into at most Workers chunks (torch.chunk's sizes),
// runs the wrapped module on each chunk on its own goroutine and
// concatenates the outputs, recording it all in one autograd graph, so one
// backward pass sums every chunk's gradient into the parameters — the
// gradients equal those of the module on the whole batch, up to float
// rounding. There is one copy of the parameters: the replicas are the
// goroutines, which only read them during forward.
//
// # Concurrency and stateful modules
//
// A forward pass that changes state is not safe to run on several
// goroutines at once. Before each forward pass DataParallel walks the
// module tree, and if any module in training mode is an *nn.Dropout (its
// masks come from one shared random source) or has buffers (BatchNorm's
// running statistics, SyncBatchNorm, any custom module with buffers), it
// runs the chunks one after another on the calling goroutine instead, in
// chunk order, and says why in SerialReason. The results are what
// torch.nn.DataParallel computes: each chunk is normalised with its own
// batch statistics, and the buffers end as the first chunk left them (in
// PyTorch only the replica on device 0 shares the module's buffers; the
// others' updates are lost), so num_batches_tracked still counts one per
// forward. In evaluation mode, BatchNorm and Dropout are read-only and the
// chunks run concurrently.
//
// Any other module's Forward, and every forward hook of the wrapped module
// and its children, must be safe to run concurrently on different inputs:
// it may read parameters and fields but not write them. The layers of
// package nn are. The order in which chunks record operations varies from
// run to run, so the last bits of a gradient can vary too.
package dp
