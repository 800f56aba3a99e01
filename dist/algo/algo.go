// Package algo holds godist's collective algorithms as pure schedules: for
// one rank of a group, the list of rounds of sends, receives and reductions
// that it performs. Nothing here touches a network; dist runs a schedule
// over a transport, and the tests here run every rank's schedule against
// in-memory buffers.
//
// The model: every rank has one buffer of elements (the data being reduced
// or broadcast; for gathers, the whole output). A schedule is a list of
// rounds; in each round a rank posts all its receives, starts all its
// sends, and the round completes when every transfer has finished. A send
// reads the buffer as it was when the round began; a receive either
// overwrites its range of the buffer or, with Reduce, combines the incoming
// elements into it with the reduction operator. Within one round a rank
// never sends a range it is also receiving into, and never receives twice
// into overlapping ranges, so the order of completion inside a round does
// not matter. (One exception, marked by Round.Snapshot: recursive doubling
// exchanges whole vectors, so its sends overlap its reducing receives.)
// Matching: the n-th transfer from rank a to rank b in a schedule meets the
// n-th transfer b expects from a (transfers between a pair arrive in order);
// within a round, transfers to or from one peer count in list order.
//
// Everything is in elements, never bytes, and the reduction operator is
// abstract: the executor applies it. Transfers of zero elements are left out
// of data schedules (both sides compute the same lengths, so they agree),
// as are rounds left empty; a count of zero gives an empty schedule. Only
// DisseminationBarrier sends zero-length transfers, since they are its
// whole point. A group of one rank always gets an empty schedule.
//
// Each algorithm takes the same arguments on every rank (size, count or
// counts, root, segments) and panics if they are out of range: checking user
// input is the caller's job. The Choose functions pick an algorithm from the
// world size and the message size; the Choose…On functions, for a group
// spread over hosts (Topology), pick by the time a cost Model predicts
// for each candidate (Model.Predict simulates the ranks' schedules with
// the hosts' links shared); see Plan.
package algo

import "fmt"

// Xfer moves the elements [Off, Off+Len) of this rank's buffer to or from
// Peer (a rank of the group, 0..size-1).
type Xfer struct {
	Peer     int
	Off, Len int
	// Reduce, on a receive, combines the incoming elements into the buffer
	// instead of overwriting it.
	Reduce bool
	// Final, on a reducing receive of an all-reduce schedule, says that
	// the reduction completes the range: afterwards it holds the
	// contribution of every rank, and no rank reduces into its values
	// again (they are only copied on). An all-reduce that averages scales
	// there, in the same pass as the last sum, and every rank's result is
	// then scaled exactly once. RingAllReduce, HalvingDoublingAllReduce
	// and RecursiveDoublingAllReduce set it.
	Final bool
	// Joined says the transfer travels in one message with the one before
	// it in its round's list, which has the same peer: an executor sends
	// (receives) a run of joined transfers as one frame, their ranges back
	// to back, at the cost of one message. The other side's matching
	// transfers are joined alike. The two-level all-gather and
	// reduce-scatter set it, whose local steps move a host's worth of
	// ranges that are not contiguous to one peer.
	Joined bool
}

// Round is one step of a rank's schedule.
type Round struct {
	Sends []Xfer
	Recvs []Xfer
	// Snapshot lifts, for this round only, the rule that a send may not
	// overlap a receive: the sends must carry the buffer as it was when the
	// round began, so the executor either sends from a copy of the send
	// ranges taken then, or applies the receives (which for a Reduce it
	// lands in a temporary anyway) only after the round's sends have
	// completed. Only RecursiveDoublingAllReduce sets it: it swaps whole
	// vectors with a partner and both sides reduce. Receives still never
	// overlap each other.
	Snapshot bool
}

// Schedule is one rank's rounds, in order.
type Schedule []Round

// String prints the schedule compactly, for test failures.
func (s Schedule) String() string {
	out := ""
	for i, r := range s {
		out += fmt.Sprintf("round %d:", i)
		for _, x := range r.Sends {
			out += fmt.Sprintf(" %ssend[%d:%d]->%d", joinMark(x), x.Off, x.Off+x.Len, x.Peer)
		}
		for _, x := range r.Recvs {
			op := "recv"
			if x.Reduce {
				op = "reduce"
			}
			out += fmt.Sprintf(" %s%s[%d:%d]<-%d", joinMark(x), op, x.Off, x.Off+x.Len, x.Peer)
		}
		if r.Snapshot {
			out += " (snapshot)"
		}
		out += "\n"
	}
	return out
}

func joinMark(x Xfer) string {
	if x.Joined {
		return "+"
	}
	return ""
}

// Message returns the run of transfers that starts xs and travels as one
// message: xs[0] and the Joined ones right after it.
func Message(xs []Xfer) []Xfer {
	n := 1
	for n < len(xs) && xs[n].Joined {
		n++
	}
	return xs[:n]
}
