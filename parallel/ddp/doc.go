// Package ddp is DistributedDataParallel: data-parallel training over a
// dist.Group, with gradient buckets reduced while backward is still
// running, communication hooks (plain, fp16/bf16 compression, PowerSGD,
// and HookWithZeroStep, which runs a zero.ZeRO optimizer's step inside
// backward), no-sync gradient accumulation, Join for uneven inputs and
// SyncBatchNorm.
//
//	g, _ := dist.Init(ctx, dist.Options{})
//	model, _ := ddp.New(ctx, net, g, ddp.Options{})
//	for batch := range loader.Batches() {
//		opt.ZeroGrad(true)
//		loss := nn.CrossEntropy(nn.Call(model, autograd.Const(batch[0])), batch[1])
//		loss.Backward(nil)
//		if err := model.Wait(ctx); err != nil { ... }
//		opt.Step()
//	}
//
// The reducer hangs on autograd's grad-ready hooks: buckets are planned in
// reverse registration order (PlanBuckets, a pure function; a small first
// bucket), re-planned after the first iteration in the order gradients
// actually became ready (rank 0's order, broadcast), and each bucket's
// all-reduce starts the moment its last gradient is ready. Buckets are
// reduced in the same order on every rank. With Options.StaticGraph the
// first iteration is recorded (how many times each gradient became ready,
// which parameters got none) and later iterations go by it, without
// walking the graph for unused parameters. Blocks under activation
// checkpointing (nn.Checkpointed) need nothing special: each parameter's
// gradient still becomes ready once per backward pass.
package ddp
