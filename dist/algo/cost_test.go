package algo

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// lab is a model of the namespace lab at 1 Gbit/s: a host's link moves a
// TCP payload at about 0.119 GB/s.
var lab = Model{
	Local:   Link{Latency: 5 * time.Microsecond, Bandwidth: 3e9},
	Network: Link{Latency: 60 * time.Microsecond, Bandwidth: 0.119e9},
	Reduce:  3e9,
	Call:    10 * time.Microsecond,
}

func within(t *testing.T, what string, got, want time.Duration, tol float64) {
	t.Helper()
	if math.Abs(got.Seconds()-want.Seconds()) > tol*want.Seconds() {
		t.Errorf("%s: predicted %v, want %v (±%.0f%%)", what, got, want, tol*100)
	}
}

// TestPredictOneTransfer: two ranks on two hosts swapping their vectors
// (recursive doubling on two) take the call, one network latency, the
// bytes over the bandwidth and the reduction; on one host, the local link.
func TestPredictOneTransfer(t *testing.T) {
	const count = 1 << 20
	bytes := float64(4 * count)
	two := NewTopology([]int{0, 1})
	scheds := []Schedule{RecursiveDoublingAllReduce(0, 2, count), RecursiveDoublingAllReduce(1, 2, count)}
	want := lab.Call + lab.Network.Latency + time.Duration(1e9*(bytes/lab.Network.Bandwidth+bytes/lab.Reduce))
	within(t, "across hosts", lab.Predict(two, scheds, 4), want, 1e-6)
	one := NewTopology([]int{0, 0})
	want = lab.Call + lab.Local.Latency + time.Duration(1e9*(bytes/lab.Local.Bandwidth+bytes/lab.Reduce))
	within(t, "on one host", lab.Predict(one, scheds, 4), want, 1e-6)
}

// TestPredictSharesTheLink: two ranks of one host sending to the other
// host in the same round share its link: the same bytes take twice as
// long as from one rank.
func TestPredictSharesTheLink(t *testing.T) {
	const count = 1 << 20
	topo := NewTopology([]int{0, 0, 1, 1})
	// Ranks 0 and 1 each send their vector to 2 and 3.
	scheds := []Schedule{
		{{Sends: []Xfer{{Peer: 2, Len: count}}}},
		{{Sends: []Xfer{{Peer: 3, Len: count}}}},
		{{Recvs: []Xfer{{Peer: 0, Len: count}}}},
		{{Recvs: []Xfer{{Peer: 1, Len: count}}}},
	}
	want := lab.Call + lab.Network.Latency + time.Duration(1e9*2*4*count/lab.Network.Bandwidth)
	within(t, "two sends over one link", lab.Predict(topo, scheds, 4), want, 1e-6)
}

// TestPredictMatchesTheBounds: a large all-reduce over 2 hosts × 2 ranks
// costs about what each algorithm's traffic over a host's link says: the
// flat ring 2(n−1)/n of the vector, the two-level 2(h−1)/h.
func TestPredictMatchesTheBounds(t *testing.T) {
	const count = 16 << 20 / 4
	bytes := float64(4 * count)
	topo := NewTopology([]int{0, 0, 1, 1})
	ring := ChooseAllReduce(4, count, 4)
	if ring.Name != "ring" {
		t.Fatalf("ChooseAllReduce chose %v", ring)
	}
	gotRing := lab.Predict(topo, ring.Schedules(4), 4)
	within(t, "ring", gotRing, time.Duration(1e9*1.5*bytes/lab.Network.Bandwidth), 0.1)
	two := Plan{"two-level", 4, func(r int) Schedule { return TwoLevelAllReduce(r, topo, count, 4) }, 0}
	gotTwo := lab.Predict(topo, two.Schedules(4), 4)
	within(t, "two-level", gotTwo, time.Duration(1e9*1.0*bytes/lab.Network.Bandwidth), 0.1)
}

