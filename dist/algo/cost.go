package algo

import (
	"fmt"
	"slices"
	"time"
)

// Link is the cost of one class of link: a transfer of b bytes takes
// Latency + b/Bandwidth when it has the link to itself.
type Link struct {
	Latency   time.Duration
	Bandwidth float64 // bytes per second
}

func (l Link) String() string {
	return fmt.Sprintf("%v + 1/(%.3g GB/s)", l.Latency, l.Bandwidth/1e9)
}

// Model is what moving and reducing data costs a group: the link between
// two ranks on one host (shared memory), each host's link to the network
// (shared by the transfers of all its ranks that cross it in the same
// round), how fast a rank reduces, and a fixed cost per call.
//
// The model is the classic α + β·n of each transfer, with two refinements
// that decide between flat and two-level algorithms: transfers between
// hosts that cross one host's link in the same round share its bandwidth,
// and a rank's sends leave one after another.
type Model struct {
	Local, Network Link
	// Reduce is the bytes per second a rank combines into its buffer.
	Reduce float64
	// Call is the fixed cost of one collective call (issuing it, waking
	// the rank that finishes it).
	Call time.Duration
}

// DefaultModel is the model of a group that measured nothing: shared
// memory as this project's machines move it, a 10 Gbit/s network with a
// kernel TCP stack's latency.
var DefaultModel = Model{
	Local:   Link{Latency: 3 * time.Microsecond, Bandwidth: 4e9},
	Network: Link{Latency: 40 * time.Microsecond, Bandwidth: 1.15e9},
	Reduce:  4e9,
	Call:    5 * time.Microsecond,
}

func (m Model) String() string {
	return fmt.Sprintf("local %v, network %v, reduce %.3g GB/s, call %v", m.Local, m.Network, m.Reduce/1e9, m.Call)
}

// Check returns an error unless every bandwidth is positive and every
// latency non-negative.
func (m Model) Check() error {
	if m.Local.Bandwidth <= 0 || m.Network.Bandwidth <= 0 || m.Reduce <= 0 {
		return fmt.Errorf("algo: model %v: bandwidths must be positive", m)
	}
	if m.Local.Latency < 0 || m.Network.Latency < 0 || m.Call < 0 {
		return fmt.Errorf("algo: model %v: latencies must not be negative", m)
	}
	return nil
}

