// Package zero is ZeroRedundancyOptimizer (ZeRO stage 1): data-parallel
// training in which each rank keeps optimizer state (momentum, Adam's
// moments) for its share of the parameters only, so that state takes
// about 1/world of the memory it takes under plain DDP.
//
//	model, _ := ddp.New(ctx, net, g, ddp.Options{})
//	opt, err := zero.New(nn.Parameters(net), func(ps []*autograd.Var) optim.Optimizer {
//		return optim.NewAdam(ps, optim.AdamOptions{LR: 1e-3})
//	}, g, zero.Options{})
//	if err != nil { ... }
//	sched := optim.NewWarmupCosine(opt, 100, 5000, 0.1) // the same on every rank
//	for batch := range loader.Batches() {
//		opt.ZeroGrad(true)
//		if err := model.Backward(ctx, loss(batch)); err != nil { ... }
//		if err := opt.StepContext(ctx); err != nil { ... } // a *dist.RankError if a peer died
//		sched.Step()
//	}
//	if err := opt.ConsolidateStateDict(ctx, 0); err != nil { ... }
//	if g.Rank() == 0 {
//		save(opt.StateDict()) // as an unsharded optimizer's over all parameters
//	}
//
// New splits the parameters as PyTorch 1.13 does (Partition: largest
// first, each to the rank with the fewest elements so far) and makes
// this rank's optimizer over its share. StepContext steps that share and
// broadcasts every parameter from the rank that owns it (or, with
// Options.ParametersAsBucketView, one flat buffer from each rank), so
// that every rank ends the step with the same parameters an unsharded
// optimizer would have given. Gradients must already be the same on
// every rank (DDP's all-reduce); ZeRO does not reduce them.
//
// ZeRO is an optim.Optimizer and has optim.Groups, so schedulers work on
// it; its Step keeps an error for Err (and for every later StepContext)
// instead of returning it, and says so on stderr, so call StepContext, or
// optim.Step in code written against optim.Optimizer, where you can. StateDict is the state consolidated to this
// rank by ConsolidateStateDict (nil elsewhere), indexed by position in
// the parameters given to New; LoadStateDict takes such a dict on every
// rank and keeps each rank's share.
//
// Parameter groups, each with its own learning rate and weight decay
// (PyTorch's param_groups): NewGroups partitions the groups one after the
// other (PartitionGroups) and gives newOpt this rank's share of each, to
// make a grouped optimizer of; AddParamGroup appends a group later, as
// add_param_group, without moving the earlier parameters:
//
//	opt, err := zero.NewGroups(optim.DecayGroups(nn.NamedParameters(net), 0.1, nil),
//		func(gs []optim.ParamGroup) optim.Optimizer { return optim.NewAdamWGroups(gs, optim.AdamOptions{LR: 1e-3}) },
//		g, zero.Options{})
//
// ZeRO is a join.Joinable: under join.Join, after the DDP model whose
// gradients it steps, a rank that has run out of data goes on stepping
// its partition with the average gradients of the ranks still training
// and sending it, so that they do not hang and every rank ends with the
// same parameters.
//
// With Options.OverlapWithDDP and ddp.HookWithZeroStep as the DDP model's
// communication hook (PyTorch's overlap_with_ddp and
// hook_with_zero_step), the step runs inside backward instead: each DDP
// bucket, once reduced, is stepped by the owners of its parameters and
// broadcast while the rest of backward runs, to the same parameters.
package zero
