package algo

import "fmt"

// Chunks splits count elements into parts contiguous chunks as evenly as
// possible: chunk i starts at offs[i] and holds lens[i] elements, and the
// first count%parts chunks hold one element more than the rest. Chunks are
// empty when count < parts. Every algorithm here that splits a vector uses
// this split, so a caller can find which rank ends up owning which range.
// It panics if count < 0 or parts < 1.
func Chunks(count, parts int) (offs, lens []int) {
	if count < 0 || parts < 1 {
		panic(fmt.Sprintf("algo: Chunks(%d, %d): need count >= 0 and parts >= 1", count, parts))
	}
	offs, lens = make([]int, parts), make([]int, parts)
	q, r := count/parts, count%parts
	off := 0
	for i := range parts {
		n := q
		if i < r {
			n++
		}
		offs[i], lens[i] = off, n
		off += n
	}
	return offs, lens
}

// Offsets returns the prefix sums of counts: len(counts)+1 entries, entry
// r being where chunk r starts when the chunks are laid out back to back,
// and the last entry the total. It panics on a negative count.
func Offsets(counts []int) []int {
	offs := make([]int, len(counts)+1)
	for i, n := range counts {
		if n < 0 {
			panic(fmt.Sprintf("algo: Offsets: count %d of chunk %d is negative", n, i))
		}
		offs[i+1] = offs[i] + n
	}
	return offs
}

// builder accumulates a schedule round by round, leaving out transfers of
// zero elements and rounds that end up empty. Both sides of every transfer
// compute the same length, so they leave out the same transfers.
type builder struct {
	s   Schedule
	cur Round
}

func (b *builder) send(peer, off, n int) {
	if n > 0 {
		b.cur.Sends = append(b.cur.Sends, Xfer{Peer: peer, Off: off, Len: n})
	}
}

func (b *builder) recv(peer, off, n int, reduce bool) {
	if n > 0 {
		b.cur.Recvs = append(b.cur.Recvs, Xfer{Peer: peer, Off: off, Len: n, Reduce: reduce})
	}
}

// final marks the receive just added as the one that completes its range
// (Xfer.Final); it does nothing when that receive was left out as empty.
func (b *builder) final(n int) {
	if n > 0 {
		b.cur.Recvs[len(b.cur.Recvs)-1].Final = true
	}
}

// joinRound joins each transfer of the current round to the one before
// it when they have the same peer (Xfer.Joined).
func (b *builder) joinRound() {
	for _, xs := range [][]Xfer{b.cur.Sends, b.cur.Recvs} {
		for j := 1; j < len(xs); j++ {
			xs[j].Joined = xs[j].Peer == xs[j-1].Peer
		}
	}
}

// end closes the current round.
func (b *builder) end() {
	if len(b.cur.Sends)+len(b.cur.Recvs) > 0 {
		b.s = append(b.s, b.cur)
	}
	b.cur = Round{}
}

// mod is the non-negative remainder of a divided by n.
func mod(a, n int) int { return ((a % n) + n) % n }

// floorPow2 is the largest power of two not above n (n >= 1).
func floorPow2(n int) int {
	p := 1
	for p*2 <= n {
		p *= 2
	}
	return p
}

// ceilLog2 is the number of doublings from 1 to at least n (n >= 1).
func ceilLog2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

func checkGroup(fn string, rank, size int) {
	if size < 1 || rank < 0 || rank >= size {
		panic(fmt.Sprintf("algo: %s: rank %d out of range for a group of %d", fn, rank, size))
	}
}

func checkCount(fn string, count int) {
	if count < 0 {
		panic(fmt.Sprintf("algo: %s: negative count %d", fn, count))
	}
}

func checkRoot(fn string, root, size int) {
	if root < 0 || root >= size {
		panic(fmt.Sprintf("algo: %s: root %d out of range for a group of %d", fn, root, size))
	}
}

func checkSegments(fn string, segments int) {
	if segments < 1 {
		panic(fmt.Sprintf("algo: %s: segments %d, need at least 1", fn, segments))
	}
}

func checkCounts(fn string, size int, counts []int) []int {
	if len(counts) != size {
		panic(fmt.Sprintf("algo: %s: %d counts for a group of %d", fn, len(counts), size))
	}
	return Offsets(counts)
}