// TestChooseAllReduceOn: on one host the thresholds' choice, with a
// prediction; across hosts the two-level all-reduce for large vectors and
// a latency-bound algorithm for small ones; with one rank per host no
// two-level.
func TestChooseAllReduceOn(t *testing.T) {
	one := NewTopology([]int{0, 0, 0, 0})
	for _, count := range []int{2, 1 << 14, 1 << 18, 1 << 22} {
		got, want := ChooseAllReduceOn(one, lab, count, 4), ChooseAllReduce(4, count, 4)
		if got.String() != want.String() || got.Predicted <= 0 {
			t.Errorf("one host, %d elements: %v (predicted %v), want %v", count, got, got.Predicted, want)
		}
	}
	twoByTwo := NewTopology([]int{0, 0, 1, 1})
	if p := ChooseAllReduceOn(twoByTwo, lab, 2, 4); p.Name != "recursive-doubling" {
		t.Errorf("2×2, 8 B: %v, want recursive-doubling", p)
	}
	for _, count := range []int{1 << 18, 1 << 22} {
		if p := ChooseAllReduceOn(twoByTwo, lab, count, 4); p.Name != "two-level" {
			t.Errorf("2×2, %d B: %v (predicted %v), want two-level", 4*count, p, p.Predicted)
		}
	}
	fourByOne := NewTopology([]int{0, 1, 2, 3})
	if p := ChooseAllReduceOn(fourByOne, lab, 1<<22, 4); p.Name == "two-level" {
		t.Errorf("4×1: %v, want a flat algorithm", p)
	}
}

// TestPredictPanicsOnMismatch: a receive that no send meets is reported,
// not waited for forever.
func TestPredictPanicsOnMismatch(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	lab.Predict(NewTopology([]int{0, 1}), []Schedule{{{Recvs: []Xfer{{Peer: 1, Len: 1}}}}, nil}, 4)
}

func TestChooseOnPredictsEveryOp(t *testing.T) {
	topo := NewTopology([]int{0, 0, 1, 1})
	for _, p := range []Plan{
		ChooseBroadcastOn(topo, lab, 1, 1<<20, 1),
		ChooseAllGatherOn(topo, lab, []int{1 << 18, 1 << 18, 1 << 18, 1 << 18}, 1),
		ChooseReduceScatterOn(topo, lab, []int{1 << 18, 1 << 18, 1 << 18, 1 << 18}, 4),
		ChooseBarrierOn(topo, lab),
	} {
		if p.Predicted <= lab.Call {
			t.Errorf("%v: predicted %v", p, p.Predicted)
		}
	}
}

// TestPredictSharedCPUs: on hosts with one CPU for two ranks, messages of
// one round queue, so a small all-reduce through the host leaders beats
// recursive doubling, whose every rank crosses the network at once; with
// a CPU per rank, doubling's fewer rounds win.
func TestPredictSharedCPUs(t *testing.T) {
	topo := NewTopology([]int{0, 0, 1, 1})
	if p := ChooseAllReduceOn(topo, lab, 2, 4); p.Name != "recursive-doubling" {
		t.Errorf("a CPU per rank: %v, want recursive-doubling", p)
	}
	one := lab
	one.CPUs = 1
	p := ChooseAllReduceOn(topo, one, 2, 4)
	if p.Name != "leaders" {
		t.Errorf("one CPU a host: %v, want leaders", p)
	}
	rd := one.Predict(topo, Plan{"", 1, func(r int) Schedule { return RecursiveDoublingAllReduce(r, 4, 2) }, 0}.Schedules(4), 4)
	if p.Predicted >= rd {
		t.Errorf("one CPU a host: leaders predicted %v, doubling %v", p.Predicted, rd)
	}
	if bad := (Model{Local: lab.Local, Network: lab.Network, Reduce: 1, CPUs: -1}); bad.Check() == nil {
		t.Error("a model with -1 CPUs passed Check")
	}
}

