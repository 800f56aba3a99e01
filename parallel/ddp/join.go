package ddp

import (
	"context"
	"fmt"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/tensor"
)

// Join lets ranks with fewer inputs than others finish training without
// hanging or failing, as PyTorch's Join context manager (Join, Joinable,
// JoinHook). fn is the rank's training loop over its own data. While the
// other ranks are still training, a rank whose fn has returned shadows
// their collectives: every iteration it takes part in the same
// all-reduces with zero gradients, so they complete.
//
// The protocol: every iteration of every rank still training begins (in
// DDP's forward) with an all-reduce counting the ranks still training; a
// rank that has joined answers it with zero, and shadows the iteration if
// the count is not zero. When the count is zero, every rank has joined
// and Join returns. Gradients are still averaged over the whole group
// (joined ranks contribute zeros), as PyTorch's default
// divide_by_initial_world_size.
func Join(ctx context.Context, models []*DDP, fn func() error) error {
	if len(models) == 0 {
		return fn()
	}
	g := models[0].group
	st := &joinState{}
	for _, m := range models {
		if m.group != g {
			return fmt.Errorf("ddp: Join of models on different groups")
		}
		m.join = st
	}
	defer func() {
		for _, m := range models {
			m.join = nil
		}
	}()
	if err := fn(); err != nil {
		return err
	}
	// This rank has joined: shadow the others until all have.
	for {
		n, err := st.count(ctx, g, 0)
		if err != nil {
			return fmt.Errorf("ddp: join: %w", err)
		}
		if n == 0 {
			return nil
		}
		for _, m := range models {
			if err := m.shadow(ctx); err != nil {
				return fmt.Errorf("ddp: join: shadowing rank(s) still training: %w", err)
			}
		}
	}
}

// joinState is the per-Join bookkeeping shared by the models.
type joinState struct{}

// notify is the iteration's all-reduce on a rank still training.
func (st *joinState) notify(ctx context.Context, g *dist.Group) error {
	_, err := st.count(ctx, g, 1)
	return err
}

// count all-reduces this rank's flag: the number of ranks still training.
func (st *joinState) count(ctx context.Context, g *dist.Group, mine int64) (int64, error) {
	t := tensor.FromInt64([]int64{mine})
	if err := g.AllReduce(ctx, t, dist.Sum); err != nil {
		return 0, err
	}
	return t.Int64s()[0], nil
}

// shadow issues one iteration's collectives with zero gradients: those of
// prepare after the join notification (the bucket rebuild, the buffer
// broadcast) and one reduction per bucket, in bucket order.
func (d *DDP) shadow(ctx context.Context) error {
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
	return nil
}
