package ddp

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/tensor"
)

// firstReadyLocked returns when the iteration's first gradient became
// ready; ok is false when some gradient has no time (a Join shadow's
// iteration, say): not a measured iteration.
func (d *DDP) firstReadyLocked() (first time.Time, ok bool) {
	if len(d.params) == 0 || len(d.mu.readyAt) != len(d.params) {
		return first, false
	}
	for _, at := range d.mu.readyAt {
		if at.IsZero() {
			return first, false
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first, true
}

// readyTimesLocked returns when each gradient became ready in the
// iteration just waited for, from the first of them, or nil when it was
// not measured.
func (d *DDP) readyTimesLocked() []time.Duration {
	first, ok := d.firstReadyLocked()
	if !ok {
		return nil
	}
	out := make([]time.Duration, len(d.params))
	for i, at := range d.mu.readyAt {
		out[i] = at.Sub(first)
	}
	return out
}

// trialRounds is how many iterations AutoBucketCaps runs each candidate
// for, taking turns (one iteration each, round after round, so that a
// machine that slows down or speeds up meanwhile weighs on all alike);
// the median of them decides.
const trialRounds = 3

// trial is AutoBucketCaps' state while it tries its candidates.
type trial struct {
	cands []BucketCaps
	cur   int // the candidate the buckets are planned with
	// times[k] are rank 0's measured iterations with cands[k]: from the
	// first gradient ready to the end of Wait.
	times [][]time.Duration
	done  []BucketTrial // what was tried, once chosen (rank 0's times)
}

// BucketTrial is one candidate AutoBucketCaps tried: its caps, and the
// median of its iterations from the first gradient ready to the end of
// Wait as rank 0 measured them (zero on the other ranks).
type BucketTrial struct {
	Caps   BucketCaps
	Median time.Duration
}

// tuneDueLocked reports whether this iteration's prepare takes an
// AutoBucketCaps step: the same answer on every rank, which all take it
// (some broadcast).
func (d *DDP) tuneDueLocked() bool {
	return d.opt.AutoBucketCaps && !d.mu.tuned && d.mu.iteration >= 2
}

// tune is AutoBucketCaps' step between iterations. At the prepare of the
// third iteration rank 0 chooses from its measured second backward
// (order, ready) and the group's cost model (ChooseBucketCaps), makes the
// shortlist (BucketShortlist) and tells the others; then each
// iteration's buckets are planned with the next candidate in turn, for
// trialRounds rounds; after the last, rank 0 picks the one with the
// least median (PickTrial) and every rank plans with it for good.
func (d *DDP) tune(ctx context.Context, order []int, ready []time.Duration) error {
	d.mu.Lock()
	k := d.mu.iteration - 2 // the trial iteration about to run
	n := len(d.mu.trial.cands)
	options := d.mu.caps
	d.mu.Unlock()
	rank0 := d.group.Rank() == 0
	switch {
	case k == 0:
		var cands []BucketCaps // none: keep the options' caps
		if rank0 && ready != nil {
			if c, ok := d.chooseCaps(order, ready); ok {
				cands = BucketShortlist(order, d.sizes(), options, c.Caps)
			}
		}
		if err := dist.BroadcastObject(ctx, d.group, &cands, 0); err != nil {
			return fmt.Errorf("ddp: share the bucket caps to try: %w", err)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if len(cands) == 0 {
			d.mu.tuned, d.mu.readyAt = true, nil
			return nil
		}
		d.mu.trial = trial{cands: cands, times: make([][]time.Duration, len(cands))}
		d.mu.caps = cands[0]
		d.plan(d.orderLocked())
	case k < n*trialRounds:
		d.mu.Lock()
		defer d.mu.Unlock()
		j := k % n
		d.mu.trial.cur = j
		d.mu.caps = d.mu.trial.cands[j]
		d.plan(d.orderLocked())
	default:
		best := 0
		if rank0 {
			d.mu.Lock()
			best = max(0, PickTrial(d.mu.trial.times))
			d.mu.Unlock()
		}
		if err := dist.BroadcastObject(ctx, d.group, &best, 0); err != nil {
			return fmt.Errorf("ddp: share the chosen bucket caps: %w", err)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		t := &d.mu.trial
		if best < 0 || best >= len(t.cands) {
			return fmt.Errorf("ddp: rank 0 chose bucket caps %d of %d", best, len(t.cands))
		}
		for k, c := range t.cands {
			bt := BucketTrial{Caps: c}
			if ts := slices.Clone(t.times[k]); len(ts) > 0 {
				slices.Sort(ts)
				bt.Median = ts[len(ts)/2]
			}
			t.done = append(t.done, bt)
		}
		t.cur, t.times = best, nil
		d.mu.caps = t.cands[best]
		d.plan(d.orderLocked())
		d.mu.tuned, d.mu.readyAt = true, nil
	}
	return nil
}

// recordTrialLocked ends a trial iteration, in Wait: rank 0 keeps the
// time from its first ready gradient to now.
func (d *DDP) recordTrialLocked() {
	t := &d.mu.trial
	if d.mu.tuned || len(t.cands) == 0 || d.group.Rank() != 0 {
		return
	}
	if first, ok := d.firstReadyLocked(); ok {
		t.times[t.cur] = append(t.times[t.cur], time.Since(first))
	}
}

// BucketTrials returns the candidates AutoBucketCaps tried and their
// medians (rank 0's; zero elsewhere), once it has chosen; nil before, or
// when it tried none (one host).
func (d *DDP) BucketTrials() []BucketTrial {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.mu.trial.done)
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