// TestPredictStackBound: on 2 hosts of 2 ranks and one CPU each, whose
// CPU moves 1.5 GB/s through the network stack, a ring all-gather of 16
// MiB takes its busiest host's CPU work, not the link's time: host 0's
// rank 1 sends its 12 MiB to host 1 and rank 0 receives as much from it
// (each at the stack's rate), and rank 0 sends 12 MiB to rank 1 through
// shared memory. The closed form agrees. A broadcast along a chain, which
// crosses each link one way, stays bound by the link; with no stack rate
// the bound is gone.
func TestPredictStackBound(t *testing.T) {
	m := lab
	m.Network.Bandwidth, m.CPUs, m.Stack = 1.1e9, 1, 1.5e9
	s := Shape{Hosts: 2, PerHost: 2}
	topo := s.Topology()
	const bytes = 16 << 20
	chunk := bytes / 4 / 4 // elements of each rank's share
	gather := Plan{"ring", 1, func(r int) Schedule { return RingAllGather(r, 4, uniform(4, chunk), 1) }, 0}.Schedules(4)
	moved := 3 * float64(bytes/4)
	work := moved/m.Local.Bandwidth + 2*moved/m.Stack
	want := m.Call + time.Duration(work*1e9)
	within(t, "all-gather, CPU-bound", m.Predict(topo, gather, 4), want, 1e-6)
	within(t, "all-gather, CPU-bound, closed form", m.EstimateAlgorithm(s, OpAllGather, "ring", 1, chunk, 4), want, 1e-6)
	free := m
	free.Stack = 0
	if p := free.Predict(topo, gather, 4); p > want*3/4 {
		t.Errorf("no stack rate: predicted %v, want the link's time, well under the CPU's %v", p, want)
	}
	chain := Plan{"chain", 1, func(r int) Schedule { return ChainBroadcast(r, 4, 0, bytes/4, 1) }, 0}.Schedules(4)
	if p, q := m.Predict(topo, chain, 4), free.Predict(topo, chain, 4); p != q {
		t.Errorf("chain broadcast: predicted %v with the stack's rate, %v without: one way across the link, the link bounds it", p, q)
	}
	// The all-reduce of 16 MiB: halving-doubling and the two-level
	// schedule move the same bytes through the same CPUs, so the bound
	// ties them; the two-level schedule, faster with the CPUs free, wins.
	ar := ChooseAllReduceOn(topo, m, bytes/4, 4)
	if ar.Name != "two-level" {
		t.Errorf("all-reduce of 16 MiB, CPU-bound: chose %v, want two-level", ar)
	}
	hd := m.Predict(topo, Plan{"halving-doubling-near", 1, func(r int) Schedule { return HalvingDoublingNearAllReduce(r, 4, bytes/4) }, 0}.Schedules(4), 4)
	within(t, "all-reduce of 16 MiB, halving-doubling against two-level: a tie", hd, ar.Predicted, 1e-6)
	if e := m.Choose(s, OpAllReduce, bytes/4, 4); e.Name != "two-level" {
		t.Errorf("closed forms' choice, CPU-bound: %v, want two-level", e)
	}
	if bad := (Model{Local: lab.Local, Network: lab.Network, Reduce: 1, Stack: -1}); bad.Check() == nil {
		t.Error("a model with a negative stack rate passed Check")
	}
}

