package algo

import (
	"fmt"
	"slices"
	"time"
)

// The thresholds the Choose functions use, in bytes, all in one place. They
// are first guesses, to be tuned with `godist bench` on real machines.
const (
	// All-reduces of at most this many bytes use recursive doubling: fewest
	// rounds, each moving the whole vector.
	smallAllReduceBytes = 64 << 10
	// All-reduces of at most this many bytes (and more than
	// smallAllReduceBytes) use halving-doubling; larger ones use the ring.
	mediumAllReduceBytes = 1 << 20
	// Broadcasts of at most this many bytes use the binomial tree; larger
	// ones use the pipelined chain.
	smallBroadcastBytes = 256 << 10
	// All-gathers whose whole output is at most this many bytes use the
	// Bruck-style recursive doubling; larger ones use the ring.
	smallAllGatherBytes = 64 << 10
	// A ring or chain piece holds at most this many bytes (unless the
	// segment cap below is reached): segments = ceil(bytes per chunk /
	// maxPieceBytes), so pieces of a segmented message hold between half
	// and all of it.
	maxPieceBytes = 1 << 20
	// A broadcast of less than chainSegments·maxPieceBytes is still cut
	// in up to chainSegments pieces of at least this many bytes.
	chainPieceBytes = 256 << 10
	chainSegments   = 4
	// Caps on the number of segments: each costs a round.
	maxRingSegments  = 16
	maxChainSegments = 64
)

// policy holds the thresholds, so that tests can shrink them and run every
// branch of the Choose functions on small buffers.
type policy struct {
	smallAllReduce, mediumAllReduce int
	smallBroadcast, smallAllGather  int
	maxPiece                        int
	chainPiece                      int
	maxRingSegments                 int
	maxChainSegments                int
}

var defaultPolicy = policy{
	smallAllReduce:   smallAllReduceBytes,
	mediumAllReduce:  mediumAllReduceBytes,
	smallBroadcast:   smallBroadcastBytes,
	smallAllGather:   smallAllGatherBytes,
	maxPiece:         maxPieceBytes,
	chainPiece:       chainPieceBytes,
	maxRingSegments:  maxRingSegments,
	maxChainSegments: maxChainSegments,
}

// Plan is an algorithm chosen for one collective call. The Choose functions
// are pure functions of their arguments, which every rank of the group
// knows alike (the element count is part of the call's fingerprint), so
// every rank chooses the same Plan and the schedules match.
type Plan struct {
	// Name is the algorithm: "recursive-doubling", "halving-doubling",
	// "ring", "binomial" or "chain".
	Name string
	// Segments is the number of pieces a ring or chain cuts each chunk
	// into; 1 for the other algorithms.
	Segments int
	// Schedule returns the schedule of one rank of the group.
	Schedule func(rank int) Schedule
	// Predicted is the time a Model predicts (the Choose…On functions
	// fill it in; 0 otherwise).
	Predicted time.Duration
}

// String is the name, with the segments when there are several, for logs
// and benchmark labels.
func (p Plan) String() string {
	if p.Segments > 1 {
		return fmt.Sprintf("%s/%d", p.Name, p.Segments)
	}
	return p.Name
}

// ChooseAllReduce picks the all-reduce for count elements of elemSize bytes
// each over size ranks: RecursiveDoublingAllReduce up to 64 KiB (latency
// bound), HalvingDoublingAllReduce up to 1 MiB, and RingAllReduce above,
// with enough segments that a piece holds at most 1 MiB (at most 16). The
// schedules' buffers hold count elements.
func ChooseAllReduce(size, count, elemSize int) Plan {
	return defaultPolicy.allReduce(size, count, elemSize)
}

// ChooseBroadcast picks the broadcast of count elements of elemSize bytes
// from root: BinomialBroadcast up to 256 KiB, ChainBroadcast above, with
// enough segments that a piece holds at most 1 MiB (at most 64) and, for
// messages under 4 MiB, up to 4 pieces of at least 256 KiB.
func ChooseBroadcast(size, root, count, elemSize int) Plan {
	return defaultPolicy.broadcast(size, root, count, elemSize)
}

// ChooseAllGather picks the all-gather of chunks of counts[r] elements of
// elemSize bytes: RecursiveDoublingAllGather when the whole output is at
// most 64 KiB or, on more than 64 ranks, no chunk is over 4 KiB;
// RingAllGather otherwise, its chunks cut so that a piece holds at
// most 1 MiB (at most 16 pieces). The schedules' buffers hold sum(counts)
// elements, laid out by Offsets(counts).
func ChooseAllGather(size int, counts []int, elemSize int) Plan {
	return defaultPolicy.allGather(size, counts, elemSize)
}

func checkChoice(fn string, size, count, elemSize int) {
	if size < 1 || count < 0 || elemSize < 1 {
		panic(fmt.Sprintf("algo: %s: need size >= 1, count >= 0 and elemSize >= 1, got %d, %d, %d", fn, size, count, elemSize))
	}
}

