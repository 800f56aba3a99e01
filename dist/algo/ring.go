package algo

// RingAllReduce is the bandwidth-optimal all-reduce: a ring reduce-scatter
// followed by a ring all-gather, each rank talking only to rank+1 (it sends)
// and rank-1 (it receives).
//
// Layout: before, each rank's buffer holds its count elements; after, every
// rank's buffer holds the elementwise reduction over all ranks. The buffer
// is split by Chunks(count, size); chunk r is fully reduced on rank r
// halfway through.
//
// Rounds: 2·(size-1)·segments, each moving one piece of one chunk (fewer
// when count is so small that pieces are empty). segments >= 1 splits every
// chunk into that many pieces by Chunks, so that a rank reduces or forwards
// piece i while piece i+1 is on the wire.
//
// Traffic: each rank sends 2·(size-1)/size·count elements, give or take
// the rounding of the chunks (at most 2 elements), and receives as much.
func RingAllReduce(rank, size, count, segments int) Schedule {
	checkGroup("RingAllReduce", rank, size)
	checkCount("RingAllReduce", count)
	checkSegments("RingAllReduce", segments)
	if size == 1 || count == 0 {
		return nil
	}
	offs, lens := Chunks(count, size)
	var b builder
	ringReduceScatter(&b, rank, size, offs, lens, segments, true)
	ringAllGather(&b, rank, size, offs, lens, segments)
	return b.s
}

// RingReduceScatter reduces and scatters with a ring.
//
// Layout: the buffer holds size chunks laid out by Offsets(counts); chunk r
// has counts[r] elements (uneven and zero counts are fine). Afterwards
// chunk rank holds the reduction over all ranks of their chunk rank; the
// other chunks are scratch.
//
// Rounds: (size-1)·segments (fewer where chunks are empty); segments >= 1
// splits every chunk into that many pieces, as in RingAllReduce. Traffic:
// in step s a rank sends chunk (rank-s-1) mod size to rank+1, so it sends
// every chunk but its own: sum(counts) - counts[rank] elements.
func RingReduceScatter(rank, size int, counts []int, segments int) Schedule {
	checkGroup("RingReduceScatter", rank, size)
	offs := checkCounts("RingReduceScatter", size, counts)
	checkSegments("RingReduceScatter", segments)
	if size == 1 {
		return nil
	}
	var b builder
	ringReduceScatter(&b, rank, size, offs, counts, segments, false)
	return b.s
}

// RingAllGather gathers to every rank with a ring.
//
// Layout: the buffer is the whole output, chunk r of counts[r] elements at
// Offsets(counts)[r]. Before, only chunk rank is valid; afterwards all are.
//
// Rounds: (size-1)·segments (fewer where chunks are empty), segments as in
// RingReduceScatter. Traffic: each rank sends every chunk but the one of
// rank+1, i.e. sum(counts) - counts[rank+1] elements.
func RingAllGather(rank, size int, counts []int, segments int) Schedule {
	checkGroup("RingAllGather", rank, size)
	offs := checkCounts("RingAllGather", size, counts)
	checkSegments("RingAllGather", segments)
	if size == 1 {
		return nil
	}
	var b builder
	ringAllGather(&b, rank, size, offs, counts, segments)
	return b.s
}

// ringReduceScatter appends the rounds after which rank holds the reduction
// of chunk rank. In step s (0..size-2) it sends chunk rank-s-1 to the right
// and reduces chunk rank-s-2 from the left, each split into segments pieces
// and moved one piece per round. With final, the receives of the last step
// (chunk rank, whose reduction they complete) are marked Final.
func ringReduceScatter(b *builder, rank, size int, offs, lens []int, segments int, final bool) {
	right, left := mod(rank+1, size), mod(rank-1, size)
	for s := range size - 1 {
		sc, rc := mod(rank-s-1, size), mod(rank-s-2, size)
		soffs, slens := Chunks(lens[sc], segments)
		roffs, rlens := Chunks(lens[rc], segments)
		for i := range segments {
			b.send(right, offs[sc]+soffs[i], slens[i])
			b.recv(left, offs[rc]+roffs[i], rlens[i], true)
			if final && s == size-2 {
				b.final(rlens[i])
			}
			b.end()
		}
	}
}

// ringAllGather appends the rounds that spread chunk r from rank r to all:
// in step s (0..size-2) rank sends chunk rank-s to the right and receives
// chunk rank-s-1 from the left, piece by piece.
func ringAllGather(b *builder, rank, size int, offs, lens []int, segments int) {
	right, left := mod(rank+1, size), mod(rank-1, size)
	for s := range size - 1 {
		sc, rc := mod(rank-s, size), mod(rank-s-1, size)
		soffs, slens := Chunks(lens[sc], segments)
		roffs, rlens := Chunks(lens[rc], segments)
		for i := range segments {
			b.send(right, offs[sc]+soffs[i], slens[i])
			b.recv(left, offs[rc]+roffs[i], rlens[i], false)
			b.end()
		}
	}
}