// TestChainPieces: on hosts whose CPUs bind (Stack), the chain
// broadcast's pieces keep chainPieceTime on the network, in the policy's
// choice and the closed forms' candidates, while a pin may name any
// count; with the CPUs free, 64 KiB pieces are allowed, and at 1 MiB the
// model picks more of them.
func TestChainPieces(t *testing.T) {
	m := lab
	m.Network.Bandwidth, m.CPUs, m.Stack = 1.1e9, 1, 1.6e9
	free := m
	free.Stack = 0
	s := Shape{Hosts: 2, PerHost: 2}
	topo := s.Topology()
	floor := int(m.Network.Bandwidth * chainPieceTime.Seconds())
	for _, bytes := range []int{1 << 20, 16 << 20} {
		count := bytes / 4
		p := ChooseBroadcastOn(topo, m, 0, count, 4)
		if p.Name != "chain" || p.Segments < 2 || bytes/p.Segments < floor {
			t.Errorf("broadcast of %d B, CPU-bound: %s/%d, want the chain in pieces of at least %d B", bytes, p.Name, p.Segments, floor)
		}
		for _, e := range m.Candidates(s, OpBroadcast, count, 4) {
			if e.Name == "chain" && e.Segments > 1 && bytes/e.Segments < floor {
				t.Errorf("closed forms' candidate chain/%d for %d B: pieces under %d B", e.Segments, bytes, floor)
			}
		}
		if q := ChooseBroadcastOn(topo, free, 0, count, 4); q.Name != "chain" || q.Segments < p.Segments || bytes == 1<<20 && q.Segments == p.Segments {
			t.Errorf("broadcast of %d B, CPUs free: %s/%d, want the chain in more pieces than %d", bytes, q.Name, q.Segments, p.Segments)
		}
	}
	// A pin names the count it wants, floor or not.
	if p, ok := PinBroadcast(topo, m, "chain/16", 0, 1<<18, 4); !ok || p.Segments != 16 {
		t.Errorf("chain/16 pinned, CPU-bound: %v %v", p, ok)
	}
}

// TestPipeSegments: pieces stay on the network for pieceTime and hold at
// least 64 KiB; the count is a power of two up to the most.
func TestPipeSegments(t *testing.T) {
	gbit := Model{Network: Link{Bandwidth: 0.125e9}}
	tenGbit := Model{Network: Link{Bandwidth: 1.25e9}}
	for _, c := range []struct {
		bytes, most int
		m           Model
		want        int
	}{
		{256 << 10, 16, gbit, 4},  // 1 MiB over 4 ranks at 1 Gbit/s: 64 KiB pieces
		{16 << 20, 16, gbit, 16},  // 64 MiB over 4 ranks: as many as allowed
		{4 << 20, 16, tenGbit, 8}, // 10 Gbit/s: 500 KB a piece at least
		{16 << 20, 16, tenGbit, 16},
		{100 << 10, 16, gbit, 1}, // too small to cut
		{16 << 20, 4, gbit, 4},   // the most
	} {
		if got := pipeSegments(c.bytes, c.most, c.m); got != c.want {
			t.Errorf("pipeSegments(%d, %d, %v GB/s) = %d, want %d", c.bytes, c.most, c.m.Network.Bandwidth/1e9, got, c.want)
		}
	}
}

