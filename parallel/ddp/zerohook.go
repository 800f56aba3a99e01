package ddp

import (
	"context"
	"sync"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/parallel/zero"
	"github.com/godist/godist/tensor"
)

// HookWithZeroStep returns a communication hook that overlaps z's step
// with the model's backward pass, as PyTorch's hook_with_zero_step (kept,
// as there, with DDP's hooks): once base (AllReduceHook if nil) has
// reduced a bucket, the owners of the bucket's parameters step them with
// its averaged gradients, and each is broadcast from its owner, while the
// rest of backward runs (zero.ZeRO.StepBucket). z must be made with
// zero.Options.OverlapWithDDP over the model's parameters on the model's
// group.
//
//	opt, err := zero.New(nn.Parameters(net), newAdam, g, zero.Options{OverlapWithDDP: true})
//	model, err := ddp.New(ctx, net, g, ddp.Options{CommHook: ddp.HookWithZeroStep(nil, opt)})
//	for batch := range batches {
//		opt.ZeroGrad(true)
//		err := model.Backward(ctx, loss(batch)) // reduced, stepped and sent
//		err = opt.StepContext(ctx)              // checks that every parameter was
//	}
//
// The parameters are the same, bit for bit, as after model.Backward and
// opt.StepContext without overlap: the same gradients and the same
// per-parameter updates. Like PyTorch's, the hook changes a parameter
// (its owner steps it, the others receive it) while backward is still
// running: safe because a parameter whose gradient is complete is not
// read again by the pass, unless the model reads its value behind
// autograd's back. The buckets are handled one after another, in bucket
// order on every rank, so that their collectives are issued in the same
// order everywhere; a bucket's reduction starts once the one before it
// has been stepped and sent.
func HookWithZeroStep(base CommHook, z *zero.ZeRO) CommHook {
	if base == nil {
		base = AllReduceHook
	}
	var mu sync.Mutex
	var last *dist.Work // the previous bucket's
	return func(g *dist.Group, b *GradBucket) *dist.Work {
		mu.Lock()
		defer mu.Unlock()
		prev := last
		last = dist.Go(func() error {
			if prev != nil {
				if err := prev.Wait(context.Background()); err != nil {
					return err
				}
			}
			return z.StepBucket(g, b.Index, b.Parameters(), func() ([]*tensor.Tensor, error) {
				if err := base(g, b).Wait(context.Background()); err != nil {
					return nil, err
				}
				return b.Gradients(), nil
			})
		})
		return last
	}
}