// segmentsFor is how many pieces to cut chunks of n elements of elemSize
// bytes into.
func (p policy) segmentsFor(n, elemSize, most int) int {
	bytes := n * elemSize
	s := (bytes + p.maxPiece - 1) / p.maxPiece
	return max(1, min(s, most))
}

func (p policy) allReduce(size, count, elemSize int) Plan {
	checkChoice("ChooseAllReduce", size, count, elemSize)
	bytes := count * elemSize
	switch {
	case bytes <= p.smallAllReduce:
		return Plan{"recursive-doubling", 1, func(rank int) Schedule {
			return RecursiveDoublingAllReduce(rank, size, count)
		}, 0}
	case bytes <= p.mediumAllReduce:
		return Plan{"halving-doubling", 1, func(rank int) Schedule {
			return HalvingDoublingAllReduce(rank, size, count)
		}, 0}
	}
	seg := p.segmentsFor((count+size-1)/size, elemSize, p.maxRingSegments)
	return Plan{"ring", seg, func(rank int) Schedule {
		return RingAllReduce(rank, size, count, seg)
	}, 0}
}

func (p policy) broadcast(size, root, count, elemSize int) Plan {
	checkChoice("ChooseBroadcast", size, count, elemSize)
	checkRoot("ChooseBroadcast", root, size)
	if count*elemSize <= p.smallBroadcast {
		return Plan{"binomial", 1, func(rank int) Schedule {
			return BinomialBroadcast(rank, size, root, count)
		}, 0}
	}
	seg := p.segmentsFor(count, elemSize, p.maxChainSegments)
	if p.chainPiece > 0 {
		// A message of a few pieces is still cut in chainSegments, so that
		// the next hop starts before the whole message has arrived.
		seg = max(seg, min(chainSegments, count*elemSize/p.chainPiece))
	}
	return Plan{"chain", seg, func(rank int) Schedule {
		return ChainBroadcast(rank, size, root, count, seg)
	}, 0}
}

func (p policy) allGather(size int, counts []int, elemSize int) Plan {
	total := checkCounts("ChooseAllGather", size, counts)[size]
	checkChoice("ChooseAllGather", size, total, elemSize)
	counts = append([]int(nil), counts...) // the Plan outlives the caller's slice
	if total*elemSize <= p.smallAllGather || size > 64 && slices.Max(counts)*elemSize <= 4<<10 {
		// Small, or chunks so small on so many ranks that the ring's
		// W-1 steps are latency alone (Split's gather of every
		// member's color at 16,384 ranks: 16,383 steps of 16 bytes).
		return Plan{"recursive-doubling", 1, func(rank int) Schedule {
			return RecursiveDoublingAllGather(rank, size, counts)
		}, 0}
	}
	seg := p.segmentsFor(slices.Max(counts), elemSize, p.maxRingSegments)
	return Plan{"ring", seg, func(rank int) Schedule {
		return RingAllGather(rank, size, counts, seg)
	}, 0}
}

// ChooseReduceScatter picks the reduce-scatter of chunks of counts[r]
// elements of elemSize bytes: RingReduceScatter, its chunks cut so that a
// piece holds at most 1 MiB (at most 16 pieces), so that a rank reduces
// one piece while the next is on the wire; but on more than 8 ranks, when
// the whole buffer is at most 64 KiB (as small as an all-reduce that
// recursive doubling does), HalvingDoublingAllReduce of the whole
// buffer, which every rank writes. The schedules' buffers hold
// sum(counts) elements, laid out by Offsets(counts). The ring's rank r
// never receives into chunk (r-1) mod size, which it only sends: that
// chunk may be read-only memory.
func ChooseReduceScatter(size int, counts []int, elemSize int) Plan {
	return defaultPolicy.reduceScatter(size, counts, elemSize)
}

func (p policy) reduceScatter(size int, counts []int, elemSize int) Plan {
	total := checkCounts("ChooseReduceScatter", size, counts)[size]
	checkChoice("ChooseReduceScatter", size, total, elemSize)
	counts = append([]int(nil), counts...)
	if size > 8 && total*elemSize <= p.smallAllReduce {
		// Latency-bound: the ring's W-1 steps cost more than the
		// 2log₂W of halving-doubling over the whole buffer (at 4,096
		// ranks, 24 rather than 4,095), which moves about twice the
		// buffer. Every rank ends with every chunk reduced, its own
		// among them.
		return Plan{"halving-doubling", 1, func(rank int) Schedule {
			return HalvingDoublingAllReduce(rank, size, total)
		}, 0}
	}
	seg := p.segmentsFor(slices.Max(counts), elemSize, p.maxRingSegments)
	return Plan{"ring", seg, func(rank int) Schedule {
		return RingReduceScatter(rank, size, counts, seg)
	}, 0}
}
