package algo

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"time"
)

// Closed forms of the cost model, for groups too large to simulate.
//
// Model.Predict runs every rank's schedule, which is what the Choose…On
// functions need for the few hosts a job spans, but at thousands of ranks
// it builds and walks millions of rounds. The functions here give the
// same model's time for a group of Shape's hosts × ranks from the
// algorithms' structure alone: a sum over the rounds of the schedule's
// critical path, each round's transfer costed as Predict costs it.
//
// They keep Predict's assumptions: a rank's sends leave one after another
// and each waits for the receives whose data it reads; a transfer costs
// the link's latency plus its bytes over the bandwidth; transfers of one
// round that cross a host's link share its bandwidth (so the network's
// time of a round is multiplied by how many of a host's ranks cross at
// once); a reducing receive reduces as the data streams in (a snapshot
// round's, after arrival); and with Model.CPUs a round's latencies, copies
// through shared memory and reductions are multiplied by how many of the
// host's messages of that round each CPU handles. The shape is the one
// the two-level schedules need: Hosts hosts of PerHost ranks each,
// numbered host by host, and a root (for broadcast) of rank 0.
//
// What they leave out, and what the tests (estimate_test.go) measure
// against Predict: the two-level schedules are costed phase after phase,
// where Predict lets a piece start the next phase as soon as its part of
// the last is in (they overestimate by at most a few pieces' time); the
// Bruck all-gather's runs that wrap past the end of the buffer go as two
// transfers, which Predict counts twice in a host's share of the link,
// and the closed form charges on every host at the top of the group (up
// to 20% over); Predict shares a link among transfers of one round index,
// and a binomial tree's ranks reach a level of the tree at different
// indices (their empty rounds left out), so it shares host 0's link less
// than the lock step the closed form assumes (up to 2× over across
// hosts, equal on one); transfers left out for being empty (fewer
// elements than pieces) are costed as if they moved an element; with
// Model.CPUs, the messages of a round are counted as if every rank
// sent one, where schedules whose ranks have different numbers of rounds
// (a non-power-of-two fold, the leaders' all-reduce) mix rounds of
// different phases under one index. And neither Predict nor these know
// anything the model does not: a goroutine scheduler, a kernel's socket
// buffers, a first touch of memory.

// Shape is a group of Hosts hosts with PerHost ranks on each, ranks
// numbered host by host (host h holds ranks h·PerHost … (h+1)·PerHost−1).
type Shape struct{ Hosts, PerHost int }

// Size is the number of ranks.
func (s Shape) Size() int { return s.Hosts * s.PerHost }

func (s Shape) String() string { return fmt.Sprintf("%d×%d", s.Hosts, s.PerHost) }

// Topology builds the shape's topology (Size ranks: for tests and small
// groups; the closed forms never need it).
func (s Shape) Topology() Topology {
	host := make([]int, s.Size())
	for i := range host {
		host[i] = i / s.PerHost
	}
	return NewTopology(host)
}

func (s Shape) check(fn string) {
	if s.Hosts < 1 || s.PerHost < 1 {
		panic(fmt.Sprintf("algo: %s: shape %v, need at least one host of one rank", fn, s))
	}
}

// Estimate is an algorithm and the time the closed forms give it.
type Estimate struct {
	Name     string
	Segments int
	Time     time.Duration
}

func (e Estimate) String() string {
	return Plan{Name: e.Name, Segments: e.Segments}.String()
}

// Op is a collective the closed forms cover.
type Op int

const (
	OpAllReduce Op = iota
	OpBroadcast
	OpAllGather
	OpReduceScatter
)

func (o Op) String() string {
	return [...]string{"all_reduce", "broadcast", "all_gather", "reduce_scatter"}[o]
}

