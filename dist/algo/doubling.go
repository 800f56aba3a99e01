package algo

import "slices"

// Non-powers of two: RecursiveDoublingAllReduce and HalvingDoublingAllReduce
// run their exchanges among the p = largest power of two <= size "core"
// ranks 0..p-1. Each extra rank e >= p first sends its whole vector to core
// rank e-p, which reduces it in; at the end core rank e-p sends the result
// back. This costs the paired ranks two more rounds and two whole-vector
// transfers.

// foldIn appends the first round of the non-power-of-two fold and reports
// whether rank is an extra rank (which then has nothing more to do but
// foldOut).
func foldIn(b *builder, rank, size, p, count int) (extra bool) {
	if rank >= p {
		b.send(rank-p, 0, count)
		b.end()
		return true
	}
	if rank+p < size {
		b.recv(rank+p, 0, count, true)
		b.end()
	}
	return false
}

// foldOut appends the last round of the fold: the result goes back to the
// extra rank.
func foldOut(b *builder, rank, size, p, count int) {
	if rank >= p {
		b.recv(rank-p, 0, count, false)
	} else if rank+p < size {
		b.send(rank+p, 0, count)
	}
	b.end()
}

// RecursiveDoublingAllReduce is the latency-optimal all-reduce for small
// messages: in round k, rank exchanges its whole vector with rank XOR 2^k
// and both reduce what they receive.
//
// Layout: before, each rank's buffer holds its count elements; after, every
// rank's buffer holds the reduction over all ranks.
//
// Rounds: log2(size) when size is a power of two. Otherwise the fold above:
// log2(p)+2 = ceil(log2 size)+1 rounds on the critical path (p the largest
// power of two below size); the extra ranks have 2 rounds.
//
// Traffic: a core rank sends log2(p)·count elements (plus count if it has
// an extra partner); an extra rank sends count.
//
// The exchange rounds swap whole vectors, so a send overlaps the reducing
// receive of the same round: those rounds are marked Round.Snapshot and the
// executor must honour it.
func RecursiveDoublingAllReduce(rank, size, count int) Schedule {
	checkGroup("RecursiveDoublingAllReduce", rank, size)
	checkCount("RecursiveDoublingAllReduce", count)
	if size == 1 || count == 0 {
		return nil
	}
	p := floorPow2(size)
	var b builder
	if foldIn(&b, rank, size, p, count) {
		foldOut(&b, rank, size, p, count)
		return b.s
	}
	for mask := 1; mask < p; mask <<= 1 {
		peer := rank ^ mask
		b.send(peer, 0, count)
		b.recv(peer, 0, count, true)
		if mask<<1 == p {
			b.final(count)
		}
		b.cur.Snapshot = true
		b.end()
	}
	foldOut(&b, rank, size, p, count)
	return b.s
}

// HalvingDoublingAllReduce is Rabenseifner's all-reduce: a reduce-scatter
// by recursive halving (in each round a rank keeps half of its current
// range, sends the other half to its partner, and reduces the partner's
// copy of the kept half), then an all-gather by recursive doubling that
// retraces the same pairs in reverse.
//
// Layout: before, each rank's buffer holds its count elements; after, every
// rank's buffer holds the reduction over all ranks. Between the two phases
// core rank r owns chunk r of Chunks(count, p), p the largest power of two
// <= size; with count < p some chunks are empty and their transfers are
// left out.
//
// Rounds: 2·log2(size) for a power of two; otherwise, with the fold
// described above, 2·log2(p)+2 on the critical path.
//
// Traffic: a core rank sends about 2·(p-1)/p·count elements (plus count to
// its extra partner, if any); an extra rank sends count.
func HalvingDoublingAllReduce(rank, size, count int) Schedule {
	checkGroup("HalvingDoublingAllReduce", rank, size)
	checkCount("HalvingDoublingAllReduce", count)
	return halvingDoubling(rank, size, count, false)
}

// HalvingDoublingNearAllReduce is HalvingDoublingAllReduce with the
// dimensions taken in the other order: the reduce-scatter first halves the
// vector with the partner at distance 1, then 2, 4..., so that the largest
// exchanges are between near ranks. With the ranks of a host numbered
// together (2^k on each), those are on one host, and the network carries
// only the smaller halves: on 2 hosts × 2 ranks, a quarter of the vector
// each way per rank where the far-first order sends half. Core rank r
// owns, between the phases, the chunk whose index is r's bits reversed.
func HalvingDoublingNearAllReduce(rank, size, count int) Schedule {
	checkGroup("HalvingDoublingNearAllReduce", rank, size)
	checkCount("HalvingDoublingNearAllReduce", count)
	return halvingDoubling(rank, size, count, true)
}

