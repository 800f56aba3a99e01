package algo

import (
	"flag"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var (
	sizes    = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 17}
	segments = []int{1, 2, 3, 5}
)

// countsFor is the element counts every collective is tried with.
func countsFor(size int) []int {
	cs := []int{0, 1, 2, 3, max(size-1, 0), size, size + 1, 7, 100, 1001}
	slices.Sort(cs)
	return slices.Compact(cs)
}

// layoutsFor is the per-rank chunk counts tried for the gathers, scatters
// and reduce-scatters: even, uneven, zeros in various places.
func layoutsFor(size int) [][]int {
	gen := func(f func(r int) int) []int {
		c := make([]int, size)
		for r := range c {
			c[r] = f(r)
		}
		return c
	}
	return [][]int{
		gen(func(int) int { return 0 }),
		gen(func(int) int { return 1 }),
		gen(func(int) int { return 7 }),
		gen(func(r int) int { return r % 3 }),
		gen(func(r int) int { return (r * 7) % 5 }),
		gen(func(r int) int { return 30 + r }),
		gen(func(r int) int { return b2i(r == size-1) * 5 }),
		gen(func(r int) int { return b2i(r == 0) * 9 }),
		gen(func(r int) int { return b2i(r%2 == 1) * (r + 2) }),
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func isPow2(n int) bool { return n&(n-1) == 0 }

func log2(n int) int { return bits.Len(uint(n)) - 1 }

func TestChunks(t *testing.T) {
	for count := range 40 {
		for parts := 1; parts < 12; parts++ {
			offs, lens := Chunks(count, parts)
			off := 0
			for i := range parts {
				want := count / parts
				if i < count%parts {
					want++
				}
				if offs[i] != off || lens[i] != want {
					t.Fatalf("Chunks(%d, %d): chunk %d = [%d +%d], want [%d +%d]", count, parts, i, offs[i], lens[i], off, want)
				}
				off += want
			}
		}
	}
	if got := Offsets([]int{3, 0, 2}); !slices.Equal(got, []int{0, 3, 3, 5}) {
		t.Fatalf("Offsets = %v", got)
	}
	if got := Offsets(nil); !slices.Equal(got, []int{0}) {
		t.Fatalf("Offsets(nil) = %v", got)
	}
}

func TestAllReduce(t *testing.T) {
	type algo struct {
		name  string
		seg   int
		sched func(rank, size, count int) Schedule
	}
	algos := []algo{
		{"RecursiveDoublingAllReduce", 1, RecursiveDoublingAllReduce},
		{"HalvingDoublingAllReduce", 1, HalvingDoublingAllReduce},
		{"HalvingDoublingNearAllReduce", 1, HalvingDoublingNearAllReduce},
	}
	for _, seg := range segments {
		algos = append(algos, algo{"RingAllReduce", seg, func(rank, size, count int) Schedule {
			return RingAllReduce(rank, size, count, seg)
		}})
	}
	for _, a := range algos {
		for _, size := range sizes {
			for _, count := range countsFor(size) {
				for _, op := range ops {
					desc := fmt.Sprintf("%s(size=%d count=%d segments=%d)", a.name, size, count, a.seg)
					scheds, res := checkAllReduce(t, desc, size, count, op, func(r int) Schedule { return a.sched(r, size, count) })
					checkAllReduceShape(t, desc, a.name, size, count, a.seg, scheds, res)
				}
			}
		}
	}
}

// checkAllReduceShape checks the number of rounds and the traffic each
// all-reduce promises.
func checkAllReduceShape(t *testing.T, desc, name string, size, count, seg int, scheds []Schedule, res simResult) {
	t.Helper()
	if size == 1 || count == 0 {
		if res.depth != 0 {
			t.Fatalf("%s: %d rounds, want none", desc, res.depth)
		}
		return
	}
	p := floorPow2(size)
	depth := -1
	switch name {
	case "RecursiveDoublingAllReduce":
		depth = log2(p)
		if !isPow2(size) {
			depth += 2
		}
		if !isPow2(size) && depth != ceilLog2(size)+1 {
			t.Fatalf("%s: bad arithmetic", desc)
		}
		for r, s := range scheds {
			if isPow2(size) && len(s) != log2(size) {
				t.Fatalf("%s rank %d: %d rounds, want log2(size) = %d\n%s", desc, r, len(s), log2(size), s)
			}
		}
	case "HalvingDoublingAllReduce", "HalvingDoublingNearAllReduce":
		if count >= p {
			depth = 2 * log2(p)
			if !isPow2(size) {
				depth += 2
			}
		}
		for r := range p {
			// A core rank sends its halves: 2·(p-1)/p·count give or take
			// the rounding, plus count to its extra partner.
			want := 2 * (p - 1) * count / p
			if r+p < size {
				want += count
			}
			if d := res.sent[r] - want; d < -2*log2(p) || d > 2*log2(p) {
				t.Fatalf("%s rank %d: sent %d elements, want about %d\n%s", desc, r, res.sent[r], want, scheds[r])
			}
		}
	case "RingAllReduce":
		if count >= size*seg {
			depth = 2 * (size - 1) * seg
			for r, s := range scheds {
				if len(s) != depth {
					t.Fatalf("%s rank %d: %d rounds, want 2(size-1)segments = %d\n%s", desc, r, len(s), depth, s)
				}
			}
		}
		for r := range size {
			// 2·(size-1)/size·count within rounding.
			if d := res.sent[r]*size - 2*(size-1)*count; d < -2*size || d > 2*size {
				t.Fatalf("%s rank %d: sent %d elements, want 2(size-1)/size·count = %.1f\n%s",
					desc, r, res.sent[r], float64(2*(size-1)*count)/float64(size), scheds[r])
			}
		}
	}
	if depth >= 0 && res.depth != depth {
		t.Fatalf("%s: critical path of %d rounds, want %d", desc, res.depth, depth)
	}
	if depth < 0 && res.depth > 2*(size-1)*seg+2 {
		t.Fatalf("%s: critical path of %d rounds", desc, res.depth)
	}
}

func TestReduceScatter(t *testing.T) {
	for _, size := range sizes {
		for _, counts := range layoutsFor(size) {
			for _, op := range ops {
				desc := fmt.Sprintf("RingReduceScatter(size=%d counts=%v)", size, counts)
				scheds, res := checkReduceScatter(t, desc, size, counts, op, func(r int) Schedule { return RingReduceScatter(r, size, counts, 1) })
				total := Offsets(counts)[size]
				for r := range size {
					if want := total - counts[r]; size > 1 && res.sent[r] != want {
						t.Fatalf("%s rank %d: sent %d, want %d\n%s", desc, r, res.sent[r], want, scheds[r])
					}
					if len(scheds[r]) > size-1 {
						t.Fatalf("%s rank %d: %d rounds, want at most size-1\n%s", desc, r, len(scheds[r]), scheds[r])
					}
				}
			}
		}
	}
}

func TestAllGather(t *testing.T) {
	for _, size := range sizes {
		for _, counts := range layoutsFor(size) {
			desc := fmt.Sprintf("RingAllGather(size=%d counts=%v)", size, counts)
			scheds, res := checkAllGather(t, desc, size, counts, func(r int) Schedule { return RingAllGather(r, size, counts, 1) })
			for r := range size {
				if want := Offsets(counts)[size] - counts[mod(r+1, size)]; size > 1 && res.sent[r] != want {
					t.Fatalf("%s rank %d: sent %d, want %d\n%s", desc, r, res.sent[r], want, scheds[r])
				}
			}

			desc = fmt.Sprintf("RecursiveDoublingAllGather(size=%d counts=%v)", size, counts)
			scheds, res = checkAllGather(t, desc, size, counts, func(r int) Schedule { return RecursiveDoublingAllGather(r, size, counts) })
			uniform := !slices.ContainsFunc(counts, func(c int) bool { return c != counts[0] })
			for r, s := range scheds {
				if len(s) > ceilLog2(size) || uniform && counts[0] > 0 && len(s) != ceilLog2(size) {
					t.Fatalf("%s rank %d: %d rounds, want ceil(log2 size) = %d\n%s", desc, r, len(s), ceilLog2(size), s)
				}
				if uniform && res.sent[r] != (size-1)*counts[0] {
					t.Fatalf("%s rank %d: sent %d, want (size-1)·count = %d\n%s", desc, r, res.sent[r], (size-1)*counts[0], s)
				}
				var contributors uint64 // the ranks whose chunks r must receive
				for q, c := range counts {
					if c > 0 {
						contributors |= 1 << q
					}
				}
				checkKnows(t, desc, r, res, contributors)
				if size&(size-1) != 0 {
					continue
				}
				// A power of two: in each round one peer, rank XOR a
				// power of two, farther each round (rounds with nothing
				// to move are left out), at most one transfer each way.
				last := 0
				for k, rd := range s {
					xs := append(slices.Clone(rd.Sends), rd.Recvs...)
					d := xs[0].Peer ^ r
					for _, x := range xs {
						if x.Peer != xs[0].Peer || d&(d-1) != 0 || d <= last {
							t.Fatalf("%s rank %d round %d: a transfer with %d after distance %d: want one peer, rank XOR a power of two beyond it\n%s", desc, r, k, x.Peer, last, s)
						}
					}
					last = d
					if len(rd.Sends) > 1 || len(rd.Recvs) > 1 {
						t.Fatalf("%s rank %d round %d: %d sends and %d receives, want one each at most\n%s", desc, r, k, len(rd.Sends), len(rd.Recvs), s)
					}
				}
			}
		}
	}
}

func TestBroadcast(t *testing.T) {
	for _, size := range sizes {
		for root := range size {
			for _, count := range countsFor(size) {
				desc := fmt.Sprintf("BinomialBroadcast(size=%d root=%d count=%d)", size, root, count)
				scheds, res := checkBroadcast(t, desc, size, root, count, func(r int) Schedule { return BinomialBroadcast(r, size, root, count) })
				if count > 0 && (len(scheds[root]) != ceilLog2(size) || res.depth != ceilLog2(size)) {
					t.Fatalf("%s: root has %d rounds, critical path %d, want ceil(log2 size) = %d", desc, len(scheds[root]), res.depth, ceilLog2(size))
				}
				for r := range size {
					if want := count * b2i(r != root); res.sent[r] > count*ceilLog2(size) || count > 0 && res.sent[r]%count != 0 || want > 0 && len(scheds[r]) == 0 {
						t.Fatalf("%s rank %d: sent %d\n%s", desc, r, res.sent[r], scheds[r])
					}
				}
				for _, seg := range segments {
					desc := fmt.Sprintf("ChainBroadcast(size=%d root=%d count=%d segments=%d)", size, root, count, seg)
					scheds, res := checkBroadcast(t, desc, size, root, count, func(r int) Schedule { return ChainBroadcast(r, size, root, count, seg) })
					if size > 1 && count >= seg && res.depth != size+seg-2 {
						t.Fatalf("%s: critical path %d rounds, want size+segments-2 = %d", desc, res.depth, size+seg-2)
					}
					for r := range size {
						last := mod(root-1, size)
						if want := count * b2i(r != last); size > 1 && res.sent[r] != want {
							t.Fatalf("%s rank %d: sent %d, want %d\n%s", desc, r, res.sent[r], want, scheds[r])
						}
					}
				}
			}
		}
	}
}

func TestReduce(t *testing.T) {
	for _, size := range sizes {
		for root := range size {
			for _, count := range countsFor(size) {
				for _, op := range ops {
					desc := fmt.Sprintf("BinomialReduce(size=%d root=%d count=%d)", size, root, count)
					scheds, res := checkReduce(t, desc, size, root, count, op, func(r int) Schedule { return BinomialReduce(r, size, root, count) })
					if count > 0 && (len(scheds[root]) != ceilLog2(size) || res.depth != ceilLog2(size)) {
						t.Fatalf("%s: root has %d rounds, critical path %d, want ceil(log2 size) = %d", desc, len(scheds[root]), res.depth, ceilLog2(size))
					}
					if count > 0 {
						checkKnows(t, desc, root, res, allKnown(size))
					}
					for r := range size {
						if want := count * b2i(r != root); res.sent[r] != want {
							t.Fatalf("%s rank %d: sent %d, want %d\n%s", desc, r, res.sent[r], want, scheds[r])
						}
					}
				}
			}
		}
	}
}

func TestGatherScatter(t *testing.T) {
	for _, size := range sizes {
		for root := range size {
			for _, counts := range layoutsFor(size) {
				desc := fmt.Sprintf("LinearGather(size=%d root=%d counts=%v)", size, root, counts)
				scheds, _ := checkGather(t, desc, size, root, counts, func(r int) Schedule { return LinearGather(r, size, root, counts) })
				for r, s := range scheds {
					if len(s) > 1 {
						t.Fatalf("%s rank %d: %d rounds, want 1\n%s", desc, r, len(s), s)
					}
				}
				desc = fmt.Sprintf("LinearScatter(size=%d root=%d counts=%v)", size, root, counts)
				scheds, _ = checkScatter(t, desc, size, root, counts, func(r int) Schedule { return LinearScatter(r, size, root, counts) })
				for r, s := range scheds {
					if len(s) > 1 {
						t.Fatalf("%s rank %d: %d rounds, want 1\n%s", desc, r, len(s), s)
					}
				}
			}
		}
	}
}

func TestBarrier(t *testing.T) {
	for size := 1; size <= 40; size++ {
		desc := fmt.Sprintf("DisseminationBarrier(size=%d)", size)
		bufs := make([][]float64, size)
		scheds, res := run(t, desc, size, 0, func(r int) Schedule { return DisseminationBarrier(r, size) }, bufs, opSum)
		for r, s := range scheds {
			if len(s) != ceilLog2(size) {
				t.Fatalf("%s rank %d: %d rounds, want %d\n%s", desc, r, len(s), ceilLog2(size), s)
			}
			checkKnows(t, desc, r, res, allKnown(size))
			if size&(size-1) != 0 {
				continue
			}
			// A power of two: pairs, each round's message both ways.
			for k, rd := range s {
				if rd.Sends[0].Peer != rd.Recvs[0].Peer {
					t.Fatalf("%s rank %d round %d: sends to %d, receives from %d: want one peer\n%s", desc, r, k, rd.Sends[0].Peer, rd.Recvs[0].Peer, s)
				}
			}
		}
	}
}

func TestPairwiseAllToAll(t *testing.T) {
	for size := 1; size <= 40; size++ {
		orders := make([][][2]int, size)
		for r := range size {
			orders[r] = PairwiseAllToAll(r, size)
			if len(orders[r]) != size-1 {
				t.Fatalf("PairwiseAllToAll(%d, %d): %d steps, want %d", r, size, len(orders[r]), size-1)
			}
		}
		for a := range size {
			seenTo, seenFrom := map[int]bool{}, map[int]bool{}
			for k, p := range orders[a] {
				to, from := p[0], p[1]
				if to == a || from == a || seenTo[to] || seenFrom[from] {
					t.Fatalf("PairwiseAllToAll(%d, %d) = %v: step %d repeats or is a self-exchange", a, size, orders[a], k)
				}
				seenTo[to], seenFrom[from] = true, true
				if orders[to][k][1] != a {
					t.Fatalf("PairwiseAllToAll size %d: rank %d sends to %d at step %d, which then receives from %d", size, a, to, k, orders[to][k][1])
				}
			}
		}
	}
}

func TestValidate(t *testing.T) {
	x := func(peer, off, n int) Xfer { return Xfer{Peer: peer, Off: off, Len: n} }
	bad := []struct {
		name string
		s    Schedule
		size int
	}{
		{"peer out of range", Schedule{{Sends: []Xfer{x(4, 0, 1)}}}, 4},
		{"negative peer", Schedule{{Recvs: []Xfer{x(-1, 0, 1)}}}, 4},
		{"self", Schedule{{Sends: []Xfer{x(0, 0, 1)}}}, 4},
		{"past the end", Schedule{{Sends: []Xfer{x(1, 8, 3)}}}, 4},
		{"negative offset", Schedule{{Recvs: []Xfer{x(1, -1, 1)}}}, 4},
		{"negative length", Schedule{{Recvs: []Xfer{x(1, 2, -1)}}}, 4},
		{"overlapping receives", Schedule{{Recvs: []Xfer{x(1, 0, 4), x(2, 3, 2)}}}, 4},
		{"send overlaps receive", Schedule{{Sends: []Xfer{x(1, 0, 4)}, Recvs: []Xfer{x(2, 3, 2)}}}, 4},
		{"reducing send", Schedule{{Sends: []Xfer{{Peer: 1, Len: 1, Reduce: true}}}}, 4},
		{"size one not empty", Schedule{{}}, 1},
		{"snapshot receives overlap", Schedule{{Snapshot: true, Recvs: []Xfer{x(1, 0, 4), x(2, 3, 2)}}}, 4},
		{"joined first", Schedule{{Sends: []Xfer{{Peer: 1, Len: 1, Joined: true}}}}, 4},
		{"joined to another peer", Schedule{{Recvs: []Xfer{x(1, 0, 1), {Peer: 2, Off: 2, Len: 1, Joined: true}}}}, 4},
		{"joined after an empty one", Schedule{{Sends: []Xfer{x(1, 0, 0), {Peer: 1, Off: 2, Len: 1, Joined: true}}}}, 4},
		{"joined and empty", Schedule{{Sends: []Xfer{x(1, 0, 1), {Peer: 1, Off: 2, Joined: true}}}}, 4},
	}
	for _, c := range bad {
		if err := c.s.Validate(0, c.size, 10); err == nil {
			t.Errorf("%s: Validate accepted\n%s", c.name, c.s)
		}
	}
	good := []Schedule{
		nil,
		{{Sends: []Xfer{x(1, 0, 5)}, Recvs: []Xfer{x(1, 5, 5)}}},
		{{Sends: []Xfer{x(1, 0, 5)}, Recvs: []Xfer{x(2, 5, 0), x(3, 5, 0), x(1, 0, 0)}}},
		{{Snapshot: true, Sends: []Xfer{x(1, 0, 10)}, Recvs: []Xfer{{Peer: 1, Len: 10, Reduce: true}}}},
		{{Sends: []Xfer{x(1, 0, 2), {Peer: 1, Off: 4, Len: 2, Joined: true}}, Recvs: []Xfer{x(2, 2, 2), {Peer: 2, Off: 6, Len: 1, Joined: true}}}},
	}
	for _, s := range good {
		if err := s.Validate(0, 4, 10); err != nil {
			t.Errorf("Validate: %v\n%s", err, s)
		}
	}
	if err := Schedule(nil).Validate(4, 4, 0); err == nil {
		t.Errorf("Validate accepted rank 4 of 4")
	}
}

func TestPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"rank":     func() { RingAllReduce(3, 3, 1, 1) },
		"segments": func() { RingAllReduce(0, 3, 1, 0) },
		"count":    func() { BinomialBroadcast(0, 3, 0, -1) },
		"root":     func() { BinomialReduce(0, 3, 3, 1) },
		"counts":   func() { RingAllGather(0, 3, []int{1, 2}, 1) },
		"elemSize": func() { ChooseAllReduce(3, 1, 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// tinyPolicy has thresholds of a few elements, so that the Choose logic
// takes every branch on buffers small enough to simulate.
var tinyPolicy = policy{
	smallAllReduce: 8 * 8, mediumAllReduce: 64 * 8,
	smallBroadcast: 16 * 8, smallAllGather: 32 * 8,
	maxPiece: 16 * 8, maxRingSegments: 3, maxChainSegments: 5,
}

func TestChooseSimulated(t *testing.T) {
	seen := map[string]bool{}
	for _, size := range sizes {
		counts := append(countsFor(size), 8, 9, 64, 65, 300, 2000)
		slices.Sort(counts)
		for _, count := range slices.Compact(counts) {
			p := tinyPolicy.allReduce(size, count, 8)
			seen["allreduce "+p.Name] = true
			checkAllReduce(t, fmt.Sprintf("tiny ChooseAllReduce(size=%d count=%d)=%v", size, count, p), size, count, opSum, p.Schedule)
			root := count % size
			p = tinyPolicy.broadcast(size, root, count, 8)
			seen["broadcast "+p.Name] = true
			checkBroadcast(t, fmt.Sprintf("tiny ChooseBroadcast(size=%d root=%d count=%d)=%v", size, root, count, p), size, root, count, p.Schedule)
		}
		for _, counts := range layoutsFor(size) {
			p := tinyPolicy.allGather(size, counts, 8)
			seen["allgather "+p.Name] = true
			checkAllGather(t, fmt.Sprintf("tiny ChooseAllGather(size=%d counts=%v)=%v", size, counts, p), size, counts, p.Schedule)
			if p.Segments > 1 {
				seen["allgather segmented"] = true
			}
			p = tinyPolicy.reduceScatter(size, counts, 8)
			seen["reducescatter "+p.Name] = true
			checkReduceScatter(t, fmt.Sprintf("tiny ChooseReduceScatter(size=%d counts=%v)=%v", size, counts, p), size, counts, opSum, p.Schedule)
			if p.Segments > 1 {
				seen["reducescatter segmented"] = true
			}
		}
	}
	for _, want := range []string{"allreduce recursive-doubling", "allreduce halving-doubling", "allreduce ring",
		"broadcast binomial", "broadcast chain", "allgather recursive-doubling", "allgather ring",
		"allgather segmented", "reducescatter segmented", "reducescatter halving-doubling", "reducescatter ring"} {
		if !seen[want] {
			t.Errorf("the tiny policy never chose %s", want)
		}
	}
}

// TestChooseDefault checks that the default policy's schedules are valid
// and that it picks by the documented thresholds, for counts up to 64 MiB.
func TestChooseDefault(t *testing.T) {
	for _, size := range sizes {
		for _, elem := range []int{1, 2, 4, 8} {
			for _, bytes := range []int{0, 1, 4096, 64 << 10, 64<<10 + 8, 256 << 10, 256<<10 + 8, 1 << 20, 1<<20 + 8, 5 << 20, 64 << 20} {
				count := bytes / elem
				p := ChooseAllReduce(size, count, elem)
				want := "ring"
				switch {
				case count*elem <= 64<<10:
					want = "recursive-doubling"
				case count*elem <= 1<<20:
					want = "halving-doubling"
				}
				desc := fmt.Sprintf("ChooseAllReduce(size=%d count=%d elem=%d)=%v", size, count, elem, p)
				if p.Name != want || p.Segments < 1 || p.Segments > maxRingSegments {
					t.Fatalf("%s, want %s", desc, want)
				}
				if piece := (count + size - 1) / size * elem / p.Segments; p.Segments < maxRingSegments && piece > maxPieceBytes {
					t.Fatalf("%s: pieces of %d bytes", desc, piece)
				}
				validateAll(t, desc, size, count, p)

				p = ChooseBroadcast(size, size-1, count, elem)
				desc = fmt.Sprintf("ChooseBroadcast(size=%d count=%d elem=%d)=%v", size, count, elem, p)
				if want := map[bool]string{true: "binomial", false: "chain"}[count*elem <= 256<<10]; p.Name != want {
					t.Fatalf("%s, want %s", desc, want)
				}
				validateAll(t, desc, size, count, p)

				counts := make([]int, size)
				counts[0] = count
				p = ChooseAllGather(size, counts, elem)
				desc = fmt.Sprintf("ChooseAllGather(size=%d counts=%v elem=%d)=%v", size, counts, elem, p)
				if want := map[bool]string{true: "recursive-doubling", false: "ring"}[count*elem <= 64<<10 || size > 64 && count*elem <= 4<<10]; p.Name != want {
					t.Fatalf("%s, want %s", desc, want)
				}
				validateAll(t, desc, size, count, p)

				p = ChooseReduceScatter(size, counts, elem)
				desc = fmt.Sprintf("ChooseReduceScatter(size=%d counts=%v elem=%d)=%v", size, counts, elem, p)
				if size > 8 && count*elem <= 64<<10 {
					if p.Name != "halving-doubling" {
						t.Fatalf("%s, want halving-doubling (latency-bound)", desc)
					}
					validateAll(t, desc, size, count, p)
					continue
				}
				if piece := count * elem / p.Segments; p.Name != "ring" || p.Segments < 1 || p.Segments > maxRingSegments ||
					p.Segments < maxRingSegments && piece > maxPieceBytes {
					t.Fatalf("%s: pieces of %d bytes", desc, piece)
				}
				validateAll(t, desc, size, count, p)
				for r := range size {
					ro := Offsets(counts)[(r+size-1)%size]
					for _, round := range p.Schedule(r) {
						for _, x := range round.Recvs {
							if size > 1 && x.Len > 0 && x.Off < ro+counts[(r+size-1)%size] && ro < x.Off+x.Len {
								t.Fatalf("%s rank %d receives into chunk %d, which it must only send", desc, r, (r+size-1)%size)
							}
						}
					}
				}
			}
		}
	}
}

func validateAll(t *testing.T, desc string, size, bufLen int, p Plan) {
	t.Helper()
	for r := range size {
		if s := p.Schedule(r); s.Validate(r, size, bufLen) != nil {
			t.Fatalf("%s rank %d: %v", desc, r, s.Validate(r, size, bufLen))
		}
	}
}

var seedFlag = flag.Uint64("algo.seed", 0, "seed for TestRandom (0: from the clock)")

// TestRandom runs random collectives on random sizes and counts.
func TestRandom(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -algo.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	iters := 300
	if testing.Short() {
		iters = 50
	}
	for i := range iters {
		size := 1 + rng.IntN(40)
		count := rng.IntN(2000)
		if rng.IntN(3) == 0 {
			count = rng.IntN(2 * size)
		}
		root := rng.IntN(size)
		seg := 1 + rng.IntN(8)
		counts := make([]int, size)
		for r := range counts {
			if rng.IntN(4) > 0 {
				counts[r] = rng.IntN(count/size + 2)
			}
		}
		op := ops[rng.IntN(2)]
		pre := fmt.Sprintf("seed=%d iteration %d: ", seed, i)
		switch k := rng.IntN(11); k {
		case 0:
			checkAllReduce(t, pre+fmt.Sprintf("RingAllReduce(size=%d count=%d segments=%d)", size, count, seg), size, count, op,
				func(r int) Schedule { return RingAllReduce(r, size, count, seg) })
		case 1:
			checkAllReduce(t, pre+fmt.Sprintf("RecursiveDoublingAllReduce(size=%d count=%d)", size, count), size, count, op,
				func(r int) Schedule { return RecursiveDoublingAllReduce(r, size, count) })
		case 2:
			checkAllReduce(t, pre+fmt.Sprintf("HalvingDoublingAllReduce(size=%d count=%d)", size, count), size, count, op,
				func(r int) Schedule { return HalvingDoublingAllReduce(r, size, count) })
		case 3:
			checkReduceScatter(t, pre+fmt.Sprintf("RingReduceScatter(size=%d counts=%v)", size, counts), size, counts, op,
				func(r int) Schedule { return RingReduceScatter(r, size, counts, 1) })
		case 4:
			checkAllGather(t, pre+fmt.Sprintf("RingAllGather(size=%d counts=%v)", size, counts), size, counts,
				func(r int) Schedule { return RingAllGather(r, size, counts, 1) })
		case 5:
			checkAllGather(t, pre+fmt.Sprintf("RecursiveDoublingAllGather(size=%d counts=%v)", size, counts), size, counts,
				func(r int) Schedule { return RecursiveDoublingAllGather(r, size, counts) })
		case 6:
			checkBroadcast(t, pre+fmt.Sprintf("BinomialBroadcast(size=%d root=%d count=%d)", size, root, count), size, root, count,
				func(r int) Schedule { return BinomialBroadcast(r, size, root, count) })
		case 7:
			checkBroadcast(t, pre+fmt.Sprintf("ChainBroadcast(size=%d root=%d count=%d segments=%d)", size, root, count, seg), size, root, count,
				func(r int) Schedule { return ChainBroadcast(r, size, root, count, seg) })
		case 8:
			checkReduce(t, pre+fmt.Sprintf("BinomialReduce(size=%d root=%d count=%d)", size, root, count), size, root, count, op,
				func(r int) Schedule { return BinomialReduce(r, size, root, count) })
		case 9:
			checkGather(t, pre+fmt.Sprintf("LinearGather(size=%d root=%d counts=%v)", size, root, counts), size, root, counts,
				func(r int) Schedule { return LinearGather(r, size, root, counts) })
		case 10:
			checkScatter(t, pre+fmt.Sprintf("LinearScatter(size=%d root=%d counts=%v)", size, root, counts), size, root, counts,
				func(r int) Schedule { return LinearScatter(r, size, root, counts) })
		}
	}
}

// TestSimulator checks that the simulator itself catches broken schedules.
func TestSimulator(t *testing.T) {
	x := func(peer, off, n int) Xfer { return Xfer{Peer: peer, Off: off, Len: n} }
	for name, scheds := range map[string][]Schedule{
		"deadlock": {
			{{Recvs: []Xfer{x(1, 0, 1)}}, {Sends: []Xfer{x(1, 0, 1)}}},
			{{Recvs: []Xfer{x(0, 0, 1)}}, {Sends: []Xfer{x(0, 0, 1)}}},
		},
		"length mismatch": {
			{{Sends: []Xfer{x(1, 0, 2)}}},
			{{Recvs: []Xfer{x(0, 0, 1)}}},
		},
		"never received": {
			{{Sends: []Xfer{x(1, 0, 1)}}, {Sends: []Xfer{x(1, 0, 1)}}},
			{{Recvs: []Xfer{x(0, 0, 1)}}},
		},
	} {
		bufs := [][]float64{{1, 2}, {3, 4}}
		if _, err := simulate(scheds, bufs, opSum); err == nil {
			t.Errorf("%s: simulate found nothing wrong", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// A snapshot round sends what the buffer held when it began.
	s := Schedule{{Snapshot: true, Sends: []Xfer{x(1, 0, 1)}, Recvs: []Xfer{{Peer: 1, Len: 1, Reduce: true}}}}
	t0 := Schedule{{Snapshot: true, Sends: []Xfer{x(0, 0, 1)}, Recvs: []Xfer{{Peer: 0, Len: 1, Reduce: true}}}}
	bufs := [][]float64{{1}, {10}}
	if _, err := simulate([]Schedule{s, t0}, bufs, opSum); err != nil || bufs[0][0] != 11 || bufs[1][0] != 11 {
		t.Errorf("snapshot exchange: %v, buffers %v", err, bufs)
	}
}

// TestChooseAllGatherManyRanks: on many ranks with small chunks, the
// all-gather is recursive doubling even when the output is large (the
// ring would take W-1 steps of latency alone), and its schedules are
// valid (the simulator stops at 64 ranks; dist's TestScale checks what
// such all-gathers gather).
func TestChooseAllGatherManyRanks(t *testing.T) {
	for _, size := range []int{65, 128, 200} {
		counts := make([]int, size)
		for r := range counts {
			counts[r] = 100 + r%3 // 800 bytes of float64 a chunk, the output over 64 KiB
		}
		p := ChooseAllGather(size, counts, 8)
		if p.Name != "recursive-doubling" {
			t.Fatalf("ChooseAllGather(size=%d, chunks of ~800 bytes) = %v, want recursive-doubling", size, p)
		}
		total := 0
		for _, c := range counts {
			total += c
		}
		validateAll(t, fmt.Sprintf("ChooseAllGather(size=%d)=%v", size, p), size, total, p)
	}
}