// EstimateAlgorithm is the time m gives the named algorithm (a Plan name
// of op: "ring", "recursive-doubling", "halving-doubling",
// "halving-doubling-near", "two-level", "leaders" (all-reduce and
// broadcast), "binomial", "chain")
// in segments pieces, over s, for count elements of elemSize bytes. count
// is the vector for all-reduce and broadcast, and each rank's chunk for
// all-gather and reduce-scatter (whose buffer holds Size·count). The
// reduce-scatter's "halving-doubling" is ChooseReduceScatter's small
// case: HalvingDoublingAllReduce of the whole buffer. It panics on a name
// that op does not have, or on a two-level algorithm over a shape of one
// host.
func (m Model) EstimateAlgorithm(s Shape, op Op, name string, segments, count, elemSize int) time.Duration {
	s.check("EstimateAlgorithm")
	checkChoice("EstimateAlgorithm", s.Size(), count, elemSize)
	checkSegments("EstimateAlgorithm", segments)
	if s.Size() == 1 || count == 0 {
		return m.Call
	}
	e := estimator{m: m, s: s, es: elemSize}
	var t float64
	switch {
	case op == OpAllReduce && name == "ring":
		t = e.ringAllReduce(count, segments)
	case op == OpAllReduce && name == "recursive-doubling":
		t = e.recursiveDoubling(count)
	case op == OpAllReduce && name == "halving-doubling":
		t = e.halvingDoubling(count, false)
	case op == OpAllReduce && name == "halving-doubling-near":
		t = e.halvingDoubling(count, true)
	case op == OpAllReduce && name == "two-level":
		t = e.twoLevelAllReduce(count, segments)
	case op == OpAllReduce && name == "leaders":
		t = e.leaders(count)
	case op == OpBroadcast && name == "binomial":
		t = e.binomial(count)
	case op == OpBroadcast && name == "chain":
		t = e.chain(count, segments)
	case op == OpBroadcast && name == "leaders":
		t = e.leaderBroadcast(count)
	case op == OpAllGather && name == "ring":
		t = e.ringAllGather(count, segments)
	case op == OpAllGather && name == "recursive-doubling":
		if size := s.Size(); size&(size-1) == 0 {
			t = e.doublingAllGather(count)
		} else {
			t = e.bruck(count)
		}
	case op == OpAllGather && name == "two-level":
		t = e.twoLevelAllGather(count, segments)
	case op == OpReduceScatter && name == "ring":
		t = e.ringReduceScatter(count, segments)
	case op == OpReduceScatter && name == "halving-doubling":
		t = e.halvingDoubling(count*s.Size(), false)
	case op == OpReduceScatter && name == "two-level":
		t = e.twoLevelReduceScatter(count, segments)
	default:
		panic(fmt.Sprintf("algo: EstimateAlgorithm: %v has no algorithm %q", op, name))
	}
	if m.Stack > 0 {
		t = max(t, e.hostWork(op, name, segments, count))
	}
	return m.Call + time.Duration(t*1e9)
}

// scheduleOf returns the schedule of each rank of the named algorithm (as
// EstimateAlgorithm names them) over s, rank 0 the root of a broadcast.
func scheduleOf(s Shape, op Op, name string, seg, count int) func(r int) Schedule {
	size, topo := s.Size(), s.Topology()
	counts := uniform(size, count)
	var f func(r int) Schedule
	switch {
	case op == OpAllReduce && name == "ring":
		f = func(r int) Schedule { return RingAllReduce(r, size, count, seg) }
	case op == OpAllReduce && name == "recursive-doubling":
		f = func(r int) Schedule { return RecursiveDoublingAllReduce(r, size, count) }
	case op == OpAllReduce && name == "halving-doubling":
		f = func(r int) Schedule { return HalvingDoublingAllReduce(r, size, count) }
	case op == OpAllReduce && name == "halving-doubling-near":
		f = func(r int) Schedule { return HalvingDoublingNearAllReduce(r, size, count) }
	case op == OpAllReduce && name == "two-level":
		f = func(r int) Schedule { return TwoLevelAllReduce(r, topo, count, seg) }
	case op == OpAllReduce && name == "leaders":
		f = func(r int) Schedule { return LeaderAllReduce(r, topo, count) }
	case op == OpBroadcast && name == "binomial":
		f = func(r int) Schedule { return BinomialBroadcast(r, size, 0, count) }
	case op == OpBroadcast && name == "chain":
		f = func(r int) Schedule { return ChainBroadcast(r, size, 0, count, seg) }
	case op == OpBroadcast && name == "leaders":
		f = func(r int) Schedule { return LeaderBroadcast(r, topo, 0, count) }
	case op == OpAllGather && name == "ring":
		f = func(r int) Schedule { return RingAllGather(r, size, counts, seg) }
	case op == OpAllGather && name == "recursive-doubling":
		f = func(r int) Schedule { return RecursiveDoublingAllGather(r, size, counts) }
	case op == OpAllGather && name == "two-level":
		f = func(r int) Schedule { return TwoLevelAllGather(r, topo, counts, seg) }
	case op == OpReduceScatter && name == "ring":
		f = func(r int) Schedule { return RingReduceScatter(r, size, counts, seg) }
	case op == OpReduceScatter && name == "halving-doubling":
		f = func(r int) Schedule { return HalvingDoublingAllReduce(r, size, count*size) }
	case op == OpReduceScatter && name == "two-level":
		f = func(r int) Schedule { return TwoLevelReduceScatter(r, topo, counts, seg) }
	default:
		panic(fmt.Sprintf("algo: EstimateAlgorithm: %v has no algorithm %q", op, name))
	}
	return f
}