// TestChunkPieces: the ring and two-level all-gather and reduce-scatter
// across hosts send no piece longer than maxChunkPiece, in the policy's
// choice and the closed forms' candidates, at both the link-bound and
// the CPU-bound lab; chunks too long for the most segments to cut that
// short go in the most; a pin may name any count.
func TestChunkPieces(t *testing.T) {
	cpu := lab
	cpu.Network.Bandwidth, cpu.CPUs, cpu.Stack = 1.1e9, 1, 1.6e9
	s := Shape{Hosts: 2, PerHost: 2}
	topo := s.Topology()
	for _, m := range []Model{lab, cpu} {
		for _, chunk := range []int{1 << 20, 4 << 20, 16 << 20} {
			count := chunk / 4
			counts := uniform(4, count)
			for _, p := range []Plan{ChooseAllGatherOn(topo, m, counts, 4), ChooseReduceScatterOn(topo, m, counts, 4)} {
				if chunk/p.Segments > maxChunkPiece {
					t.Errorf("%v, chunks of %d B: %s/%d, pieces of %d B (at most %d)", m, chunk, p.Name, p.Segments, chunk/p.Segments, maxChunkPiece)
				}
			}
			for _, op := range []Op{OpAllGather, OpReduceScatter} {
				for _, e := range m.Candidates(s, op, count, 4) {
					if (e.Name == "ring" || e.Name == "two-level") && chunk/e.Segments > maxChunkPiece {
						t.Errorf("closed forms' candidate %s/%d for chunks of %d B: pieces over %d B", e.Name, e.Segments, chunk, maxChunkPiece)
					}
				}
			}
		}
	}
	if got := chunkSegmentChoices(64 << 20); len(got) != 1 || got[0] != maxRingSegments {
		t.Errorf("chunks of 64 MiB: segments %v, want only the most (%d)", got, maxRingSegments)
	}
	if got := chunkSegmentChoices(256 << 10); got[0] != 1 {
		t.Errorf("chunks of 256 KiB: segments %v, want 1 among them", got)
	}
	if p, ok := PinAllGather(topo, cpu, "two-level/2", uniform(4, 4<<20), 4); !ok || p.Segments != 2 {
		t.Errorf("two-level/2 pinned: %v %v", p, ok)
	}
}

// TestLinkBoundStack: a stack rate measured where the link bounds the
// traffic (both ways at once at the link's rate: 2·link over the CPUs)
// changes no choice of the lab's shapes at 1 Gbit/s, and their
// predictions by 12% at most: the host's bytes across hosts at that rate
// take no longer than the link takes them, and only its copies and
// reductions add to them (at this model's 3 GB/s; a few per cent at the
// rates Init measures on the lab's machines, 5-16 GB/s).
func TestLinkBoundStack(t *testing.T) {
	for _, s := range []Shape{{2, 2}, {4, 1}} {
		m := lab
		if s.PerHost > 1 {
			m.CPUs = 1
		}
		on := m
		cpus := s.PerHost // the CPUs that moved the probes' bytes (dist's stackRate)
		if m.CPUs > 0 {
			cpus = min(cpus, m.CPUs)
		}
		on.Stack = 2 * m.Network.Bandwidth / float64(cpus)
		topo, n := s.Topology(), s.Size()
		for _, bytes := range []int{8, 64 << 10, 1 << 20, 16 << 20, 64 << 20} {
			count := max(1, bytes/4)
			per := max(1, count/n)
			for _, c := range []struct {
				op   string
				a, b Plan
			}{
				{"all_reduce", ChooseAllReduceOn(topo, m, count, 4), ChooseAllReduceOn(topo, on, count, 4)},
				{"broadcast", ChooseBroadcastOn(topo, m, 0, count, 4), ChooseBroadcastOn(topo, on, 0, count, 4)},
				{"all_gather", ChooseAllGatherOn(topo, m, uniform(n, per), 4), ChooseAllGatherOn(topo, on, uniform(n, per), 4)},
				{"reduce_scatter", ChooseReduceScatterOn(topo, m, uniform(n, per), 4), ChooseReduceScatterOn(topo, on, uniform(n, per), 4)},
			} {
				if c.a.Name != c.b.Name || c.a.Segments != c.b.Segments {
					t.Errorf("%v, %s of %d B: %s/%d without a stack rate, %s/%d with the link's", s, c.op, bytes, c.a.Name, c.a.Segments, c.b.Name, c.b.Segments)
				}
				within(t, fmt.Sprintf("%v, %s of %d B with the link's stack rate", s, c.op, bytes), c.b.Predicted, c.a.Predicted, 0.12)
			}
		}
	}
}

