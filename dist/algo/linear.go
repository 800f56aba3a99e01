package algo

// LinearGather gathers to root directly: every rank sends its chunk to
// root.
//
// Layout: on root, the buffer is the whole output, chunk r of counts[r]
// elements at Offsets(counts)[r]; before, only chunk root is valid, after,
// all are. On any other rank the buffer has the same layout but only its own
// chunk (at its offset) matters.
//
// Rounds: one; root receives size-1 chunks in it. Traffic: a non-root rank
// sends counts[rank] elements; root receives sum(counts)-counts[root].
func LinearGather(rank, size, root int, counts []int) Schedule {
	checkGroup("LinearGather", rank, size)
	checkRoot("LinearGather", root, size)
	offs := checkCounts("LinearGather", size, counts)
	if size == 1 {
		return nil
	}
	var b builder
	if rank == root {
		for r := range size {
			if r != root {
				b.recv(r, offs[r], counts[r], false)
			}
		}
	} else {
		b.send(root, offs[rank], counts[rank])
	}
	b.end()
	return b.s
}

// LinearScatter scatters from root directly: root sends chunk r to rank r.
//
// Layout: on root, the buffer is the whole input, chunk r of counts[r]
// elements at Offsets(counts)[r]. On any other rank the buffer has the same
// layout and afterwards its own chunk holds what root had there; the rest
// is untouched.
//
// Rounds: one; root sends size-1 chunks in it. Traffic: root sends
// sum(counts)-counts[root] elements; a non-root rank receives counts[rank].
func LinearScatter(rank, size, root int, counts []int) Schedule {
	checkGroup("LinearScatter", rank, size)
	checkRoot("LinearScatter", root, size)
	offs := checkCounts("LinearScatter", size, counts)
	if size == 1 {
		return nil
	}
	var b builder
	if rank == root {
		for r := range size {
			if r != root {
				b.send(r, offs[r], counts[r])
			}
		}
	} else {
		b.recv(root, offs[rank], counts[rank], false)
	}
	b.end()
	return b.s
}

// DisseminationBarrier is the dissemination barrier: in round k rank sends
// an empty transfer to rank+2^k and waits for one from rank-2^k (mod size).
// After the last round every rank has heard, directly or not, from every
// other rank that entered the barrier.
//
// When size is a power of two, round k pairs rank with rank XOR 2^k
// instead (the butterfly barrier): the same rounds and messages, but each
// pair's go both ways, so that over TCP each message's acknowledgement
// rides on the one coming back. A one-way stream of small messages makes
// the receiver's kernel send a bare ACK for most of them (it is not in
// its "ping-pong" mode, which delays ACKs to piggyback them), a packet
// that costs both hosts about what a message does: on the lab's 4 hosts
// of one rank (two to a CPU), 1.6 segments went out per message against
// 1.12 with pairs, and the barrier took 176-210 µs against 133-171.
//
// Layout: no data; every transfer has Off 0 and Len 0, so any buffer,
// including an empty one, will do. Rounds: ceil(log2 size). Traffic: one
// empty message per round.
func DisseminationBarrier(rank, size int) Schedule {
	checkGroup("DisseminationBarrier", rank, size)
	var s Schedule
	for d := 1; d < size; d <<= 1 {
		if size&(size-1) == 0 {
			s = append(s, Round{Sends: []Xfer{{Peer: rank ^ d}}, Recvs: []Xfer{{Peer: rank ^ d}}})
			continue
		}
		s = append(s, Round{
			Sends: []Xfer{{Peer: mod(rank+d, size)}},
			Recvs: []Xfer{{Peer: mod(rank-d, size)}},
		})
	}
	return s
}

// PairwiseAllToAll fixes the order of an all-to-all exchange. All-to-all
// moves data from an input buffer to a separate output buffer, which does
// not fit the one-buffer model of Schedule, so the executor in dist copies
// the blocks itself and this function only says who talks to whom: step k
// (k = 1..size-1, entry k-1) sends rank's block for (rank+k) mod size to
// that rank and receives into the block of (rank-k) mod size from that
// rank. The block for rank itself is a local copy. Every ordered pair meets
// exactly once, and in the same step on both sides (rank a's step k sends
// to b = a+k, whose step k receives from b-k = a), so an executor that
// runs the steps in order as one send and one receive each never waits on
// a message that is sent later.
//
// It returns size-1 pairs {sendTo, recvFrom}; none for a group of one.
func PairwiseAllToAll(rank, size int) [][2]int {
	checkGroup("PairwiseAllToAll", rank, size)
	out := make([][2]int, 0, size-1)
	for k := 1; k < size; k++ {
		out = append(out, [2]int{mod(rank+k, size), mod(rank-k, size)})
	}
	return out
}