// hostWork is Model.hostWork of the busier of the first two hosts (the
// only one on one host): in every algorithm here the hosts after the
// first are alike (a broadcast's root is on host 0; a chain's host 1
// receives and sends as every later relay does but the last), so this is
// the busiest host's but for the binomial tree, whose hosts differ.
func (e estimator) hostWork(op Op, name string, segments, count int) float64 {
	f := scheduleOf(e.s, op, name, segments, count)
	hostOf := func(r int) int { return r / e.s.PerHost }
	w := 0.0
	for h := range min(e.s.Hosts, 2) {
		ranks := make([]int, e.s.PerHost)
		for i := range ranks {
			ranks[i] = h*e.s.PerHost + i
		}
		w = max(w, e.m.hostWork(hostOf, ranks, f, e.es))
	}
	return w
}

// Candidates returns the algorithms the policy chooses among for op over
// s (count as in EstimateAlgorithm), each with its time, in the order the
// policy tries them: across hosts, those of the Choose…On function; on
// one host, every algorithm the thresholds of the Choose function may
// pick, in the segments it would cut this size into.
func (m Model) Candidates(s Shape, op Op, count, elemSize int) []Estimate {
	s.check("Candidates")
	size, bytes := s.Size(), count*elemSize
	var c []Estimate
	add := func(name string, seg int) { c = append(c, Estimate{Name: name, Segments: seg}) }
	p := defaultPolicy
	switch op {
	case OpAllReduce:
		if s.Hosts == 1 {
			add("recursive-doubling", 1)
			add("halving-doubling", 1)
			add("ring", p.segmentsFor((count+size-1)/size, elemSize, p.maxRingSegments))
			break
		}
		add("recursive-doubling", 1)
		add("halving-doubling", 1)
		add("halving-doubling-near", 1)
		seg := pipeSegments(bytes/size, maxRingSegments, m)
		add("ring", seg)
		if s.PerHost > 1 {
			add("two-level", seg)
		}
		if s.Hosts < size && bytes <= smallAllReduceBytes {
			add("leaders", 1)
		}
	case OpBroadcast:
		add("binomial", 1)
		if s.Hosts == 1 {
			seg := p.segmentsFor(count, elemSize, p.maxChainSegments)
			add("chain", max(seg, min(chainSegments, bytes/p.chainPiece)))
			break
		}
		for _, seg := range chainSegmentChoices(bytes, m) {
			add("chain", seg)
		}
		if s.Hosts < size && bytes <= smallBroadcastBytes {
			add("leaders", 1)
		}
	case OpAllGather:
		add("recursive-doubling", 1)
		if s.Hosts == 1 {
			add("ring", p.segmentsFor(count, elemSize, p.maxRingSegments))
			break
		}
		for _, seg := range chunkSegmentChoices(bytes) {
			add("ring", seg)
		}
		if s.PerHost > 1 {
			for _, seg := range chunkSegmentChoices(bytes) {
				add("two-level", seg)
			}
		}
	case OpReduceScatter:
		if s.Hosts == 1 {
			add("halving-doubling", 1)
			add("ring", p.segmentsFor(count, elemSize, p.maxRingSegments))
			break
		}
		for _, seg := range chunkSegmentChoices(bytes) {
			add("ring", seg)
		}
		if s.PerHost > 1 {
			for _, seg := range chunkSegmentChoices(bytes) {
				add("two-level", seg)
			}
		}
	}
	for i := range c {
		c[i].Time = m.EstimateAlgorithm(s, op, c[i].Name, c[i].Segments, count, elemSize)
	}
	return c
}

