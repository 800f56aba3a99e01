package ddp

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// PlanBuckets assigns parameters to buckets: order lists parameter indices
// in the order their gradients are expected to become ready (DDP starts
// with the reverse of registration order, then uses the order observed in
// the first iteration), sizes[i] is parameter i's gradient size in bytes.
// The first bucket holds at most firstCap bytes (a small first bucket
// starts communication early), the others at most capBytes; a parameter
// larger than the cap gets a bucket of its own. It returns the buckets'
// parameter indices, in the order the buckets will be reduced. It is a
// pure function, so every rank computes the same plan.
func PlanBuckets(order []int, sizes []int64, firstCap, capBytes int64) [][]int {
	var out [][]int
	var cur []int
	var curBytes int64
	limit := firstCap
	for _, i := range order {
		if len(cur) > 0 && curBytes+sizes[i] > limit {
			out = append(out, cur)
			cur, curBytes, limit = nil, 0, capBytes
		}
		cur = append(cur, i)
		curBytes += sizes[i]
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// BucketCaps are the two caps PlanBuckets takes, in bytes.
type BucketCaps struct {
	First, Rest int64
}

// CapChoice is ChooseBucketCaps' answer: the caps, and the time from the
// last gradient becoming ready to the last bucket reduced (the part of
// the step that communication adds) that it predicts with them.
type CapChoice struct {
	Caps    BucketCaps
	Exposed time.Duration
	Buckets int
}

// ChooseBucketCaps chooses the bucket caps for a link from a measured
// backward pass and the cost of an all-reduce. order and sizes are
// PlanBuckets'; ready[i] is when parameter i's gradient became ready in a
// backward pass (from any fixed origin); cost(b) is the time of an
// all-reduce of b bytes over the group (Group.Choice's prediction). A
// bucket's all-reduce starts once it and every bucket before it are ready
// and the one before it is done (DDP launches them in order, and the
// group runs them one after another). Small buckets start early and hide
// under the rest of backward, but pay the all-reduce's latency each;
// large ones pay it once and wait for their last gradient. It tries caps
// from 64 KiB up by powers of two to one bucket for the whole model, each
// with a first bucket of the same size or of at most 1 MiB, and PyTorch's
// default (1 MiB, then 25 MiB), and returns the caps that leave the least
// time exposed after backward. Among choices within 2% (the model does not
// see a bucket's own overhead) it takes the one with fewest buckets. It is
// pure, so rank 0 decides and tells the others.
func ChooseBucketCaps(order []int, sizes []int64, ready []time.Duration, cost func(bytes int64) time.Duration) CapChoice {
	var total int64
	for _, s := range sizes {
		total += s
	}
	const mib = 1 << 20
	cands := []BucketCaps{{mib, 25 * mib}}
	for c := int64(64 << 10); ; c *= 2 {
		cands = append(cands, BucketCaps{c, c})
		if c > mib {
			cands = append(cands, BucketCaps{mib, c})
		}
		if c >= total {
			break
		}
	}
	choices := make([]CapChoice, len(cands))
	least := time.Duration(math.MaxInt64)
	for k, caps := range cands {
		plan := PlanBuckets(order, sizes, caps.First, caps.Rest)
		choices[k] = CapChoice{Caps: caps, Exposed: simulateBuckets(plan, sizes, ready, cost), Buckets: len(plan)}
		least = min(least, choices[k].Exposed)
	}
	var best CapChoice
	for k, c := range choices {
		if float64(c.Exposed) <= 1.02*float64(least) && (best.Buckets == 0 || c.Buckets < best.Buckets || c.Buckets == best.Buckets && c.Exposed < best.Exposed) {
			best = choices[k]
		}
	}
	return best
}

// simulateBuckets returns the time from the last gradient ready to the
// last of plan's buckets reduced, as ChooseBucketCaps describes.
func simulateBuckets(plan [][]int, sizes []int64, ready []time.Duration, cost func(int64) time.Duration) time.Duration {
	var launch, free time.Duration // launch only grows: buckets go in order
	for _, ps := range plan {
		var bytes int64
		for _, i := range ps {
			bytes += sizes[i]
			if ready[i] > launch {
				launch = ready[i]
			}
		}
		free = max(free, launch) + cost(bytes)
	}
	return free - launch
}

// BucketShortlist returns the caps AutoBucketCaps tries on real
// iterations: the options' (first), the model's choice, and that choice's
// rest cap ×4 and ×16 (fewer, larger buckets, for hosts where a bucket's
// all-reduce costs more than the model says: one CPU that backward holds),
// without two that cut the same plan.
func BucketShortlist(order []int, sizes []int64, options, model BucketCaps) []BucketCaps {
	cands := []BucketCaps{options, model}
	for _, f := range []int64{4, 16} {
		cands = append(cands, BucketCaps{First: model.First, Rest: model.Rest * f})
	}
	var out []BucketCaps
	var plans []string
	for _, c := range cands {
		p := fmt.Sprint(PlanBuckets(order, sizes, c.First, c.Rest))
		if !slices.Contains(plans, p) {
			out, plans = append(out, c), append(plans, p)
		}
	}
	return out
}

// PickTrial returns the candidate whose trial iterations took the least
// median time (times[k] are candidate k's; one with none never wins), or
// -1 when none has any.
func PickTrial(times [][]time.Duration) int {
	best, bestT := -1, time.Duration(0)
	for k, ts := range times {
		if len(ts) == 0 {
			continue
		}
		s := slices.Clone(ts)
		slices.Sort(s)
		if m := s[len(s)/2]; best < 0 || m < bestT {
			best, bestT = k, m
		}
	}
	return best
}
