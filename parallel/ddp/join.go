package ddp

import (
	"context"
	"fmt"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/parallel/join"
)

// Join is join.Join for DDP models alone, the models' group being the
// group: ranks with fewer inputs than others finish training without
// hanging or failing, as PyTorch's Join context manager over DDP
// models. fn is the rank's training loop over its own data. While the
// other ranks are still training, a rank whose fn has returned shadows
// their collectives: every iteration it takes part in the same
// all-reduces with zero gradients, so they complete. Gradients are still
// averaged over the whole group (joined ranks contribute zeros), as
// PyTorch's default divide_by_initial_world_size. To join other
// Joinables too (a ZeRO optimizer), call join.Join.
func Join(ctx context.Context, models []*DDP, fn func() error) error {
	if len(models) == 0 {
		return fn()
	}
	js := make([]join.Joinable, len(models))
	for i, m := range models {
		if m.group != models[0].group {
			return fmt.Errorf("ddp: Join of models on different groups")
		}
		js[i] = m
	}
	if err := join.Join(ctx, models[0].group, js, fn); err != nil {
		return fmt.Errorf("ddp: %w", err)
	}
	return nil
}

var _ join.Joinable = (*DDP)(nil)

// SetJoin is join.Joinable's: under a Join, each iteration's Prepare
// (Forward) begins with the Join's notification.
func (d *DDP) SetJoin(c *join.Context) {
	d.mu.Lock()
	d.join = c
	d.mu.Unlock()
}

// Shadow is join.Joinable's: on a rank that has joined, it issues one
// iteration's collectives with zero gradients: those of Prepare after the
// Join's notification (the bucket rebuild, the buffer broadcast) and one
// reduction per bucket, in bucket order. It leaves the iteration's
// average gradient (that of the ranks still training) in the parameters'
// Grad, as it is there, so that an optimizer stepping on this rank too
// (ZeRO's Shadow) steps with it.
func (d *DDP) Shadow(ctx context.Context) error {
	d.mu.Lock()
	rebuild := d.mu.iteration == 1 && !d.mu.rebuilt && !d.opt.NoRebuildBuckets
	d.mu.Unlock()
	if rebuild {
		// Rank 0 decides the order; a joined rank 0 keeps its own.
		d.mu.Lock()
		order := append([]int(nil), d.mu.readyOrder...)
		d.mu.Unlock()
		if len(order) != len(d.params) {
			order = nil
		}
		if err := dist.BroadcastObject(ctx, d.group, &order, 0); err != nil {
			return err
		}
		d.mu.Lock()
		if len(order) == len(d.params) {
			d.plan(order)
		}
		d.mu.rebuilt = true
		d.mu.Unlock()
	}
	if !d.opt.NoBroadcastBuffers {
		if err := d.broadcastBuffers(ctx); err != nil {
			return err
		}
	}
	d.mu.Lock()
	buckets := d.mu.buckets
	works := make([]*dist.Work, len(buckets))
	for b, bk := range buckets {
		// Zeros in the bucket's own memory: the active members reduce
		// theirs in the same piece of a shared tensor (the joined
		// member's gradients, views of it, end as everyone's average).
		bk.buf.Zero()
		shadow := &bucket{params: bk.params, offsets: bk.offsets, buf: bk.buf}
		works[b] = d.opt.CommHook(d.group, &GradBucket{Index: b, Buffer: shadow.buf, IsLast: b == len(buckets)-1, params: shadow, ddp: d})
	}
	d.mu.iteration++
	d.mu.Unlock()
	for _, w := range works {
		if err := w.Wait(ctx); err != nil {
			return err
		}
	}
	if !d.opt.GradientAsBucketView {
		// (With it, the gradients are views of the buckets already.)
		d.mu.Lock()
		for _, bk := range buckets {
			for k, i := range bk.params {
				if g := d.params[i].Grad(); g != nil {
					g.Copy(d.view(bk, k))
				} else {
					d.params[i].SetGrad(d.view(bk, k).Clone())
				}
			}
		}
		d.mu.Unlock()
	}
	return nil
}
