package zero

import (
	"context"
	"errors"
	"fmt"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/tensor"
)

// StepBucket is the step of Options.OverlapWithDDP for one bucket of a DDP
// model's gradients, run by the communication hook that overlaps the step
// with backward (ddp.HookWithZeroStep, PyTorch's hook_with_zero_step). It
// checks that z steps params, the bucket's parameters, over g; calls
// reduce, which must average their gradients over g and return them in
// params' order; steps the parameters this rank owns with them; and
// broadcasts each parameter from its owner. It blocks until the
// broadcasts are done. bucket is the bucket's index, for errors. Every
// rank must call it for the same buckets in the same order, one bucket
// at a time, so that their collectives are issued alike everywhere. Its
// error is also kept for the next StepContext, which checks that every
// parameter was stepped once.
func (z *ZeRO) StepBucket(g *dist.Group, bucket int, params []*autograd.Var, reduce func() ([]*tensor.Tensor, error)) error {
	err := z.stepBucket(g, bucket, params, reduce)
	if err != nil {
		z.mu.Lock()
		if z.mu.err == nil {
			z.mu.err = err
		}
		z.mu.Unlock()
	}
	return err
}

// stepBucket is StepBucket without keeping its error.
func (z *ZeRO) stepBucket(g *dist.Group, bucket int, params []*autograd.Var, reduce func() ([]*tensor.Tensor, error)) error {
	me := z.group.Rank()
	if !z.opt.OverlapWithDDP {
		return fmt.Errorf("zero: rank %d: ddp.HookWithZeroStep with an optimizer made without Options.OverlapWithDDP", me)
	}
	if g != z.group {
		return errors.New("zero: ddp.HookWithZeroStep on a DDP model of another group than the ZeRO optimizer's")
	}
	idx := make([]int, len(params))
	for k, p := range params {
		i, ok := z.index[p]
		if !ok {
			return fmt.Errorf("zero: rank %d: DDP bucket %d holds a parameter (its %d) that the ZeRO optimizer was not given", me, bucket, k)
		}
		idx[k] = i
	}
	grads, err := reduce() // the averages
	if err != nil {
		return err
	}
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
