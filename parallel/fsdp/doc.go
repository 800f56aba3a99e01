// Package fsdp is fully sharded data parallelism, PyTorch's
// FullyShardedDataParallel: each unit of a model keeps its parameters
// flattened into one flat parameter, padded to a multiple of the group's
// size, and each rank holds one shard of it. Before a unit's forward pass
// the shards are all-gathered into the full parameters; after it they are
// freed again (FullShard) or kept until backward (ShardGradOp); in backward
// they are gathered again where freed, and the unit's gradients are
// reduce-scattered into the shards' gradients the moment the unit's last
// gradient is ready, while the rest of backward runs.
//
//	model, err := fsdp.New(ctx, net, group, fsdp.Options{
//		Wrap: func(name string, m nn.Module) bool { _, ok := m.(*nn.TransformerBlock); return ok },
//	})
//	opt := optim.NewAdamW(model.Parameters(), optim.AdamOptions{LR: 1e-3}) // the shards
//	loss := lossOf(nn.Call(model, x))
//	err = model.Backward(ctx, loss) // gradients reduce-scattered into the shards
//	opt.Step()
//
// The optimizer steps the shards (Parameters), never the module's own
// parameters, whose values between steps are placeholders of the right
// shape and no memory: read them inside SummonFullParams.
//
// A unit is a module that the Wrap policy selects (or that holds at least
// MinParams parameters not already in a smaller unit) and that its parent
// calls through nn.Call, whose hooks gather and free it; the root unit
// holds every other parameter, gathered for the whole forward and backward
// pass. Every parameter must get a gradient in every backward pass.
//
// State dicts: FullStateDict and FullStateDictOn (one rank) give the
// module's whole parameters under its own names, FullOptimStateDict the
// optimizer's state whole by parameter name; CheckpointState is the
// sharded form, for checkpoint/dcp.
//
// Options.MixedPrecision gathers, computes (the forward pass under
// autograd.Autocast) and reduces in bfloat16 or float16 over float32
// master shards, Options.LimitAllGathers bounds how many
// modules prefetching may hold gathered ahead of computation, and
// Options.BackwardPrefetch chooses when backward gathers the next unit
// (BackwardPre, BackwardPost or BackwardNone, as PyTorch's).
//
// Gradient accumulation: backward passes inside NoSync keep every unit's
// whole gradient on the rank and send nothing; the first pass after it
// reduce-scatters the sum (PyTorch's no_sync, at the memory cost of the
// whole gradients):
//
//	err := model.NoSync(func() error {
//		for _, mb := range microBatches[:k-1] {
//			if err := model.Backward(ctx, scaled(lossOf(mb))); err != nil {
//				return err
//			}
//		}
//		return nil
//	})
//	err = model.Backward(ctx, scaled(lossOf(microBatches[k-1]))) // reduce-scatters the sum
//	opt.Step()
package fsdp
