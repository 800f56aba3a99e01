package algo

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// This file is a pure simulator of the schedule model in algo.go: it runs
// every rank's schedule against in-memory float64 buffers, with one FIFO of
// messages per ordered pair of ranks.

// simOp is the reduction operator the simulator applies.
type simOp struct {
	name string
	f    func(acc, in float64) float64
	// final, when set, is applied after f on the receives marked Final.
	final func(v float64) float64
}

var (
	opSum = simOp{name: "sum", f: func(a, b float64) float64 { return a + b }}
	opMax = simOp{name: "max", f: math.Max}
	ops   = []simOp{opSum, opMax}
)

// msg is one transfer in flight.
type msg struct {
	data   []float64
	round  int    // the sender's round, for error messages
	stamp  int    // the sender's logical time when the round began
	know   uint64 // the ranks the sender had heard from, itself included
	joined bool   // the send's Xfer.Joined
}

// simResult is what a run measured.
type simResult struct {
	// depth is the length of the critical path in rounds: a rank's clock
	// advances by one per round, starting at the later of its own clock and
	// the start time of the senders' rounds it received from.
	depth int
	// sent is the number of elements each rank sent.
	sent []int
	// know[r] has bit q set when rank q's start happened before rank r's end.
	know []uint64
}

// simulate runs scheds (one per rank) over bufs (one per rank), modified in
// place. A rank executes its rounds in order: when a round begins it
// snapshots and enqueues its sends; it completes the round once every
// receive of the round can be matched with the next message from that peer
// (in list order for several from one peer), then overwrites or reduces.
// It reports a length mismatch, a deadlock (with every rank's round) and
// messages left unreceived. The schedules should have passed Validate.
func simulate(scheds []Schedule, bufs [][]float64, op simOp) (simResult, error) {
	n := len(scheds)
	if n > 64 {
		return simResult{}, fmt.Errorf("simulate: %d ranks, at most 64", n)
	}
	fifo := make([][][]msg, n) // fifo[from][to]
	for i := range fifo {
		fifo[i] = make([][]msg, n)
	}
	round := make([]int, n)
	started := make([]bool, n)
	clock := make([]int, n)
	res := simResult{sent: make([]int, n), know: make([]uint64, n)}
	for r := range n {
		res.know[r] = 1 << r
	}
	need := make([]int, n)
	for {
		progress, done := false, true
		for r := range n {
			for round[r] < len(scheds[r]) {
				rd := scheds[r][round[r]]
				if !started[r] {
					for _, x := range rd.Sends {
						data := slices.Clone(bufs[r][x.Off : x.Off+x.Len])
						fifo[r][x.Peer] = append(fifo[r][x.Peer], msg{data, round[r], clock[r], res.know[r], x.Joined})
						res.sent[r] += x.Len
					}
					started[r], progress = true, true
				}
				ready := true
				for _, x := range rd.Recvs {
					i := need[x.Peer]
					need[x.Peer]++
					if i >= len(fifo[x.Peer][r]) {
						ready = false
						break
					}
					if m := fifo[x.Peer][r][i]; len(m.data) != x.Len {
						return res, fmt.Errorf("rank %d round %d expects %d elements from rank %d, whose round %d sent %d\nrank %d:\n%srank %d:\n%s",
							r, round[r], x.Len, x.Peer, m.round, len(m.data), r, scheds[r], x.Peer, scheds[x.Peer])
					} else if m.joined != x.Joined {
						// The executor sends a run of joined transfers as one
						// frame: the two sides must cut their runs alike.
						return res, fmt.Errorf("rank %d round %d: a receive from rank %d with Joined %v meets a send of its round %d with Joined %v\nrank %d:\n%srank %d:\n%s",
							r, round[r], x.Peer, x.Joined, m.round, m.joined, r, scheds[r], x.Peer, scheds[x.Peer])
					}
				}
				for _, x := range rd.Recvs {
					need[x.Peer] = 0
				}
				if !ready {
					break
				}
				end := clock[r]
				for _, x := range rd.Recvs {
					m := fifo[x.Peer][r][0]
					fifo[x.Peer][r] = fifo[x.Peer][r][1:]
					dst := bufs[r][x.Off : x.Off+x.Len]
					if x.Reduce {
						for i, v := range m.data {
							dst[i] = op.f(dst[i], v)
							if x.Final && op.final != nil {
								dst[i] = op.final(dst[i])
							}
						}
					} else {
						copy(dst, m.data)
					}
					end = max(end, m.stamp)
					res.know[r] |= m.know
				}
				clock[r] = end + 1
				res.depth = max(res.depth, clock[r])
				round[r]++
				started[r], progress = false, true
			}
			if round[r] < len(scheds[r]) {
				done = false
			}
		}
		if done {
			break
		}
		if !progress {
			var b strings.Builder
			b.WriteString("deadlock:")
			for r := range n {
				if round[r] == len(scheds[r]) {
					fmt.Fprintf(&b, "\n  rank %d: finished %d rounds", r, len(scheds[r]))
					continue
				}
				fmt.Fprintf(&b, "\n  rank %d: waiting in round %d of %d:", r, round[r], len(scheds[r]))
				for _, x := range scheds[r][round[r]].Recvs {
					fmt.Fprintf(&b, " [%d:%d]<-%d (%d queued)", x.Off, x.Off+x.Len, x.Peer, len(fifo[x.Peer][r]))
				}
			}
			return res, fmt.Errorf("%s", b.String())
		}
	}
	for a := range n {
		for b := range n {
			if q := fifo[a][b]; len(q) > 0 {
				return res, fmt.Errorf("%d messages from rank %d to rank %d never received, the first of %d elements from round %d\nrank %d:\n%srank %d:\n%s",
					len(q), a, b, len(q[0].data), q[0].round, a, scheds[a], b, scheds[b])
			}
		}
	}
	return res, nil
}