// Choose is the policy's choice for op over s, with its estimated time:
// on one host the Choose function's (its thresholds are a function of
// the sizes alone), across hosts the candidate of the Choose…On function
// that the closed forms give the least time (the first of equals; of
// those the CPU bound ties, as best breaks them), where that function
// compares Predict's.
func (m Model) Choose(s Shape, op Op, count, elemSize int) Estimate {
	s.check("Choose")
	size := s.Size()
	if s.Hosts == 1 || count == 0 {
		var pl Plan
		switch op {
		case OpAllReduce:
			pl = ChooseAllReduce(size, count, elemSize)
		case OpBroadcast:
			pl = ChooseBroadcast(size, 0, count, elemSize)
		case OpAllGather:
			pl = ChooseAllGather(size, uniform(size, count), elemSize)
		case OpReduceScatter:
			pl = ChooseReduceScatter(size, uniform(size, count), elemSize)
		}
		return Estimate{pl.Name, pl.Segments, m.EstimateAlgorithm(s, op, pl.Name, pl.Segments, count, elemSize)}
	}
	var out Estimate
	free := m
	free.Stack = 0
	for i, c := range m.Candidates(s, op, count, elemSize) {
		switch {
		case i == 0 || c.Time < out.Time && !cpuTie(c.Time, out.Time, m):
			out = c
		case cpuTie(c.Time, out.Time, m):
			if free.EstimateAlgorithm(s, op, c.Name, c.Segments, count, elemSize) < free.EstimateAlgorithm(s, op, out.Name, out.Segments, count, elemSize) {
				out = c
			}
		}
	}
	return out
}

// Best is the candidate with the least time, whatever the policy would
// choose.
func Best(cands []Estimate) Estimate {
	return slices.MinFunc(cands, func(a, b Estimate) int { return cmp.Compare(a.Time, b.Time) })
}

func uniform(size, count int) []int {
	c := make([]int, size)
	for i := range c {
		c[i] = count
	}
	return c
}

// estimator holds what every closed form needs; times are in seconds.
type estimator struct {
	m  Model
	s  Shape
	es int
}

// hop is one transfer: how long its sender is busy sending it, its
// latency, and the reduction its receiver does (0 for a copy).
type hop struct{ send, lat, red float64 }

// copy, reduce and snapshot are the times from the send's start to the
// receive's completion, as Predict completes a receive.
func (h hop) copy() float64     { return h.lat + h.send }
func (h hop) reduce() float64   { return h.lat + max(h.send, h.red) }
func (h hop) snapshot() float64 { return h.lat + h.send + h.red }

// cpu is Predict's cpuShare for a host whose ranks send msgs messages in a
// round.
func (e estimator) cpu(msgs int) float64 {
	if e.m.CPUs == 0 {
		return 1
	}
	return float64(max(1, (msgs+e.m.CPUs-1)/e.m.CPUs))
}

// local is a transfer of b bytes through shared memory, on a host whose
// ranks send msgs messages in the round.
func (e estimator) local(b float64, msgs int) hop {
	c := e.cpu(msgs)
	return hop{c * b / e.m.Local.Bandwidth, c * e.m.Local.Latency.Seconds(), c * b / e.m.Reduce}
}

// network is a transfer of b bytes between hosts, share of them crossing
// each host's link in the round, on hosts whose ranks send msgs messages.
func (e estimator) network(b float64, share, msgs int) hop {
	c := e.cpu(msgs)
	return hop{float64(max(1, share)) * b / e.m.Network.Bandwidth, c * e.m.Network.Latency.Seconds(), c * b / e.m.Reduce}
}

