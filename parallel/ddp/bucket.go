package ddp

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