// Predict returns how long the collective whose per-rank schedules are
// scheds (scheds[r] is rank r's, over topology t, elements of elemSize
// bytes) takes under m, from the first rank's start to the last rank's
// end, all ranks starting together.
//
// It simulates the rounds: a rank starts round k when its round k−1 has
// ended, its sends leave one after another from then (each takes the
// link's latency plus its bytes over the bandwidth it gets), and the round
// ends when the last of its receives has arrived and been reduced. A
// transfer between hosts gets the network bandwidth divided by the number
// of transfers of the same round index that leave its host or enter its
// destination's, whichever is more: the schedules of one collective run
// in near lock step, so those cross a host's link together. Predict
// panics if the schedules do not match (a receive no send meets), as
// Validate would report.
func (m Model) Predict(t Topology, scheds []Schedule, elemSize int) time.Duration {
	n := len(scheds)
	if n <= 1 {
		return m.Call
	}
	hostOf := make([]int, n)
	for h, ranks := range t.Hosts {
		for _, r := range ranks {
			hostOf[r] = h
		}
	}
	// Transfers crossing each host's link in each round index.
	type hk struct{ host, round int }
	egress, ingress := map[hk]int{}, map[hk]int{}
	for r, s := range scheds {
		for k, rd := range s {
			for _, x := range rd.Sends {
				if x.Len > 0 && hostOf[x.Peer] != hostOf[r] {
					egress[hk{hostOf[r], k}]++
					ingress[hk{hostOf[x.Peer], k}]++
				}
			}
		}
	}
	secs := func(d time.Duration) float64 { return d.Seconds() }
	// arrival[src][dst] lists the arrival times of src's sends to dst,
	// in order; taken[dst][src] counts those dst's receives consumed.
	arrival := make([]map[int][]float64, n)
	taken := make([]map[int]int, n)
	for r := range n {
		arrival[r], taken[r] = map[int][]float64{}, map[int]int{}
	}
	next := make([]int, n)      // each rank's current round
	sent := make([]bool, n)     // whether the current round's sends are out
	start := make([]float64, n) // when the current round began
	done := 0
	for _, s := range scheds {
		if len(s) == 0 {
			done++
		}
	}
	for done < n {
		progress := false
		for r := range n {
			s := scheds[r]
			for next[r] < len(s) {
				k := next[r]
				rd := s[k]
				if !sent[r] {
					at := start[r]
					for _, x := range rd.Sends {
						l, share := m.Local, 1
						if hostOf[x.Peer] != hostOf[r] {
							l = m.Network
							share = max(egress[hk{hostOf[r], k}], ingress[hk{hostOf[x.Peer], k}])
						}
						busy := float64(x.Len*elemSize) * float64(share) / l.Bandwidth
						at += busy
						arrival[r][x.Peer] = append(arrival[r][x.Peer], at+secs(l.Latency))
					}
					sent[r] = true
					progress = true
				}
				end, ready := start[r], true
				for _, x := range rd.Recvs {
					i := taken[r][x.Peer]
					arr := arrival[x.Peer][r]
					if i >= len(arr) {
						ready = false
						break
					}
					a := arr[i]
					if x.Reduce {
						a += float64(x.Len*elemSize) / m.Reduce
					}
					end = max(end, a)
				}
				if !ready {
					break
				}
				for _, x := range rd.Recvs {
					taken[r][x.Peer]++
				}
				// A round's sends must have left before the next round's.
				if len(rd.Sends) > 0 {
					last := start[r]
					for _, x := range rd.Sends {
						l := m.Local
						if hostOf[x.Peer] != hostOf[r] {
							l = m.Network
						}
						last = max(last, arrival[r][x.Peer][len(arrival[r][x.Peer])-1]-secs(l.Latency))
					}
					end = max(end, last)
				}
				start[r], sent[r] = end, false
				next[r]++
				progress = true
				if next[r] == len(s) {
					done++
				}
			}
		}
		if !progress {
			panic("algo: Predict: the schedules do not match (a receive that no send meets)")
		}
	}
	finish := 0.0
	for r := range n {
		finish = max(finish, start[r])
	}
	return m.Call + time.Duration(finish*1e9)
}

// Schedules returns every rank's schedule of the plan.
func (p Plan) Schedules(size int) []Schedule {
	out := make([]Schedule, size)
	for r := range size {
		out[r] = p.Schedule(r)
	}
	return out
}

// predicted fills in p.Predicted.
func (p Plan) predicted(t Topology, m Model, elemSize int) Plan {
	p.Predicted = m.Predict(t, p.Schedules(t.Size()), elemSize)
	return p
}

// best returns the candidate with the least predicted time (the first of
// equals).
func best(t Topology, m Model, elemSize int, cands ...Plan) Plan {
	var out Plan
	for i, c := range cands {
		c = c.predicted(t, m, elemSize)
		if i == 0 || c.Predicted < out.Predicted {
			out = c
		}
	}
	return out
}

// segmentChoices are the segment counts tried for the ring and two-level
// schedules of a message of bytes bytes: 1, and powers of two up to the
// most, as long as a piece keeps at least minPiece bytes.
func segmentChoices(bytes, most int) []int {
	const minPiece = 64 << 10
	out := []int{1}
	for s := 2; s <= most && bytes/s >= minPiece; s *= 2 {
		out = append(out, s)
	}
	return out
}