func halvingDoubling(rank, size, count int, nearFirst bool) Schedule {
	if size == 1 || count == 0 {
		return nil
	}
	p := floorPow2(size)
	var b builder
	if foldIn(&b, rank, size, p, count) {
		foldOut(&b, rank, size, p, count)
		return b.s
	}
	offs, _ := Chunks(count, p)
	offs = append(offs, count)
	span := func(lo, hi int) (off, n int) { return offs[lo], offs[hi] - offs[lo] }
	var dims []int // the order in which the bits of the rank are taken
	for mask := p / 2; mask >= 1; mask >>= 1 {
		dims = append(dims, mask)
	}
	if nearFirst {
		slices.Reverse(dims)
	}

	lo, hi := 0, p // the chunks this rank is still responsible for
	for i, dim := range dims {
		peer, mid := rank^dim, lo+(hi-lo)/2
		keepLo, keepHi, giveLo, giveHi := lo, mid, mid, hi
		if rank&dim != 0 {
			keepLo, keepHi, giveLo, giveHi = mid, hi, lo, mid
		}
		off, n := span(giveLo, giveHi)
		b.send(peer, off, n)
		off, n = span(keepLo, keepHi)
		b.recv(peer, off, n, true)
		if i == len(dims)-1 {
			b.final(n)
		}
		b.end()
		lo, hi = keepLo, keepHi
	}
	for i := len(dims) - 1; i >= 0; i-- {
		dim := dims[i]
		peer, width := rank^dim, hi-lo
		off, n := span(lo, hi)
		b.send(peer, off, n)
		if rank&dim == 0 {
			off, n = span(hi, hi+width)
			hi += width
		} else {
			off, n = span(lo-width, lo)
			lo -= width
		}
		b.recv(peer, off, n, false)
		b.end()
	}
	foldOut(&b, rank, size, p, count)
	return b.s
}

// RecursiveDoublingAllGather is the all-gather for small messages. When
// size is a power of two it is recursive doubling proper: in round k
// (distance d = 2^k) rank and rank XOR d swap the d chunks each holds,
// the aligned run from (rank/d)·d, one contiguous transfer each way.
// Otherwise it is in the Bruck style: in round k rank sends the chunks it
// holds, rank..rank+d-1 (mod size), to rank-d and receives chunks
// rank+d..rank+2d-1 from rank+d, the last round cut short so that nothing
// arrives twice. Chunks land at their final offsets, so no rotation is
// needed and any size works without a fold.
//
// Why pairs where they exist: each connection of the Bruck style carries
// messages one way, so over TCP the receiving kernel acknowledges most of
// them with a packet of its own, where a pair's acknowledgements ride on
// the messages coming back (see DisseminationBarrier). On hosts of
// consecutive ranks the pairs' first rounds also stay inside a host.
//
// Layout: the buffer is the whole output, chunk r of counts[r] elements at
// Offsets(counts)[r]. Before, only chunk rank is valid; afterwards all are.
//
// Rounds: ceil(log2 size). Traffic: a rank sends size-1 chunks in all,
// n = min(d, size-d) chunks starting with its own in each round, so with
// equal counts it sends (size-1)/size of the output, the minimum; with
// uneven counts the volume varies by rank. A run of chunks that wraps past
// the end of the buffer goes as two transfers joined in one message
// (Xfer.Joined); adjacent chunks go as one.
func RecursiveDoublingAllGather(rank, size int, counts []int) Schedule {
	checkGroup("RecursiveDoublingAllGather", rank, size)
	offs := checkCounts("RecursiveDoublingAllGather", size, counts)
	if size == 1 {
		return nil
	}
	var b builder
	if size&(size-1) == 0 {
		for d := 1; d < size; d <<= 1 {
			peer := rank ^ d
			for _, r := range chunkRanges(offs, size, rank&^(d-1), d) {
				b.send(peer, r[0], r[1])
			}
			for _, r := range chunkRanges(offs, size, peer&^(d-1), d) {
				b.recv(peer, r[0], r[1], false)
			}
			b.joinRound()
			b.end()
		}
		return b.s
	}
	for d := 1; d < size; d <<= 1 {
		n := min(d, size-d)
		for _, r := range chunkRanges(offs, size, rank, n) {
			b.send(mod(rank-d, size), r[0], r[1])
		}
		for _, r := range chunkRanges(offs, size, rank+d, n) {
			b.recv(mod(rank+d, size), r[0], r[1], false)
		}
		b.joinRound()
		b.end()
	}
	return b.s
}

// chunkRanges returns the element ranges {off, len} of the n chunks first,
// first+1, ... (mod size), merging neighbours that touch and leaving out
// empty chunks. It depends only on its arguments, so the two sides of a
// transfer cut it the same way.
func chunkRanges(offs []int, size, first, n int) [][2]int {
	var out [][2]int
	for i := range n {
		c := mod(first+i, size)
		off, l := offs[c], offs[c+1]-offs[c]
		if l == 0 {
			continue
		}
		if k := len(out) - 1; k >= 0 && out[k][0]+out[k][1] == off {
			out[k][1] += l
			continue
		}
		out = append(out, [2]int{off, l})
	}
	return out
}
