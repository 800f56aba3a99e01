package zero

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/parallel/ddp"
)

// HookWithZeroStep returns a DDP communication hook that overlaps z's
// step with the DDP model's backward pass, as PyTorch's
// hook_with_zero_step: once base (ddp.AllReduceHook if nil) has reduced
// a bucket, the owners of the bucket's parameters step them with its
// averaged gradients, and each is broadcast from its owner, while the
// rest of backward runs. z must be made with Options.OverlapWithDDP over
// the model's parameters on the model's group.
//
//	opt, err := zero.New(nn.Parameters(net), newAdam, g, zero.Options{OverlapWithDDP: true})
//	model, err := ddp.New(ctx, net, g, ddp.Options{CommHook: zero.HookWithZeroStep(nil, opt)})
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
func HookWithZeroStep(base ddp.CommHook, z *ZeRO) ddp.CommHook {
	if base == nil {
		base = ddp.AllReduceHook
	}
	var mu sync.Mutex
	var last *dist.Work // the previous bucket's
	return func(g *dist.Group, b *ddp.GradBucket) *dist.Work {
		mu.Lock()
		defer mu.Unlock()
		prev := last
		last = dist.Go(func() error {
			if prev != nil {
				if err := prev.Wait(context.Background()); err != nil {
					return err
				}
			}
			err := z.stepBucket(g, b, base)
			if err != nil {
				z.mu.Lock()
				if z.mu.err == nil {
					z.mu.err = err
				}
				z.mu.Unlock()
			}
			return err
		})
		return last
	}
}

// stepBucket reduces bucket b with base, steps the parameters of it this
// rank owns and broadcasts each of the bucket's parameters from its
// owner. It runs on the hook's goroutine, one bucket at a time.
func (z *ZeRO) stepBucket(g *dist.Group, b *ddp.GradBucket, base ddp.CommHook) error {
	me := z.group.Rank()
	if !z.opt.OverlapWithDDP {
		return fmt.Errorf("zero: rank %d: HookWithZeroStep with an optimizer made without Options.OverlapWithDDP", me)
	}
	if g != z.group {
		return errors.New("zero: HookWithZeroStep on a DDP model of another group than the ZeRO optimizer's")
	}
	params := b.Parameters()
	idx := make([]int, len(params))
	for k, p := range params {
		i, ok := z.index[p]
		if !ok {
			return fmt.Errorf("zero: rank %d: DDP bucket %d holds a parameter (its %d) that the ZeRO optimizer was not given", me, b.Index, k)
		}
		idx[k] = i
	}
	if err := base(g, b).Wait(context.Background()); err != nil {
		return err
	}
	grads := b.Gradients() // the averages
	stepped := false
	for _, p := range z.local.Params() {
		p.ZeroGrad(true) // proxies: only this bucket's are stepped
	}
	for k, i := range idx {
		if z.owner[i] == me {
			z.proxy[i].SetValue(params[k].Value()) // in case it was replaced
			z.proxy[i].SetGrad(grads[k])
			stepped = true
		}
	}
	if stepped {
		z.local.Step()
		for _, p := range z.local.Params() {
			p.ZeroGrad(true)
		}
	}
	works := make([]*dist.Work, len(params))
	for k, i := range idx {
		works[k] = g.BroadcastAsync(params[k].Value(), z.owner[i])
	}
	var first error
	for _, w := range works {
		if err := w.Wait(context.Background()); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	z.mu.Lock()
	z.mu.hooked += len(params)
	z.mu.Unlock()
	return nil
}
