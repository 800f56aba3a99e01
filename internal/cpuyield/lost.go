package cpuyield

import (
	"sync/atomic"
	"time"
)

// YieldLost yields the thread's CPU (Yield) and reports whether it came
// back only after LostYield: work that runs a whole slice when given the
// CPU (a CPU hog, a rank computing) has it too. A poller that yields (a
// host with more ranks than CPUs) then finds what it waits for a slice
// late each time, where a thread asleep is woken by it; so it should
// sleep, and tell its Hold. Its process's CPU time cannot tell: the job's
// other ranks, which take the CPU's other turns as they should, starve
// it as much; but they poll too, and give the CPU back within
// microseconds.
func YieldLost() bool {
	t := time.Now()
	Yield()
	return time.Since(t) > LostYield
}

// LostYield is how long a yield may keep a poller off its CPU before
// YieldLost says other work has it. Measured on this project's 2-CPU
// machine, yields lost to two CPU hogs took 1.2 ms (p10) to 3.5 ms
// (p90); those a quiet job's own ranks take now and then, copying or
// reducing, 1.0-2.8 ms. At 1 ms, 4 namespace hosts of one rank on the two
// CPUs ran an all-reduce of 1 MiB in 15.2 ms against 14.2 without
// (medians of four alternating runs); at 2 ms in 14.5, while under the
// hogs their 8 B calls took 0.3-2.6 ms against 0.4-0.8 at 1 ms (6-8
// polling through every yield).
const LostYield = 2 * time.Millisecond

// A Hold is what a group of pollers (a process's socket readers, a
// same-host engine's waits) learned of lost yields: after two within
// Confirm of each other, they sleep at once (Held) for HoldFor. A hog takes
// a slice at nearly every spell of polling, milliseconds apart; the
// job's own ranks take slices too, but rarely once started (4 namespace
// hosts of one rank on two CPUs, quiet: 3-6 lost yields a rank, all in
// the first 150 ms, Init's bulk measurements; four ranks of one host on
// two CPUs: one every 150-250 ms a rank). The hold is short: a hog costs
// a slice or two in each. The zero Hold holds nothing; it is safe for
// concurrent use.
//
// Clear ends the holds, and forgets the yields lost, before a time.
//
// A hold confirmed in a bulk call (BulkBegan) or within BulkTail of its
// end ends BulkTail after the process's last bulk call, unless another
// is in flight: its yields may have been lost to the job's own ranks.
type Hold struct {
	lastLost, until atomic.Int64 // UnixNano
	confirmed       atomic.Int64 // UnixNano: the lost yield that last started or extended the hold
	bulk            atomic.Bool  // that yield was lost in a bulk call, or within BulkTail of one
}

// Lost records that a poller lost a yield at now (YieldLost). One lost
// before the last Clear confirms none after it.
func (h *Hold) Lost(now time.Time) {
	t := now.UnixNano()
	if prev := h.lastLost.Swap(t); prev == 0 || t-prev > int64(Confirm) || prev < cleared.Load() {
		return
	}
	h.bulk.Store(inBulk(t))
	raise(&h.confirmed, t)
	raise(&h.until, now.Add(HoldFor).UnixNano())
}

// raise sets v to t unless it holds a later time.
func raise(v *atomic.Int64, t int64) {
	for {
		old := v.Load()
		if old >= t || v.CompareAndSwap(old, t) {
			return
		}
	}
}

// Held reports whether the pollers should sleep at once at now: a hold
// lasts, begun or extended since the last Clear.
func (h *Hold) Held(now time.Time) bool {
	t := now.UnixNano()
	if t >= h.until.Load() || h.confirmed.Load() < cleared.Load() {
		return false
	}
	return !h.bulk.Load() || inBulk(t)
}

// The job's own bulk work. A collective that moves megabytes keeps the
// ranks that share a CPU copying, reducing and in the kernel's network
// stack for milliseconds at a time, so their pollers lose each other's
// yields as they would a hog's. A hold is right for such calls (beside
// CPU hogs too: ended at each bulk call's end, the barriers between the
// lab's all-reduces of 1 MiB found it gone, and each all-reduce took
// 19-26 ms against 12-13), but one that lasted its 100 ms held the
// pollers asleep through the small calls after: 2 hosts of 2 ranks
// sharing a CPU each, 10 Gbit/s, quiet, an all-gather of 8 B after an
// all-reduce of 16 MiB took 138-169 µs against 106-118 when it ran
// first. So a hold that bulk work confirmed lasts BulkTail past the
// last bulk call: that all-gather 104-117 µs against 143-158 (three
// alternating runs), and beside the hogs the 1 MiB all-reduces 11.7-12.0
// ms against 11.8-11.9.
var (
	bulkCalls atomic.Int32 // the process's bulk calls in flight
	bulkEnd   atomic.Int64 // UnixNano: when the last one ended
)

// BulkTail is how long after a bulk call's end its holds last, and yields
// lost then count as lost in it: the other ranks finish their part of
// the call, and the next bulk call, a barrier away, finds the hold.
const BulkTail = 10 * time.Millisecond

// BulkBegan says that the process begins a call that moves megabytes
// with the job's other ranks; BulkEnded, at now, that one ended.
func BulkBegan() { bulkCalls.Add(1) }

// BulkEnded ends a call that BulkBegan began.
func BulkEnded(now time.Time) {
	raise(&bulkEnd, now.UnixNano())
	bulkCalls.Add(-1)
}

// inBulk reports whether at t a bulk call is in flight or ended within
// BulkTail.
func inBulk(t int64) bool {
	return bulkCalls.Load() > 0 || t < bulkEnd.Load()+int64(BulkTail)
}

// cleared is when Clear last ended the holds (UnixNano).
var cleared atomic.Int64

// Clear ends every Hold of the process confirmed before t, and makes the
// yields lost before t count for none after it: the job's own start-up
// work (dist.Init's measurement of the links moves megabytes between
// ranks that share CPUs, and each rank then collects its heap) lost
// them, not a hog. On 4 namespace hosts of one rank on the two CPUs, two
// or three yields a rank lost in Init held one rank's readers asleep for
// the first 100 ms of the job, through the lab's first 300 iterations:
// 1,000-3,600 sleeps where it would have polled. A hog is found again by
// the next two yields lost after t.
func Clear(t time.Time) { raise(&cleared, t.UnixNano()) }

const (
	Confirm = 50 * time.Millisecond  // the most between two lost yields that start a hold
	HoldFor = 100 * time.Millisecond // a hold's length
)
