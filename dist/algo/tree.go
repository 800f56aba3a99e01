package algo

// BinomialBroadcast broadcasts from root along a binomial tree: in round k
// the ranks that already hold the data, relative ranks 0..2^k-1 counted
// from root, send it to relative rank +2^k.
//
// Layout: before, root's buffer holds count elements (the other buffers'
// contents do not matter); after, every buffer holds root's data.
//
// Rounds: ceil(log2 size) on the critical path (root has that many; a
// rank has at most that many). Traffic: a rank sends count elements to
// each of its children, root to ceil(log2 size) of them; every non-root
// rank receives count once.
func BinomialBroadcast(rank, size, root, count int) Schedule {
	checkGroup("BinomialBroadcast", rank, size)
	checkRoot("BinomialBroadcast", root, size)
	checkCount("BinomialBroadcast", count)
	if size == 1 || count == 0 {
		return nil
	}
	v := mod(rank-root, size)
	var b builder
	for mask := 1; mask < size; mask <<= 1 {
		switch {
		case v < mask && v+mask < size:
			b.send(mod(rank+mask, size), 0, count)
		case v >= mask && v < 2*mask:
			b.recv(mod(rank-mask, size), 0, count, false)
		}
		b.end()
	}
	return b.s
}

// ChainBroadcast broadcasts from root along the chain root, root+1, ...,
// root+size-1 (mod size), streaming: the data is cut into segments pieces
// by Chunks(count, segments), and in round t a rank receives piece t from
// its predecessor while it forwards piece t-1 to its successor. For large
// messages, where each hop's bandwidth matters more than the number of
// hops.
//
// Layout: before, root's buffer holds count elements; after, every buffer
// holds root's data.
//
// Rounds: segments+1 for a rank in the middle of the chain (segments for
// root and for the last rank); the last piece reaches the last rank
// size+segments-2 rounds after root starts. Traffic: every rank but the
// last sends count elements; every rank but root receives count.
func ChainBroadcast(rank, size, root, count, segments int) Schedule {
	checkGroup("ChainBroadcast", rank, size)
	checkRoot("ChainBroadcast", root, size)
	checkCount("ChainBroadcast", count)
	checkSegments("ChainBroadcast", segments)
	if size == 1 || count == 0 {
		return nil
	}
	v := mod(rank-root, size)
	prev, next := mod(rank-1, size), mod(rank+1, size)
	offs, lens := Chunks(count, segments)
	var b builder
	if v == 0 {
		for t := range segments {
			b.send(next, offs[t], lens[t])
			b.end()
		}
		return b.s
	}
	for t := range segments + 1 {
		if t < segments {
			b.recv(prev, offs[t], lens[t], false)
		}
		if t > 0 && v < size-1 {
			b.send(next, offs[t-1], lens[t-1])
		}
		b.end()
	}
	return b.s
}

// BinomialReduce reduces to root along a binomial tree, the mirror of
// BinomialBroadcast: in round k a relative rank (counted from root) whose
// bit k is its lowest set bit sends its partial result to relative rank
// -2^k and is done; the ranks below reduce what they receive.
//
// Layout: before, each rank's buffer holds its count elements; after,
// root's buffer holds the reduction over all ranks. Non-root buffers are
// scratch (they end holding partial reductions).
//
// Rounds: ceil(log2 size) for root, fewer for the others. Traffic: every
// rank but root sends count elements once; a rank receives count from each
// of its children.
func BinomialReduce(rank, size, root, count int) Schedule {
	checkGroup("BinomialReduce", rank, size)
	checkRoot("BinomialReduce", root, size)
	checkCount("BinomialReduce", count)
	if size == 1 || count == 0 {
		return nil
	}
	v := mod(rank-root, size)
	var b builder
	for mask := 1; mask < size; mask <<= 1 {
		if v&mask != 0 {
			b.send(mod(rank-mask, size), 0, count)
			b.end()
			break
		}
		if v+mask < size {
			b.recv(mod(rank+mask, size), 0, count, true)
		}
		b.end()
	}
	return b.s
}