// pieceBytes is the largest piece when count elements are cut in parts
// and each part in segs pieces.
func (e estimator) pieceBytes(count, parts, segs int) float64 {
	return float64(ceilDiv(ceilDiv(count, parts), segs) * e.es)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// ringRun is a run of n identical steps of a ring: what each of the
// ring's classes of rank (its position in a host, for a ring through
// several hosts) costs to send one piece (send) and from a send's start
// to the completion of the next rank's receive (hop).
type ringRun struct {
	n          int
	send, hop_ []float64
}

// ringPath is the longest path through the steps of a ring of
// segmented pieces: the time from the first send to the last receive.
//
// A rank's send of piece i in step k+1 waits for its receive of piece i
// in step k (the data it forwards) and for its own send before it (one
// after another). So the critical path moves, at each step, either one
// rank on with the piece (hop: a latency and a transfer, and the
// reduction) or stays on one rank for a whole step of sends (segs sends:
// a rank whose link is slower than the ring's steps are long); and it
// takes segs−1 sends, once, on the way from the first piece to the last.
// Ranks are in classes (class q sends to class q+1 mod classes; the ring
// through hosts has a host's positions, the last of which sends across),
// and the longest path is a walk over steps × classes.
func ringPath(runs []ringRun, classes, segs int) float64 {
	neg := -1e300
	// v[q][f]: the longest path to class q at the current step, with
	// (f = 1) or without the segs−1 sends of the way from piece 0.
	v := make([][2]float64, classes)
	w := make([][2]float64, classes)
	for q := range v {
		v[q] = [2]float64{0, neg}
	}
	S := float64(segs)
	total := 0
	for _, r := range runs {
		total += r.n
	}
	step := 0
	for _, r := range runs {
		for range r.n {
			for q := range v {
				v[q][1] = max(v[q][1], v[q][0]+(S-1)*r.send[q])
			}
			step++
			if step == total {
				out := neg
				for q := range v {
					out = max(out, v[q][1]+r.hop_[q])
				}
				return out
			}
			for q := range w {
				w[q] = [2]float64{neg, neg}
			}
			for q := range v {
				n := (q + 1) % classes
				for f := range 2 {
					w[q][f] = max(w[q][f], v[q][f]+S*r.send[q])
					w[n][f] = max(w[n][f], v[q][f]+r.hop_[q])
				}
			}
			v, w = w, v
		}
	}
	return 0
}

// flatRing returns the classes of a ring through all ranks of the shape
// and the transfer of piece bytes of each: a host's last rank sends
// across (one transfer a round on each host's link), the others through
// shared memory. Every rank sends one message a round.
func (e estimator) flatRing(piece float64) (classes int, hops []hop) {
	if e.s.Hosts == 1 {
		return 1, []hop{e.local(piece, e.s.Size())}
	}
	r := e.s.PerHost
	hops = make([]hop, r)
	for q := range r - 1 {
		hops[q] = e.local(piece, r)
	}
	hops[r-1] = e.network(piece, 1, r)
	return r, hops
}

func runOf(n int, hops []hop, cost func(hop) float64, mult float64) ringRun {
	r := ringRun{n: n, send: make([]float64, len(hops)), hop_: make([]float64, len(hops))}
	for q, h := range hops {
		r.send[q] = mult * h.send
		r.hop_[q] = cost(h) + (mult-1)*h.send
	}
	return r
}

func (e estimator) ringAllReduce(count, segs int) float64 {
	size := e.s.Size()
	classes, hops := e.flatRing(e.pieceBytes(count, size, segs))
	return ringPath([]ringRun{
		runOf(size-1, hops, hop.reduce, 1),
		runOf(size-1, hops, hop.copy, 1),
	}, classes, segs)
}

func (e estimator) ringReduceScatter(count, segs int) float64 {
	classes, hops := e.flatRing(e.pieceBytes(count, 1, segs))
	return ringPath([]ringRun{runOf(e.s.Size()-1, hops, hop.reduce, 1)}, classes, segs)
}

func (e estimator) ringAllGather(count, segs int) float64 {
	classes, hops := e.flatRing(e.pieceBytes(count, 1, segs))
	return ringPath([]ringRun{runOf(e.s.Size()-1, hops, hop.copy, 1)}, classes, segs)
}

// dimHop is the transfer of b bytes between partners at distance d (a
// power of two) that every rank makes in one round: across hosts when d
// is at least a host's ranks (all of them cross at once), else through
// shared memory.
func (e estimator) dimHop(b float64, d int) hop {
	if e.s.Hosts > 1 && d >= e.s.PerHost {
		return e.network(b, e.s.PerHost, e.s.PerHost)
	}
	return e.local(b, e.msgs())
}

// msgs is how many messages a host's ranks send in a round where each
// sends one.
func (e estimator) msgs() int {
	if e.s.Hosts == 1 {
		return e.s.Size()
	}
	return e.s.PerHost
}

// fold is the non-power-of-two fold of the doubling algorithms (on one
// host: across hosts the shapes here have powers of two): an extra rank's
// vector reduced into its partner's, and the result sent back.
func (e estimator) fold(count int) (in, out float64) {
	if p := floorPow2(e.s.Size()); p < e.s.Size() {
		h := e.local(float64(count*e.es), e.msgs())
		if e.s.Hosts > 1 && p >= e.s.PerHost {
			h = e.network(float64(count*e.es), min(e.s.PerHost, e.s.Size()-p), e.msgs())
		}
		return h.reduce(), h.copy()
	}
	return 0, 0
}

// recursiveDoubling: log₂p rounds, each swapping the whole vector with the
// partner and reducing it after it has arrived (a snapshot round). With a
// fold, a core rank whose partner's vector came in (at in) reaches every
// other core rank through one exchange a round, so the last exchange ends
// at in + every round's; but a core rank that sends the result back to an
// extra rank hears from the other folded ranks (those below the number of
// extras e) only through the rounds of the low bits, bits.Len(e−1) of them.
func (e estimator) recursiveDoubling(count int) float64 {
	size := e.s.Size()
	p := floorPow2(size)
	in, out := e.fold(count)
	all, low := 0.0, 0.0
	k := 0
	if extra := size - p; extra > 1 {
		k = bits.Len(uint(extra - 1))
	}
	for i, d := 0, 1; d < p; i, d = i+1, d*2 {
		h := e.dimHop(float64(count*e.es), d).snapshot()
		all += h
		if i < k {
			low += h
		}
	}
	if p == size {
		return all
	}
	return max(in+all, max(in+low, all)+out)
}

// halvingDoubling: a reduce-scatter that halves, then an all-gather that
// doubles over the same partners; the transfer with the partner at
// distance d is the same size in both, the half of the vector the round
// of that distance keeps (far first: d = p/2 keeps half; near first:
// d = 1 does).
func (e estimator) halvingDoubling(count int, near bool) float64 {
	p := floorPow2(e.s.Size())
	in, out := e.fold(count)
	t := in + out
	chunk := ceilDiv(count, p)
	i := 0
	for d := p / 2; d >= 1; d /= 2 {
		dist := d
		if near {
			dist = p / 2 / d
		}
		i++
		b := float64(min(count, chunk*(p>>i)) * e.es)
		h := e.dimHop(b, dist)
		t += h.reduce() + h.copy()
	}
	return t
}

// binomial: in round k the ranks below 2^k send the vector to rank +2^k,
// one send after another; the last rank to receive is the one whose
// path down the tree has the most latencies (the most set bits), after
// every round's send.
func (e estimator) binomial(count int) float64 {
	size, r := e.s.Size(), e.s.PerHost
	b := float64(count * e.es)
	L := ceilLog2(size)
	round := func(k int) hop {
		d := 1 << k
		if e.s.Hosts > 1 && d >= r {
			return e.network(b, r, r)
		}
		return e.local(b, min(d, e.msgs()))
	}
	sends, lats := 0.0, make([]float64, L)
	for k := range L {
		h := round(k)
		sends += h.send
		lats[k] = h.lat
	}
	// The ranks ≤ size−1 with the most latency on their path: size−1, or
	// its bits down to a set one cleared and all below set.
	top := size - 1
	best := 0.0
	for _, v := range append([]int{top}, clearedBelow(top)...) {
		if v < 1<<(L-1) {
			continue
		}
		sum := 0.0
		for k := range L {
			if v>>k&1 == 1 {
				sum += lats[k]
			}
		}
		best = max(best, sum)
	}
	return sends + best
}

// clearedBelow returns, for each set bit of v but the highest, v with
// that bit cleared and every bit below it set.
func clearedBelow(v int) []int {
	var out []int
	for b := bits.Len(uint(v)) - 2; b >= 0; b-- {
		if v>>b&1 == 1 {
			out = append(out, (v&^(1<<b))|(1<<b-1))
		}
	}
	return out
}

// chain: the pieces follow each other down the chain 0, 1, …, size−1;
// the last piece reaches the last rank after every hop and, once, the
// slowest link's time to send the pieces before it.
//
// With Model.CPUs, the root sends piece 0 alone (round 0), and every
// other rank of a host forwards in the same round as the others: a relay
// shares its host's CPUs with the host's other ranks, the root with
// none.
func (e estimator) chain(count, segs int) float64 {
	piece := e.pieceBytes(count, 1, segs)
	h, r := e.s.Hosts, e.s.PerHost
	// The relays of a host: all its ranks but the root and the last
	// rank, which forwards nothing; with pieces the root sends in the
	// relays' rounds too.
	extra := 0
	if segs > 1 {
		extra = 1
	}
	t, slow := 0.0, 0.0
	hop := func(n int, hp hop) {
		t += float64(n) * hp.copy()
		slow = max(slow, hp.send)
	}
	for x := range h {
		relays := r
		if x == 0 {
			relays -= 1 - extra
		}
		if x == h-1 {
			relays--
		}
		// This host's hops: the root's first, then its relays', the last
		// of which crosses to the next host.
		sends := r
		if x == h-1 {
			sends = r - 1
		}
		for i := range sends {
			msgs := relays
			if x == 0 && i == 0 {
				msgs = 1 // the root's first piece goes alone
			}
			if i == r-1 {
				hop(1, e.network(piece, 1, msgs))
			} else {
				hop(1, e.local(piece, msgs))
			}
		}
	}
	return t + float64(segs-1)*slow
}

// doublingAllGather is RecursiveDoublingAllGather on a power of two: in
// the round of distance d every rank swaps d chunks with its partner, and
// sends them once the round before has brought them.
func (e estimator) doublingAllGather(count int) float64 {
	t := 0.0
	for d := 1; d < e.s.Size(); d *= 2 {
		t += e.dimHop(float64(d*count*e.es), d).copy()
	}
	return t
}

// bruck: in round k (d = 2^k) rank q sends the min(d, size−d) chunks it
// holds to q−d, once its receives of the rounds before are in and its
// send before has gone. The critical path follows the senders back, a
// rank's place in its host deciding which of its sends cross: a walk
// over the rounds and a host's positions.
func (e estimator) bruck(count int) float64 {
	size, r := e.s.Size(), e.s.PerHost
	classes := 1
	if e.s.Hosts > 1 {
		classes = r
	}
	// recv[k][q]: when class q's receive of round k completed; a send of
	// n chunks waits for the round that brought the last of them (chunk
	// rank+j came in the round of the largest power of two ≤ j).
	var recv [][]float64
	start := make([]float64, classes)
	lastSend := make([]float64, classes)
	for d := 1; d < size; d *= 2 {
		n := min(d, size-d)
		b := float64(n * count * e.es)
		cross := func(q int) bool { return e.s.Hosts > 1 && (d >= r || q < d) }
		share := min(d, r)
		if d >= r {
			// The n−1 ranks at the top of the group send a run that wraps
			// past the end of the buffer, as two transfers: on their hosts,
			// Predict counts both in the link's share.
			share += min(r, n-1)
		}
		for q := range classes {
			start[q] += lastSend[q]
			if n > 1 {
				start[q] = max(start[q], recv[bits.Len(uint(n-1))-1][q])
			}
		}
		next := make([]float64, classes)
		for q := range classes {
			src := (q + d) % classes
			h := e.local(b, e.msgs())
			if cross(src) {
				h = e.network(b, share, e.msgs())
			}
			next[q] = start[src] + h.copy()
		}
		for q := range classes {
			h := e.local(b, e.msgs())
			if cross(q) {
				h = e.network(b, share, e.msgs())
			}
			lastSend[q] = h.send
		}
		recv = append(recv, next)
	}
	return slices.Max(recv[len(recv)-1])
}

// homRing is a ring among n ranks (one class) whose transfers are all h.
func homRing(n int, h hop, reduceSteps, copySteps int, segs int, mult float64) float64 {
	var runs []ringRun
	if reduceSteps > 0 {
		runs = append(runs, runOf(reduceSteps, []hop{h}, hop.reduce, mult))
	}
	if copySteps > 0 {
		runs = append(runs, runOf(copySteps, []hop{h}, hop.copy, mult))
	}
	if len(runs) == 0 {
		return 0
	}
	return ringPath(runs, 1, segs)
}

// twoLevelAllReduce: the three phases one after the other: a ring
// reduce-scatter on each host, the ring all-reduce of each rank's chunk
// across hosts (PerHost rings side by side, so PerHost transfers share a
// host's link), a ring all-gather on each host.
func (e estimator) twoLevelAllReduce(count, segs int) float64 {
	h, r := e.s.Hosts, e.s.PerHost
	if h < 2 {
		panic("algo: EstimateAlgorithm: two-level needs more than one host")
	}
	t := 0.0
	if r > 1 {
		lh := e.local(e.pieceBytes(count, r, segs), r)
		t += homRing(r, lh, r-1, 0, segs, 1) + homRing(r, lh, 0, r-1, segs, 1)
	}
	nh := e.network(e.pieceBytes(ceilDiv(count, r), h, segs), r, r)
	return t + homRing(h, nh, h-1, h-1, segs, 1)
}

// twoLevelAllGather: the ring all-gather across hosts of each rank's chunk
// (PerHost rings side by side), then a ring on each host whose pieces are
// a host's worth of chunks (Hosts transfers a step, one after another, in
// one message).
func (e estimator) twoLevelAllGather(count, segs int) float64 {
	h, r := e.s.Hosts, e.s.PerHost
	if h < 2 {
		panic("algo: EstimateAlgorithm: two-level needs more than one host")
	}
	piece := e.pieceBytes(count, 1, segs)
	t := homRing(h, e.network(piece, r, r), 0, h-1, segs, 1)
	if r > 1 {
		// The h pieces of a step go to one peer in one message.
		t += homRing(r, e.local(piece, r), 0, r-1, segs, float64(h))
	}
	return t
}

// twoLevelReduceScatter: the mirror of twoLevelAllGather, reducing.
func (e estimator) twoLevelReduceScatter(count, segs int) float64 {
	h, r := e.s.Hosts, e.s.PerHost
	if h < 2 {
		panic("algo: EstimateAlgorithm: two-level needs more than one host")
	}
	piece := e.pieceBytes(count, 1, segs)
	t := homRing(h, e.network(piece, r, r), h-1, 0, segs, 1)
	if r > 1 {
		t += homRing(r, e.local(piece, r), r-1, 0, segs, float64(h))
	}
	return t
}

// leaders: a binomial reduce onto each host's first rank, recursive
// doubling among those (one rank a host crosses), a binomial broadcast on
// each host.
// leaderBroadcast: the binomial tree among the hosts' leaders over the
// network, then the binomial tree on each host (root's host is as slow
// as any: its leader's local tree starts after its last send across).
func (e estimator) leaderBroadcast(count int) float64 {
	h, r := e.s.Hosts, e.s.PerHost
	t := estimator{m: e.m, s: Shape{h, 1}, es: e.es}.binomial(count)
	if r > 1 {
		t += estimator{m: e.m, s: Shape{1, r}, es: e.es}.binomial(count)
	}
	return t
}

func (e estimator) leaders(count int) float64 {
	h, r := e.s.Hosts, e.s.PerHost
	b := float64(count * e.es)
	t := 0.0
	for d := 1; d < r; d *= 2 {
		t += e.local(b, max(1, r/(2*d))).reduce()
	}
	if p := floorPow2(h); p < h {
		nh := e.network(b, 1, 1)
		t += nh.reduce() + nh.copy()
	}
	for d := 1; d < floorPow2(h); d *= 2 {
		t += e.network(b, 1, 1).snapshot()
	}
	if r > 1 {
		t += estimator{m: e.m, s: Shape{1, r}, es: e.es}.binomial(count)
	}
	return t
}
