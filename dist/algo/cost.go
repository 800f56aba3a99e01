package algo

import (
	"fmt"
	"math"
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
	// CPUs is how many CPUs each host gives the job's ranks; 0: one
	// each. A host with fewer CPUs than ranks handles its ranks' messages
	// of one round in turn: a message's latency, and the time to copy it
	// through shared memory and reduce it, are multiplied by how many of
	// them each CPU handles. (The network's bandwidth, measured with the
	// ranks of two hosts sending at once, has the CPUs' share in it.)
	CPUs int
	// Stack is the bytes per second one CPU moves through the kernel's
	// network stack at one end of a transfer: a byte that crosses hosts
	// costs its sender's host 1/Stack of CPU time, and its receiver's as
	// much. With it, a call takes at least its busiest host's CPU work
	// (bytes across hosts at this rate, copies through shared memory at
	// Local's bandwidth, reductions at Reduce) over the CPUs the host
	// gives the job: on hosts whose CPUs, not their link, bound the
	// traffic, a host that sends and receives at once moves half of what
	// it moves one way. 0: no such bound.
	Stack float64
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
	cpus := ""
	if m.CPUs > 0 {
		cpus = fmt.Sprintf(", %d CPUs a host", m.CPUs)
	}
	if m.Stack > 0 {
		cpus += fmt.Sprintf(", stack %.3g GB/s a CPU", m.Stack/1e9)
	}
	return fmt.Sprintf("local %v, network %v, reduce %.3g GB/s, call %v%s", m.Local, m.Network, m.Reduce/1e9, m.Call, cpus)
}

// Check returns an error unless every bandwidth is positive and every
// latency non-negative.
func (m Model) Check() error {
	if m.Local.Bandwidth <= 0 || m.Network.Bandwidth <= 0 || m.Reduce <= 0 {
		return fmt.Errorf("algo: model %v: bandwidths must be positive", m)
	}
	if m.Local.Latency < 0 || m.Network.Latency < 0 || m.Call < 0 || m.CPUs < 0 || m.Stack < 0 {
		return fmt.Errorf("algo: model %v: latencies, CPUs and the stack's rate must not be negative", m)
	}
	return nil
}

// Predict returns how long the collective whose per-rank schedules are
// scheds (scheds[r] is rank r's, over topology t, elements of elemSize
// bytes) takes under m, from the first rank's start to the last rank's
// end, all ranks starting together.
//
// It simulates what dist's executor does. A rank makes its sends in
// schedule order, one after another: each leaves when the one before it
// has gone and every receive of an earlier round that writes what it
// reads has completed, and takes its bytes over the bandwidth it gets;
// it arrives a latency later. A receive completes when its data has
// arrived and been reduced: a reducing receive reduces as the data
// streams in, so it ends the reduction time after the data began to
// arrive or on arrival, whichever is later (in a snapshot round, whose
// receives land in scratch space, after arrival). A transfer between
// hosts gets the network bandwidth divided by the number of transfers of
// the same round index that leave its host or enter its destination's,
// whichever is more: the schedules of one collective run in near lock
// step, so those cross a host's link together. So phases pipeline as they
// do on the wire (a two-level all-reduce's pieces cross the network while
// later ones are still reduced on the host).
//
// With m.Stack, the time is at least m.Call plus the busiest host's CPU
// work (hostWork).
//
// Predict panics if the schedules do not match (a receive that no send
// meets), as Validate would report.
func (m Model) Predict(t Topology, scheds []Schedule, elemSize int) time.Duration {
	if len(scheds) <= 1 {
		return m.Call
	}
	ends := m.simulate(t, scheds, elemSize, nil)
	return m.Call + time.Duration(slices.Max(ends)*1e9)
}