// TestPredictFrom: ranks that call apart. Together, the slowest rank's
// time is Predict's. A receiver of a broadcast that calls after its data
// arrived takes only the call; one that calls before waits for it. Every
// start moved by the same amount changes nothing. After the two-level
// barrier (a host's leader leaves before the rank it releases), the
// leaders' broadcast takes one network latency less the skew for the
// released rank, and an 8 B all-reduce takes longer for the leader that
// left first than from a common start (recursive doubling, whose first
// round pairs it with the rank it released), and the two-level one,
// whose slowest rank is the one released, no shorter.
func TestPredictFrom(t *testing.T) {
	topo := NewTopology([]int{0, 0, 1, 1})
	n := topo.Size()
	scheds := func(f func(r int) Schedule) []Schedule {
		out := make([]Schedule, n)
		for r := range out {
			out[r] = f(r)
		}
		return out
	}
	bcast := scheds(func(r int) Schedule { return LeaderBroadcast(r, topo, 0, 2) })
	if got, want := slices.Max(lab.PredictFrom(topo, bcast, 4, nil)), lab.Predict(topo, bcast, 4); got != want {
		t.Errorf("together: slowest %v, Predict %v", got, want)
	}
	// Rank 2 (host 1's leader) calls 1 ms late, after its data came.
	late := []float64{0, 0, 1e-3, 0}
	got := lab.PredictFrom(topo, bcast, 4, late)
	if got[2] > lab.Call+time.Microsecond {
		t.Errorf("a receiver that calls after its data came: %v, want about the call's %v", got[2], lab.Call)
	}
	// Rank 3, which rank 2 forwards to, waits for rank 2's start.
	if got[3] < time.Millisecond {
		t.Errorf("rank 3, whose data leaves rank 2 after rank 2 calls 1 ms late: %v", got[3])
	}
	shifted := []float64{5e-3, 5e-3, 6e-3, 5e-3}
	if again := lab.PredictFrom(topo, bcast, 4, shifted); !slices.Equal(again, got) {
		t.Errorf("every start 5 ms later: %v, want %v", again, got)
	}

	// A vector that came before its rank called is reduced after.
	pair := NewTopology([]int{0, 1})
	const count = 1 << 20
	reduceInto1 := []Schedule{
		{{Sends: []Xfer{{Peer: 1, Len: count}}}},
		{{Recvs: []Xfer{{Peer: 0, Len: count, Reduce: true}}}},
	}
	red := time.Duration(1e9 * 4 * count / lab.Reduce)
	if got := lab.PredictFrom(pair, reduceInto1, 4, []float64{0, 1})[1]; got < lab.Call+red {
		t.Errorf("a rank that calls after its peer's 4 MiB came: %v, want at least the call and the reduction, %v", got, lab.Call+red)
	}

	barrier := scheds(func(r int) Schedule { return TwoLevelBarrier(r, topo) })
	left := lab.PredictFrom(topo, barrier, 1, nil)
	start := make([]float64, n)
	for r, d := range left {
		start[r] = d.Seconds()
	}
	skew := left[1] - left[0]
	if skew <= 0 || left[3]-left[2] != skew {
		t.Fatalf("two-level barrier: ranks leave at %v; want each host's leader (0, 2) first, its other rank a hop later", left)
	}
	after := slices.Max(lab.PredictFrom(topo, bcast, 4, start))
	together := lab.Predict(topo, bcast, 4)
	within(t, "leaders' broadcast after the barrier", after, together-skew, 0.05)
	rd := scheds(func(r int) Schedule { return RecursiveDoublingAllReduce(r, n, 2) })
	if a, c := slices.Max(lab.PredictFrom(topo, rd, 4, start)), lab.Predict(topo, rd, 4); a <= c {
		t.Errorf("8 B recursive-doubling all-reduce: %v after the barrier, %v together; want longer after it", a, c)
	}
	two := scheds(func(r int) Schedule { return TwoLevelAllReduce(r, topo, 2, 1) })
	if a, c := slices.Max(lab.PredictFrom(topo, two, 4, start)), lab.Predict(topo, two, 4); a < c {
		t.Errorf("8 B two-level all-reduce: %v after the barrier, %v together; want no shorter", a, c)
	}
}
