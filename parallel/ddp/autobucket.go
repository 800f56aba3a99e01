package ddp

import (
	"context"
	"fmt"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/tensor"
)

// readyTimesLocked returns when each gradient became ready in the
// iteration just waited for, from the first of them, or nil when some
// gradient has no time (a Join shadow's iteration, say).
func (d *DDP) readyTimesLocked() []time.Duration {
	if len(d.mu.readyAt) != len(d.params) {
		return nil
	}
	var first time.Time
	for _, at := range d.mu.readyAt {
		if at.IsZero() {
			return nil
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	out := make([]time.Duration, len(d.params))
	for i, at := range d.mu.readyAt {
		out[i] = at.Sub(first)
	}
	return out
}

// tune is AutoBucketCaps' step, between iterations: rank 0 chooses the
// caps from its measured backward (order, ready) and the group's cost
// model, every rank learns them from it and re-plans its buckets.
func (d *DDP) tune(ctx context.Context, order []int, ready []time.Duration) error {
	var caps BucketCaps // zero: keep the options' caps
	if d.group.Rank() == 0 && ready != nil {
		if c, ok := d.chooseCaps(order, ready); ok {
			caps = c.Caps
		}
	}
	if err := dist.BroadcastObject(ctx, d.group, &caps, 0); err != nil {
		return fmt.Errorf("ddp: share the chosen bucket caps: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.tuned = true
	d.mu.readyAt = nil
	if caps.First > 0 && caps.Rest > 0 {
		d.mu.caps = caps
		d.plan(d.orderLocked())
	}
	return nil
}

// chooseCaps is ChooseBucketCaps with the group's cost model; ok is false
// when the group is on one host: its buckets, shared tensors, go through
// the same-host engine, which the model does not cover.
func (d *DDP) chooseCaps(order []int, ready []time.Duration) (CapChoice, bool) {
	if len(d.group.Topology().Hosts) < 2 {
		return CapChoice{}, false
	}
	sizes := d.sizes()
	cost := func(b int64) time.Duration {
		c, _ := d.group.Choice("all_reduce", int(b/4), tensor.Float32)
		return c.Predicted
	}
	return ChooseBucketCaps(order, sizes, ready, cost), true
}

// BucketCaps returns the caps the buckets are planned with, in bytes:
// the options', or AutoBucketCaps' choice once made.
func (d *DDP) BucketCaps() BucketCaps {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.caps
}
