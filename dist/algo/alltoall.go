package algo

import "iter"

// All-to-all moves data from an input buffer to a separate output buffer,
// which Schedule's one-buffer model does not describe, so the executor in
// dist moves the blocks itself; this file says who talks to whom, which
// blocks travel in each round, and which of the two algorithms a call
// runs.
//
// Bruck's algorithm (Bruck, Ho, Kipnis, Upfal and Weathersby, 1997) takes
// ⌈log₂ size⌉ rounds where the pairwise exchange takes size-1: a block
// bound for rank+i (its "position" i) travels the binary digits of i, one
// round per digit, in round k to the rank 2^k further on. Each round moves
// about half the blocks, so the bytes sent grow by ⌈log₂ size⌉/2: it is
// for small blocks, where the pairwise exchange is size-1 latencies.
//
// Rank keeps the block of position i in slot (rank-i) mod size of its
// output buffer from the start, so that no final rotation is needed:
// before the rounds slot j holds the input block for rank BruckSource(j)
// (position i = rank-j, bound for rank+i), and after them the block that
// rank j sent to rank.

// The all-to-all algorithms ChooseAllToAll names.
const (
	AllToAllPairwise = "pairwise"
	AllToAllBruck    = "bruck"
)

// Bruck's algorithm is chosen for blocks of at most smallAllToAllBytes on
// at least minBruckRanks ranks (MPICH's defaults: below eight ranks the
// pairwise exchange has few rounds to save).
const (
	smallAllToAllBytes = 256
	minBruckRanks      = 8
)

// ChooseAllToAll picks the all-to-all of blocks of blockBytes between
// every pair of size ranks in which every rank sends the same blockBytes
// to every other: AllToAllBruck for blocks of at most 256 bytes on 8 or
// more ranks, AllToAllPairwise otherwise. Every rank knows both arguments
// alike (the block size is part of the call's fingerprint), so all choose
// the same.
func ChooseAllToAll(size, blockBytes int) string {
	if size >= minBruckRanks && blockBytes <= smallAllToAllBytes {
		return AllToAllBruck
	}
	return AllToAllPairwise
}

// BruckRound is one round of Bruck's all-to-all on one rank.
type BruckRound struct {
	To, From int // the rank this one sends to and the one it receives from
	Step     int // 2^k in round k: the blocks at positions i with i&Step != 0 travel
}

// BruckAllToAll returns rank's rounds of Bruck's all-to-all among size
// ranks: ⌈log₂ size⌉ of them, none for a group of one. In round k rank
// sends to rank+2^k and receives from rank-2^k, which sends in the same
// round, so an executor that runs the rounds in order never waits on a
// message sent later.
func BruckAllToAll(rank, size int) []BruckRound {
	checkGroup("BruckAllToAll", rank, size)
	var out []BruckRound
	for s := 1; s < size; s <<= 1 {
		out = append(out, BruckRound{To: mod(rank+s, size), From: mod(rank-s, size), Step: s})
	}
	return out
}

// BruckSource is the rank whose input block rank puts in slot j of its
// output buffer before the first round: position (rank-j) mod size, the
// block bound for rank + (rank-j).
func BruckSource(rank, size, j int) int { return mod(2*rank-j, size) }

// Spans yields the slots of rank's output buffer whose blocks travel in
// the round, as runs [lo, hi) of consecutive slots, in the order their
// blocks go in the round's message. The sender reads these slots and the
// receiver (rank+Step, which computes the same spans for itself) writes
// its own, so block by block the message carries each position from the
// sender's slot to the receiver's. The runs together hold Blocks(size)
// slots.
func (b BruckRound) Spans(rank, size int) iter.Seq2[int, int] {
	return func(yield func(lo, hi int) bool) {
		s := b.Step
		// Positions [p, p+s) for p = s, 3s, 5s, ... have the bit set;
		// position i is slot rank-i, so the run is the slots
		// [rank-e+1, rank-p], split where it wraps past slot 0.
		for p := s; p < size; p += 2 * s {
			e := min(p+s, size)
			lo, hi := mod(rank-e+1, size), mod(rank-p, size)+1
			if lo < hi {
				if !yield(lo, hi) {
					return
				}
				continue
			}
			if !yield(lo, size) || !yield(0, hi) {
				return
			}
		}
	}
}

// Slot is the slot of rank's output buffer that the q-th block of the
// round's message comes from (at the sender) or goes to (at the
// receiver), as Spans lays them out, and run is how many blocks from the
// q-th on go to consecutive slots from there (at least 1): a copy of
// run blocks at once.
func (b BruckRound) Slot(rank, size, q int) (slot, run int) {
	s := b.Step
	p := s + 2*s*(q/s) // the first position of q's run
	e := min(p+s, size)
	t := q % s
	slot = mod(rank-e+1+t, size)
	return slot, min(e-p-t, size-slot)
}

// Blocks is the number of blocks the round moves among size ranks: the
// positions below size with the round's bit set.
func (b BruckRound) Blocks(size int) int {
	s, n := b.Step, 0
	for p := s; p < size; p += 2 * s {
		n += min(p+s, size) - p
	}
	return n
}