// ChooseAllReduceOn picks the all-reduce of count elements of elemSize
// bytes for a group laid out as t, and predicts its time under m. On one
// host it is ChooseAllReduce's choice (thresholds measured on this
// project's machines). Across hosts it is whichever of recursive
// doubling, halving-doubling, the ring and (with the same number of ranks
// on every host, more than one) TwoLevelAllReduce, each with the segment
// counts worth trying, m predicts fastest.
func ChooseAllReduceOn(t Topology, m Model, count, elemSize int) Plan {
	size := t.Size()
	if len(t.Hosts) <= 1 || count == 0 {
		return ChooseAllReduce(size, count, elemSize).predicted(t, m, elemSize)
	}
	checkChoice("ChooseAllReduceOn", size, count, elemSize)
	cands := []Plan{
		{"recursive-doubling", 1, func(rank int) Schedule { return RecursiveDoublingAllReduce(rank, size, count) }, 0},
		{"halving-doubling", 1, func(rank int) Schedule { return HalvingDoublingAllReduce(rank, size, count) }, 0},
	}
	for _, seg := range segmentChoices(count*elemSize/size, maxRingSegments) {
		cands = append(cands, Plan{"ring", seg, func(rank int) Schedule { return RingAllReduce(rank, size, count, seg) }, 0})
	}
	if per, ok := t.Uniform(); ok && per > 1 {
		for _, seg := range segmentChoices(count*elemSize/size, maxRingSegments) {
			cands = append(cands, Plan{"two-level", seg, func(rank int) Schedule { return TwoLevelAllReduce(rank, t, count, seg) }, 0})
		}
	}
	return best(t, m, elemSize, cands...)
}

// ChooseBroadcastOn is ChooseBroadcast for a group laid out as t, with the
// time m predicts; across hosts, the binomial tree or the chain with the
// segment count m predicts fastest.
func ChooseBroadcastOn(t Topology, m Model, root, count, elemSize int) Plan {
	size := t.Size()
	if len(t.Hosts) <= 1 || count == 0 {
		return ChooseBroadcast(size, root, count, elemSize).predicted(t, m, elemSize)
	}
	checkChoice("ChooseBroadcastOn", size, count, elemSize)
	checkRoot("ChooseBroadcastOn", root, size)
	cands := []Plan{{"binomial", 1, func(rank int) Schedule { return BinomialBroadcast(rank, size, root, count) }, 0}}
	for _, seg := range segmentChoices(count*elemSize, maxChainSegments) {
		cands = append(cands, Plan{"chain", seg, func(rank int) Schedule { return ChainBroadcast(rank, size, root, count, seg) }, 0})
	}
	return best(t, m, elemSize, cands...)
}

// ChooseAllGatherOn is ChooseAllGather for a group laid out as t, with the
// time m predicts; across hosts, recursive doubling or the ring with the
// segment count m predicts fastest.
func ChooseAllGatherOn(t Topology, m Model, counts []int, elemSize int) Plan {
	size := t.Size()
	total := checkCounts("ChooseAllGatherOn", size, counts)[size]
	if len(t.Hosts) <= 1 || total == 0 {
		return ChooseAllGather(size, counts, elemSize).predicted(t, m, elemSize)
	}
	checkChoice("ChooseAllGatherOn", size, total, elemSize)
	counts = append([]int(nil), counts...)
	cands := []Plan{{"recursive-doubling", 1, func(rank int) Schedule { return RecursiveDoublingAllGather(rank, size, counts) }, 0}}
	for _, seg := range segmentChoices(slices.Max(counts)*elemSize, maxRingSegments) {
		cands = append(cands, Plan{"ring", seg, func(rank int) Schedule { return RingAllGather(rank, size, counts, seg) }, 0})
	}
	return best(t, m, elemSize, cands...)
}

// ChooseReduceScatterOn is ChooseReduceScatter with the time m predicts
// for a group laid out as t.
func ChooseReduceScatterOn(t Topology, m Model, counts []int, elemSize int) Plan {
	return ChooseReduceScatter(t.Size(), counts, elemSize).predicted(t, m, elemSize)
}

// ChooseBarrierOn is the dissemination barrier with the time m predicts.
func ChooseBarrierOn(t Topology, m Model) Plan {
	size := t.Size()
	return Plan{"dissemination", 1, func(rank int) Schedule { return DisseminationBarrier(rank, size) }, 0}.predicted(t, m, 1)
}