// PredictFrom is Predict for ranks that do not start together: start[r]
// is when rank r calls, in seconds after some instant (nil: all at 0).
// It returns each rank's time in the call, from its own start to its
// return. A benchmark that times "barrier; t0; op; t1" on every rank
// measures the slowest of these with the ranks starting as they leave
// the barrier, which they do apart (a host's leader before the ranks it
// releases): a broadcast's receiver that leaves late finds its data
// nearer, an all-reduce's rank that leaves early waits longer.
func (m Model) PredictFrom(t Topology, scheds []Schedule, elemSize int, start []float64) []time.Duration {
	out := make([]time.Duration, len(scheds))
	if len(scheds) <= 1 {
		for r := range out {
			out[r] = m.Call
		}
		return out
	}
	ends := m.simulate(t, scheds, elemSize, start)
	for r, e := range ends {
		s := 0.0
		if start != nil {
			s = start[r]
		}
		out[r] = m.Call + time.Duration((e-s)*1e9)
	}
	return out
}

// simulate runs Predict's simulation with rank r starting at start[r]
// (nil: 0) and returns when each rank's call ends, less m.Call. Data that
// reaches a rank before it calls is taken (and reduced) when it calls.
func (m Model) simulate(t Topology, scheds []Schedule, elemSize int, start []float64) []float64 {
	n := len(scheds)
	at0 := func(r int) float64 {
		if start == nil {
			return 0
		}
		return start[r]
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
	// Messages each host's ranks send in each round index (any length; a
	// run of joined transfers is one): with fewer CPUs than ranks, their
	// handling queues (m.CPUs).
	msgs := map[hk]int{}
	for r, s := range scheds {
		for k, rd := range s {
			for _, x := range rd.Sends {
				if !x.Joined {
					msgs[hk{hostOf[r], k}]++
				}
				if x.Len > 0 && hostOf[x.Peer] != hostOf[r] {
					egress[hk{hostOf[r], k}]++
					ingress[hk{hostOf[x.Peer], k}]++
				}
			}
		}
	}
	// cpuShare is how many of round k's messages each CPU of host h
	// handles (copies, reductions): 1 unless the host has fewer CPUs
	// than the round's messages.
	cpuShare := func(h, k int) int {
		if m.CPUs == 0 {
			return 1
		}
		return max(1, (msgs[hk{h, k}]+m.CPUs-1)/m.CPUs)
	}
	type arrival struct{ start, end float64 } // when the data begins and ends arriving
	// sent[src][dst] lists src's sends to dst, in order; taken[dst][src]
	// counts those dst has received.
	sent := make([]map[int][]arrival, n)
	taken := make([]map[int]int, n)
	// written[r]: when each element range of rank r's buffer was last
	// written by a receive, as far as its rounds have completed.
	written := make([]readyMap, n)
	for r := range n {
		sent[r], taken[r] = map[int][]arrival{}, map[int]int{}
		written[r] = newReadyMap(scheds[r])
	}
	next := make([]int, n)     // each rank's first round whose receives are not all in
	issued := make([]int, n)   // each rank's rounds whose sends are out
	free := make([]float64, n) // when each rank's last send has gone
	ends := make([]float64, n) // when each rank's call ends
	for r := range n {
		free[r] = at0(r)
		ends[r] = free[r]
	}
	left := n
	for _, s := range scheds {
		if len(s) == 0 {
			left--
		}
	}
	for left > 0 {
		progress := false
		for r := range n {
			s := scheds[r]
			for {
				// Sends of round issued[r], once every earlier round's
				// receives are in (their times are then known).
				for issued[r] < len(s) && issued[r] <= next[r] {
					k := issued[r]
					for _, x := range s[k].Sends {
						at := max(free[r], written[r].at(x))
						cpu := cpuShare(hostOf[r], k)
						l, share := m.Local, cpu
						if hostOf[x.Peer] != hostOf[r] {
							l = m.Network
							share = max(1, egress[hk{hostOf[r], k}], ingress[hk{hostOf[x.Peer], k}])
						}
						free[r] = at + float64(x.Len*elemSize)*float64(share)/l.Bandwidth
						lat := l.Latency.Seconds() * float64(cpu)
						sent[r][x.Peer] = append(sent[r][x.Peer], arrival{at + lat, free[r] + lat})
					}
					issued[r]++
					progress = true
				}
				if next[r] == len(s) {
					break
				}
				k := next[r]
				rd := s[k]
				ready := true
				for _, y := range rd.Recvs {
					if taken[r][y.Peer] >= len(sent[y.Peer][r]) {
						ready = false
						break
					}
				}
				if !ready {
					break
				}
				for _, y := range rd.Recvs {
					a := sent[y.Peer][r][taken[r][y.Peer]]
					taken[r][y.Peer]++
					end := a.end
					if y.Reduce {
						// Data in before the rank calls is reduced when
						// it calls.
						end = max(end, at0(r))
						red := float64(y.Len*elemSize) / m.Reduce
						red *= float64(cpuShare(hostOf[r], k))
						if rd.Snapshot {
							end += red
						} else {
							end = max(end, max(a.start, at0(r))+red)
						}
					}
					written[r].wrote(y, end)
					ends[r] = max(ends[r], end)
				}
				next[r]++
				progress = true
				if next[r] == len(s) && issued[r] == len(s) {
					left--
				}
			}
			ends[r] = max(ends[r], free[r])
		}
		if !progress {
			panic("algo: Predict: the schedules do not match (a receive that no send meets)")
		}
	}
	if m.Stack > 0 {
		// No rank of a host ends before the host's CPUs have done its
		// work, begun when the first of them called.
		for _, ranks := range t.Hosts {
			w := m.hostWork(func(r int) int { return hostOf[r] }, ranks, func(r int) Schedule { return scheds[r] }, elemSize)
			first := math.Inf(1)
			for _, r := range ranks {
				first = min(first, at0(r))
			}
			for _, r := range ranks {
				ends[r] = max(ends[r], first+w)
			}
		}
	}
	return ends
}

// hostWork is the CPU time the host of ranks spends on a call with these
// schedules, over the CPUs it gives them (m.CPUs, or one a rank): each
// byte its ranks send to or receive from another host at m.Stack, each
// byte they send through shared memory at m.Local's bandwidth (which has
// the copy in and the copy out in it), each byte they reduce at m.Reduce.
// It needs only the host's own ranks' schedules.
func (m Model) hostWork(hostOf func(r int) int, ranks []int, sched func(r int) Schedule, elemSize int) float64 {
	work := 0.0
	for _, r := range ranks {
		for _, rd := range sched(r) {
			for _, x := range rd.Sends {
				b := float64(x.Len * elemSize)
				if hostOf(x.Peer) != hostOf(r) {
					work += b / m.Stack
				} else {
					work += b / m.Local.Bandwidth
				}
			}
			for _, y := range rd.Recvs {
				b := float64(y.Len * elemSize)
				if hostOf(y.Peer) != hostOf(r) {
					work += b / m.Stack
				}
				if y.Reduce {
					work += b / m.Reduce
				}
			}
		}
	}
	cpus := len(ranks)
	if m.CPUs > 0 {
		cpus = min(cpus, m.CPUs)
	}
	return work / float64(max(cpus, 1))
}

// Schedules returns every rank's schedule of the plan.
func (p Plan) Schedules(size int) []Schedule {
	out := make([]Schedule, size)
	for r := range size {
		out[r] = p.Schedule(r)
	}
	return out
}

// WithPrediction is p with the time m predicts for it on t.
func (p Plan) WithPrediction(t Topology, m Model, elemSize int) Plan {
	return p.predicted(t, m, elemSize)
}

// predicted fills in p.Predicted.
func (p Plan) predicted(t Topology, m Model, elemSize int) Plan {
	p.Predicted = m.Predict(t, p.Schedules(t.Size()), elemSize)
	return p
}

// best returns the candidate with the least predicted time (the first of
// equals). Candidates that the hosts' CPUs bound alike (Model.Stack: the
// same bytes through the same CPUs) tie; the tie goes to the one that
// would be faster were the CPUs free, which has the more room to overlap
// its work: on namespace hosts at 10 Gbit/s, halving-doubling's all-reduce
// of 16 MiB, in four unpipelined steps, took 61 ms where the two-level
// schedule in 8 pieces, which the model ties with it, took 31.
func best(t Topology, m Model, elemSize int, cands ...Plan) Plan {
	var out Plan
	free := m
	free.Stack = 0
	for i, c := range cands {
		c = c.predicted(t, m, elemSize)
		switch {
		case i == 0 || c.Predicted < out.Predicted && !cpuTie(c.Predicted, out.Predicted, m):
			out = c
		case cpuTie(c.Predicted, out.Predicted, m):
			if free.Predict(t, c.Schedules(t.Size()), elemSize) < free.Predict(t, out.Schedules(t.Size()), elemSize) {
				out = c
			}
		}
	}
	return out
}

// cpuTie reports whether two times m predicts are equal but for rounding,
// as when its CPU bound (Model.Stack) decides both.
func cpuTie(a, b time.Duration, m Model) bool {
	return m.Stack > 0 && max(a, b)-min(a, b) <= max(a, b)/1000
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

// chainSegmentChoices are the segment counts tried for a chain broadcast
// of bytes bytes: segmentChoices', but on hosts whose CPUs bound their
// traffic (m.Stack) no piece shorter than chainPieceTime on the network.
// There each piece costs the CPUs of both ends wake-ups and, where ranks
// share a CPU, turns of it, which the model does not count (as
// pipeSegments says of the all-reduce's pieces). Measured on namespace
// hosts at 10 Gbit/s (2 × 2 ranks, a CPU a host, two runs each), 1 MiB
// took 932-995 µs in 4 pieces, 961-1,366 in 8, 1,221-1,522 in 16 and
// 2,919-3,253 in 64, about 35 µs more a piece; the model, which ranked
// 16 first, chose it.
func chainSegmentChoices(bytes int, m Model) []int {
	out := segmentChoices(bytes, maxChainSegments)
	if m.Stack == 0 {
		return out
	}
	floor := int(m.Network.Bandwidth * chainPieceTime.Seconds())
	return slices.DeleteFunc(out, func(s int) bool { return s > 1 && bytes/s < floor })
}

// chainPieceTime is the least time a piece of a chain broadcast spends on
// the network on hosts whose CPUs bind (chainSegmentChoices).
const chainPieceTime = 200 * time.Microsecond

// pinnedOr is choices, or only the pinned count (pinnedSegments) when
// pinned is not 0.
func pinnedOr(choices []int, pinned, most, elems int) []int {
	if pinned > 0 {
		return []int{pinnedSegments(pinned, most, elems)}
	}
	return choices
}

// chunkSegments is the segment counts the ring and two-level all-gather
// and reduce-scatter over chunks of counts elements are tried in.
func chunkSegments(counts []int, elemSize, pinned int) []int {
	most := slices.Max(counts)
	return pinnedOr(chunkSegmentChoices(most*elemSize), pinned, maxRingSegments, most)
}

// chunkSegmentChoices are the segment counts the ring and two-level
// all-gather and reduce-scatter of chunks of bytes bytes are tried in
// across hosts: segmentChoices', less those whose pieces are longer than
// maxChunkPiece (the most segments when every count's are). The model
// sees no cost in a long piece, but a transfer longer than the socket's
// buffer (TCPOptions.SocketBuffer, 4 MiB) leaves its sender waiting in
// the write for a receiver that, where ranks share a CPU, does not run.
// Measured on namespace hosts, 2 × 2 ranks, a CPU a host, all-gather of
// 64 MiB (chunks of 16 MiB), two-level: at 10 Gbit/s 100-146 ms in 2
// segments, 124 in 4, 71 in 8 and in 16; at 1 Gbit/s 314 ms in 2, 288
// in 16. The model had chosen 2 at both.
func chunkSegmentChoices(bytes int) []int {
	out := segmentChoices(bytes, maxRingSegments)
	short := slices.DeleteFunc(slices.Clone(out), func(s int) bool { return bytes/s > maxChunkPiece })
	if len(short) == 0 {
		return out[len(out)-1:]
	}
	return short
}

// maxChunkPiece is the longest piece of a chunk the ring and two-level
// all-gather and reduce-scatter send across hosts (chunkSegmentChoices):
// half the socket's default buffer.
const maxChunkPiece = 2 << 20

// pinnedSegments is a pinned segment count as a schedule can take it: at
// most most, and no more than the elements of a piece.
func pinnedSegments(pinned, most, elems int) int {
	return max(1, min(pinned, most, elems))
}

// pipeSegments is the segment count of a pipelined all-reduce across
// hosts whose chunks are of bytes bytes: the most (a power of two, up to
// most) that keeps each piece on the network for pieceTime, and at least
// 64 KiB. The model does not choose it: it counts a piece's fixed costs
// as a latency, where on ranks that share a CPU each piece also costs
// turns of that CPU, which the model cannot see, and the fill and drain
// of a short pipeline cost more than it predicts. Measured on the
// namespace hosts (2 × 2 ranks, a CPU a host): at 1 Gbit/s, 64 MiB
// two-level took 709 ms in 4 segments, 610 in 8 and 596 in 16, which the
// model ranked the other way round; at 10 Gbit/s, 16 MiB took 34 ms in
// 4 and 60 in 16, 64 MiB 340 ms in 4 and 184 in 16.
func pipeSegments(bytes, most int, m Model) int {
	minPiece := max(64<<10, int(m.Network.Bandwidth*pieceTime.Seconds()))
	s := 1
	for s*2 <= most && bytes/(s*2) >= minPiece {
		s *= 2
	}
	return s
}

// pieceTime is the least time a piece of a pipelined all-reduce spends on
// the network (pipeSegments).
const pieceTime = 400 * time.Microsecond

// ChooseAllReduceOn picks the all-reduce of count elements of elemSize
// bytes for a group laid out as t, and predicts its time under m. On one
// host it is ChooseAllReduce's choice (thresholds measured on this
// project's machines). Across hosts it is whichever of recursive
// doubling, halving-doubling (in either order of partners), the ring and
// (with the same number of ranks on every host, more than one)
// TwoLevelAllReduce, both in pipeSegments' segments, and for small
// vectors LeaderAllReduce, m predicts fastest.
func ChooseAllReduceOn(t Topology, m Model, count, elemSize int) Plan {
	size := t.Size()
	if len(t.Hosts) <= 1 || count == 0 {
		return ChooseAllReduce(size, count, elemSize).predicted(t, m, elemSize)
	}
	checkChoice("ChooseAllReduceOn", size, count, elemSize)
	return best(t, m, elemSize, allReduceCands(t, m, count, elemSize, 0)...)
}

// allReduceCands are ChooseAllReduceOn's candidates across hosts; those in
// segments, in exactly pinned segments when pinned is not 0 (pin.go).
func allReduceCands(t Topology, m Model, count, elemSize, pinned int) []Plan {
	size := t.Size()
	cands := []Plan{
		{"recursive-doubling", 1, func(rank int) Schedule { return RecursiveDoublingAllReduce(rank, size, count) }, 0},
		{"halving-doubling", 1, func(rank int) Schedule { return HalvingDoublingAllReduce(rank, size, count) }, 0},
		{"halving-doubling-near", 1, func(rank int) Schedule { return HalvingDoublingNearAllReduce(rank, size, count) }, 0},
	}
	seg := pipeSegments(count*elemSize/size, maxRingSegments, m)
	if pinned > 0 {
		seg = pinnedSegments(pinned, maxRingSegments, count/size)
	}
	cands = append(cands, Plan{"ring", seg, func(rank int) Schedule { return RingAllReduce(rank, size, count, seg) }, 0})
	if per, ok := t.Uniform(); ok && per > 1 {
		cands = append(cands, Plan{"two-level", seg, func(rank int) Schedule { return TwoLevelAllReduce(rank, t, count, seg) }, 0})
	}
	if len(t.Hosts) < size && count*elemSize <= smallAllReduceBytes {
		cands = append(cands, Plan{"leaders", 1, func(rank int) Schedule { return LeaderAllReduce(rank, t, count) }, 0})
	}
	return cands
}

// ChooseBroadcastOn is ChooseBroadcast for a group laid out as t, with the
// time m predicts; across hosts, the binomial tree, the chain with the
// segment count m predicts fastest, or (for vectors of up to
// smallBroadcastBytes, on hosts with more than one rank)
// LeaderBroadcast.
func ChooseBroadcastOn(t Topology, m Model, root, count, elemSize int) Plan {
	size := t.Size()
	if len(t.Hosts) <= 1 || count == 0 {
		return ChooseBroadcast(size, root, count, elemSize).predicted(t, m, elemSize)
	}
	checkChoice("ChooseBroadcastOn", size, count, elemSize)
	checkRoot("ChooseBroadcastOn", root, size)
	return best(t, m, elemSize, broadcastCands(t, m, root, count, elemSize, 0)...)
}

// broadcastCands are ChooseBroadcastOn's candidates across hosts (pinned:
// as allReduceCands').
func broadcastCands(t Topology, m Model, root, count, elemSize, pinned int) []Plan {
	size := t.Size()
	cands := []Plan{{"binomial", 1, func(rank int) Schedule { return BinomialBroadcast(rank, size, root, count) }, 0}}
	for _, seg := range pinnedOr(chainSegmentChoices(count*elemSize, m), pinned, maxChainSegments, count) {
		cands = append(cands, Plan{"chain", seg, func(rank int) Schedule { return ChainBroadcast(rank, size, root, count, seg) }, 0})
	}
	if len(t.Hosts) < size && count*elemSize <= smallBroadcastBytes {
		cands = append(cands, Plan{"leaders", 1, func(rank int) Schedule { return LeaderBroadcast(rank, t, root, count) }, 0})
	}
	return cands
}

// ChooseAllGatherOn is ChooseAllGather for a group laid out as t, with the
// time m predicts; across hosts, recursive doubling, the ring or (with the
// same number of ranks on every host, more than one) TwoLevelAllGather,
// with the segment count m predicts fastest.
func ChooseAllGatherOn(t Topology, m Model, counts []int, elemSize int) Plan {
	size := t.Size()
	total := checkCounts("ChooseAllGatherOn", size, counts)[size]
	if len(t.Hosts) <= 1 || total == 0 {
		return ChooseAllGather(size, counts, elemSize).predicted(t, m, elemSize)
	}
	checkChoice("ChooseAllGatherOn", size, total, elemSize)
	return best(t, m, elemSize, allGatherCands(t, counts, elemSize, 0)...)
}

// allGatherCands are ChooseAllGatherOn's candidates across hosts (pinned:
// as allReduceCands').
func allGatherCands(t Topology, counts []int, elemSize, pinned int) []Plan {
	size := t.Size()
	counts = append([]int(nil), counts...)
	cands := []Plan{{"recursive-doubling", 1, func(rank int) Schedule { return RecursiveDoublingAllGather(rank, size, counts) }, 0}}
	segs := chunkSegments(counts, elemSize, pinned)
	for _, seg := range segs {
		cands = append(cands, Plan{"ring", seg, func(rank int) Schedule { return RingAllGather(rank, size, counts, seg) }, 0})
	}
	if per, ok := t.Uniform(); ok && per > 1 {
		for _, seg := range segs {
			cands = append(cands, Plan{"two-level", seg, func(rank int) Schedule { return TwoLevelAllGather(rank, t, counts, seg) }, 0})
		}
	}
	return cands
}

// ChooseReduceScatterOn is ChooseReduceScatter for a group laid out as t,
// with the time m predicts; across hosts, the ring or (with the same
// number of ranks on every host, more than one) TwoLevelReduceScatter,
// with the segment count m predicts fastest. Only the ring keeps
// ChooseReduceScatter's promise never to receive into chunk rank−1.
func ChooseReduceScatterOn(t Topology, m Model, counts []int, elemSize int) Plan {
	size := t.Size()
	total := checkCounts("ChooseReduceScatterOn", size, counts)[size]
	if len(t.Hosts) <= 1 || total == 0 {
		return ChooseReduceScatter(size, counts, elemSize).predicted(t, m, elemSize)
	}
	checkChoice("ChooseReduceScatterOn", size, total, elemSize)
	return best(t, m, elemSize, reduceScatterCands(t, counts, elemSize, 0)...)
}

// reduceScatterCands are ChooseReduceScatterOn's candidates across hosts
// (pinned: as allReduceCands').
func reduceScatterCands(t Topology, counts []int, elemSize, pinned int) []Plan {
	size := t.Size()
	counts = append([]int(nil), counts...)
	var cands []Plan
	segs := chunkSegments(counts, elemSize, pinned)
	for _, seg := range segs {
		cands = append(cands, Plan{"ring", seg, func(rank int) Schedule { return RingReduceScatter(rank, size, counts, seg) }, 0})
	}
	if per, ok := t.Uniform(); ok && per > 1 {
		for _, seg := range segs {
			cands = append(cands, Plan{"two-level", seg, func(rank int) Schedule { return TwoLevelReduceScatter(rank, t, counts, seg) }, 0})
		}
	}
	return cands
}

// ChooseBarrierOn is the dissemination barrier, or across hosts whichever
// of it and TwoLevelBarrier m predicts faster, with its time.
func ChooseBarrierOn(t Topology, m Model) Plan {
	cands := barrierCands(t)
	if len(cands) == 1 {
		return cands[0].predicted(t, m, 1)
	}
	return best(t, m, 1, cands...)
}

// barrierCands are ChooseBarrierOn's candidates: the two-level barrier
// only across hosts of several ranks.
func barrierCands(t Topology) []Plan {
	size := t.Size()
	flat := Plan{"dissemination", 1, func(rank int) Schedule { return DisseminationBarrier(rank, size) }, 0}
	if len(t.Hosts) <= 1 || len(t.Hosts) == size {
		return []Plan{flat}
	}
	return []Plan{flat, Plan{"two-level", 1, func(rank int) Schedule { return TwoLevelBarrier(rank, t) }, 0}}
}

// readyMap is when each part of one rank's buffer was last written by a
// receive (the latest of the receives that wrote it), over the cells
// that the boundaries of the rank's transfers cut the buffer into, so
// that finding what a send waits for costs the cells it covers, not a
// scan of every earlier receive. An empty transfer (a barrier's) waits
// for every earlier receive.
type readyMap struct {
	bounds []int     // cell i is [bounds[i], bounds[i+1])
	t      []float64 // when each cell was last written
	all    float64   // when the last receive of all completed
}

func newReadyMap(s Schedule) readyMap {
	var b []int
	for _, rd := range s {
		for _, xs := range [][]Xfer{rd.Sends, rd.Recvs} {
			for _, x := range xs {
				if x.Len > 0 {
					b = append(b, x.Off, x.Off+x.Len)
				}
			}
		}
	}
	slices.Sort(b)
	b = slices.Compact(b)
	return readyMap{bounds: b, t: make([]float64, max(0, len(b)-1))}
}

// cells returns the range of cells x covers.
func (m *readyMap) cells(x Xfer) (lo, hi int) {
	lo, _ = slices.BinarySearch(m.bounds, x.Off)
	hi, _ = slices.BinarySearch(m.bounds, x.Off+x.Len)
	return lo, hi
}

// at is when the data send x reads was last written.
func (m *readyMap) at(x Xfer) float64 {
	if x.Len == 0 {
		return m.all
	}
	lo, hi := m.cells(x)
	t := 0.0
	for _, c := range m.t[lo:hi] {
		t = max(t, c)
	}
	return t
}

// wrote records receive y, completed at end.
func (m *readyMap) wrote(y Xfer, end float64) {
	m.all = max(m.all, end)
	if y.Len == 0 {
		return
	}
	lo, hi := m.cells(y)
	for i := lo; i < hi; i++ {
		m.t[i] = max(m.t[i], end)
	}
}
