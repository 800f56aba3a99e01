package algo

import (
	"fmt"
	"slices"
)

// Topology is where a group's ranks live: Hosts[h] lists the ranks on host
// h. Every rank of the group is on exactly one host; a host lists its ranks
// in increasing order, and the hosts are ordered by their first rank, so
// that every rank that builds a Topology from the same facts builds the
// same one (NewTopology does that).
type Topology struct {
	Hosts [][]int
}

// NewTopology groups the ranks 0..len(hostOf)-1 by host: hostOf[r] is any
// label of rank r's host (a host id, a hostname hash), equal for ranks on
// one host and different otherwise.
func NewTopology[K comparable](hostOf []K) Topology {
	index := map[K]int{}
	var t Topology
	for r, k := range hostOf {
		h, ok := index[k]
		if !ok {
			h = len(t.Hosts)
			index[k] = h
			t.Hosts = append(t.Hosts, nil)
		}
		t.Hosts[h] = append(t.Hosts[h], r)
	}
	return t
}

// Size is the number of ranks.
func (t Topology) Size() int {
	n := 0
	for _, h := range t.Hosts {
		n += len(h)
	}
	return n
}

// Uniform reports whether every host has the same number of ranks, and how
// many: the two-level schedules need it.
func (t Topology) Uniform() (perHost int, ok bool) {
	if len(t.Hosts) == 0 {
		return 0, false
	}
	perHost = len(t.Hosts[0])
	for _, h := range t.Hosts {
		if len(h) != perHost {
			return 0, false
		}
	}
	return perHost, true
}

// Check returns an error unless t places each of the ranks 0..size-1 on
// exactly one host, lists each host's ranks in increasing order, and
// orders the hosts by their first rank.
func (t Topology) Check(size int) error {
	seen := make([]bool, size)
	for h, ranks := range t.Hosts {
		if len(ranks) == 0 {
			return fmt.Errorf("algo: topology: host %d has no ranks", h)
		}
		if !slices.IsSorted(ranks) {
			return fmt.Errorf("algo: topology: host %d lists its ranks %v out of order", h, ranks)
		}
		if h > 0 && t.Hosts[h-1][0] > ranks[0] {
			return fmt.Errorf("algo: topology: host %d (first rank %d) comes after host %d (first rank %d)", h, ranks[0], h-1, t.Hosts[h-1][0])
		}
		for _, r := range ranks {
			if r < 0 || r >= size {
				return fmt.Errorf("algo: topology: host %d lists rank %d, outside a group of %d", h, r, size)
			}
			if seen[r] {
				return fmt.Errorf("algo: topology: rank %d is on two hosts", r)
			}
			seen[r] = true
		}
	}
	for r, ok := range seen {
		if !ok {
			return fmt.Errorf("algo: topology: rank %d is on no host", r)
		}
	}
	return nil
}

// place returns rank's host and its index among that host's ranks.
func (t Topology) place(rank int) (host, local int) {
	for h, ranks := range t.Hosts {
		if i := slices.Index(ranks, rank); i >= 0 {
			return h, i
		}
	}
	panic(fmt.Sprintf("algo: rank %d is on no host", rank))
}

// TwoLevelAllReduce is the all-reduce of a group spread over hosts with
// the same number of ranks each (r ranks on each of h hosts), in three
// phases, as NCCL's and Horovod's hierarchical all-reduces are built:
//
//  1. on each host, a ring reduce-scatter among its r ranks: the buffer is
//     split by Chunks(count, r), and the rank with local index i ends
//     holding chunk i reduced over its host;
//  2. across hosts, for each i, the h ranks with local index i (one per
//     host) ring-all-reduce chunk i: r rings side by side on disjoint
//     chunks, so every rank's link to the network carries a share;
//  3. on each host, a ring all-gather of the r chunks.
//
// Traffic: each rank sends 2·(r−1)/r·count elements to ranks on its host
// and 2·(h−1)/h·count/r to other hosts, so a host's network link carries
// 2·(h−1)/h·count elements each way (give or take the rounding of the
// chunks), where a flat ring over the h·r ranks carries 2·(n−1)/n·count
// (n = h·r) over each host's link. With h = 1 it is a ring all-reduce on
// the host, with r = 1 a ring all-reduce across hosts.
//
// Final marks: phase 2's last reducing receives complete each element's
// sum (phase 1's, when h = 1), so an average scales exactly once.
//
// It panics, as the other schedules do, if t does not place the group's
// ranks (Topology.Check) or its hosts have different numbers of ranks.
func TwoLevelAllReduce(rank int, t Topology, count, segments int) Schedule {
	size := t.Size()
	checkGroup("TwoLevelAllReduce", rank, size)
	checkCount("TwoLevelAllReduce", count)
	checkSegments("TwoLevelAllReduce", segments)
	if err := t.Check(size); err != nil {
		panic(err.Error())
	}
	perHost, ok := t.Uniform()
	if !ok {
		panic("algo: TwoLevelAllReduce needs the same number of ranks on every host")
	}
	if size == 1 || count == 0 {
		return nil
	}
	h, i := t.place(rank)
	local := t.Hosts[h]
	across := make([]int, len(t.Hosts)) // the ranks with local index i
	for k, ranks := range t.Hosts {
		across[k] = ranks[i]
	}
	offs, lens := Chunks(count, perHost)
	var b builder
	// 1. Reduce-scatter on the host; final only when there is no phase 2.
	b.mapped(local, func(sub *builder) {
		ringReduceScatter(sub, i, perHost, offs, lens, segments, len(t.Hosts) == 1)
	})
	// 2. All-reduce chunk i across hosts.
	if n := len(t.Hosts); n > 1 {
		soffs, slens := Chunks(lens[i], n)
		for k := range soffs {
			soffs[k] += offs[i]
		}
		b.mapped(across, func(sub *builder) {
			ringReduceScatter(sub, h, n, soffs, slens, segments, true)
			ringAllGather(sub, h, n, soffs, slens, segments)
		})
	}
	// 3. All-gather on the host.
	b.mapped(local, func(sub *builder) {
		ringAllGather(sub, i, perHost, offs, lens, segments)
	})
	return b.s
}

// mapped appends the rounds that build appends to a builder of its own,
// whose peers are indices into members, with the peers made members.
func (b *builder) mapped(members []int, build func(sub *builder)) {
	var sub builder
	build(&sub)
	for _, rd := range sub.s {
		for j := range rd.Sends {
			rd.Sends[j].Peer = members[rd.Sends[j].Peer]
		}
		for j := range rd.Recvs {
			rd.Recvs[j].Peer = members[rd.Recvs[j].Peer]
		}
		b.s = append(b.s, rd)
	}
}

// span is a range of a buffer: a chunk, or a piece of one.
type span struct{ off, n int }

// blockRing appends a ring over size members whose "chunk" j is block j,
// a list of spans (possibly several, not contiguous): in step s member
// rank sends block sendAt(s) to rank+1 and receives block recvAt(s) from
// rank−1, each span cut into segments pieces, piece p of every span in
// round p, in one message (Xfer.Joined). reduce makes the receives reducing; final marks the last
// step's receives Final.
func blockRing(b *builder, rank, size int, blocks [][]span, segments int, sendAt, recvAt func(s int) int, reduce, final bool) {
	right, left := mod(rank+1, size), mod(rank-1, size)
	for s := range size - 1 {
		sb, rb := blocks[sendAt(s)], blocks[recvAt(s)]
		for p := range segments {
			for _, sp := range sb {
				offs, lens := Chunks(sp.n, segments)
				b.send(right, sp.off+offs[p], lens[p])
			}
			for _, sp := range rb {
				offs, lens := Chunks(sp.n, segments)
				b.recv(left, sp.off+offs[p], lens[p], reduce)
				if final && s == size-2 {
					b.final(lens[p])
				}
			}
			// A block's pieces go to one peer: one message. Both sides
			// leave out the same empty pieces (the blocks and Chunks are
			// the same everywhere), so their runs agree.
			b.joinRound()
			b.end()
		}
	}
}

// twoLevelPlace checks a two-level schedule's arguments and returns rank's
// host and local index, the ranks per host, and the ranks with its local
// index (one per host).
func twoLevelPlace(fn string, rank int, t Topology) (h, i, perHost int, across []int) {
	size := t.Size()
	checkGroup(fn, rank, size)
	if err := t.Check(size); err != nil {
		panic(err.Error())
	}
	perHost, ok := t.Uniform()
	if !ok {
		panic("algo: " + fn + " needs the same number of ranks on every host")
	}
	h, i = t.place(rank)
	across = make([]int, len(t.Hosts))
	for k, ranks := range t.Hosts {
		across[k] = ranks[i]
	}
	return h, i, perHost, across
}

// TwoLevelAllGather is the all-gather of a group spread over hosts with
// the same number of ranks each (r ranks on each of h hosts), in two
// phases:
//
//  1. across hosts, for each local index i, the h ranks with index i ring
//     all-gather their chunks: r rings side by side, on disjoint chunks;
//  2. on each host, a ring all-gather among the r ranks, where local rank
//     j's block is the h chunks of the ranks with local index j (gathered
//     in phase 1).
//
// Layout as RingAllGather's: the buffer is the whole output, chunk q of
// counts[q] elements at Offsets(counts)[q], only chunk rank valid before.
// Traffic: a host's network link carries (h−1)/h of the output each way,
// where a flat ring over hosts in blocks carries (n−1)/n (n = h·r).
func TwoLevelAllGather(rank int, t Topology, counts []int, segments int) Schedule {
	size := t.Size()
	offs := checkCounts("TwoLevelAllGather", size, counts)
	checkSegments("TwoLevelAllGather", segments)
	h, i, perHost, across := twoLevelPlace("TwoLevelAllGather", rank, t)
	if size == 1 {
		return nil
	}
	var b builder
	if n := len(t.Hosts); n > 1 {
		aoffs, alens := pick(across, offs, counts)
		b.mapped(across, func(sub *builder) { ringAllGather(sub, h, n, aoffs, alens, segments) })
	}
	if perHost > 1 {
		blocks := hostBlocks(t, offs, counts)
		b.mapped(t.Hosts[h], func(sub *builder) {
			blockRing(sub, i, perHost, blocks, segments,
				func(s int) int { return mod(i-s, perHost) }, func(s int) int { return mod(i-s-1, perHost) }, false, false)
		})
	}
	return b.s
}

// TwoLevelReduceScatter is the reduce-scatter of a group spread over hosts
// with the same number of ranks each, in two phases:
//
//  1. on each host, a ring reduce-scatter among the r ranks, where local
//     rank j's block is the h chunks of the ranks with local index j: it
//     ends holding them reduced over its host;
//  2. across hosts, for each local index i, the h ranks with index i ring
//     reduce-scatter those chunks: each ends with its own, reduced over all.
//
// Layout as RingReduceScatter's: the buffer holds every rank's chunk q of
// counts[q] elements at Offsets(counts)[q]; afterwards chunk rank holds
// the reduction, the others are scratch. Traffic: a host's network link
// carries (h−1)/h of the buffer each way. Unlike RingReduceScatter's, the
// schedule may receive into any chunk.
func TwoLevelReduceScatter(rank int, t Topology, counts []int, segments int) Schedule {
	size := t.Size()
	offs := checkCounts("TwoLevelReduceScatter", size, counts)
	checkSegments("TwoLevelReduceScatter", segments)
	h, i, perHost, across := twoLevelPlace("TwoLevelReduceScatter", rank, t)
	if size == 1 {
		return nil
	}
	var b builder
	if perHost > 1 {
		blocks := hostBlocks(t, offs, counts)
		b.mapped(t.Hosts[h], func(sub *builder) {
			blockRing(sub, i, perHost, blocks, segments,
				func(s int) int { return mod(i-s-1, perHost) }, func(s int) int { return mod(i-s-2, perHost) }, true, false)
		})
	}
	if n := len(t.Hosts); n > 1 {
		aoffs, alens := pick(across, offs, counts)
		b.mapped(across, func(sub *builder) { ringReduceScatter(sub, h, n, aoffs, alens, segments, false) })
	}
	return b.s
}

// pick returns the offsets and counts of the chunks of ranks.
func pick(ranks, offs, counts []int) (po, pc []int) {
	po, pc = make([]int, len(ranks)), make([]int, len(ranks))
	for k, q := range ranks {
		po[k], pc[k] = offs[q], counts[q]
	}
	return po, pc
}

// hostBlocks returns, for each local index j, the spans of the chunks of
// the ranks with local index j on every host.
func hostBlocks(t Topology, offs, counts []int) [][]span {
	perHost := len(t.Hosts[0])
	blocks := make([][]span, perHost)
	for j := range blocks {
		for _, ranks := range t.Hosts {
			q := ranks[j]
			blocks[j] = append(blocks[j], span{offs[q], counts[q]})
		}
	}
	return blocks
}

// TwoLevelBarrier is the barrier of a group spread over hosts: each
// host's first rank (its leader) hears from the host's other ranks, the
// leaders run the dissemination barrier among themselves, and each leader
// then releases its host's ranks. Only the leaders' rounds cross the
// network: ceil(log2 h) network latencies where the dissemination barrier
// over all n ranks crosses hosts in most of its ceil(log2 n) rounds.
// Hosts may have different numbers of ranks. Transfers are empty, as
// DisseminationBarrier's.
func TwoLevelBarrier(rank int, t Topology) Schedule {
	size := t.Size()
	checkGroup("TwoLevelBarrier", rank, size)
	if err := t.Check(size); err != nil {
		panic(err.Error())
	}
	if size == 1 {
		return nil
	}
	h, i := t.place(rank)
	local := t.Hosts[h]
	var s Schedule
	if i > 0 {
		// Tell the leader, wait for its release.
		return Schedule{{Sends: []Xfer{{Peer: local[0]}}}, {Recvs: []Xfer{{Peer: local[0]}}}}
	}
	if len(local) > 1 {
		var rd Round
		for _, q := range local[1:] {
			rd.Recvs = append(rd.Recvs, Xfer{Peer: q})
		}
		s = append(s, rd)
	}
	leaders := make([]int, len(t.Hosts))
	for k, ranks := range t.Hosts {
		leaders[k] = ranks[0]
	}
	for _, rd := range DisseminationBarrier(h, len(leaders)) {
		rd.Sends[0].Peer = leaders[rd.Sends[0].Peer]
		rd.Recvs[0].Peer = leaders[rd.Recvs[0].Peer]
		s = append(s, rd)
	}
	if len(local) > 1 {
		var rd Round
		for _, q := range local[1:] {
			rd.Sends = append(rd.Sends, Xfer{Peer: q})
		}
		s = append(s, rd)
	}
	return s
}

// LeaderAllReduce is the all-reduce of small vectors across hosts: each
// host reduces onto its first rank (its leader) with a binomial tree, the
// leaders all-reduce by recursive doubling, and each leader broadcasts
// the result on its host with a binomial tree. Only the leaders cross the
// network, one message each per doubling round, where recursive doubling
// over all n ranks has every rank of a host send across in the same
// round: on hosts whose ranks share few CPUs, those sends queue behind
// each other. Hosts may have different numbers of ranks.
//
// Final marks: the leaders' doubling marks the receives that complete the
// sum (with one host, the leader's last reducing receive); the other
// ranks get the result by copy.
func LeaderAllReduce(rank int, t Topology, count int) Schedule {
	size := t.Size()
	checkGroup("LeaderAllReduce", rank, size)
	checkCount("LeaderAllReduce", count)
	if err := t.Check(size); err != nil {
		panic(err.Error())
	}
	if size == 1 || count == 0 {
		return nil
	}
	h, i := t.place(rank)
	local := t.Hosts[h]
	leaders := make([]int, len(t.Hosts))
	for k, ranks := range t.Hosts {
		leaders[k] = ranks[0]
	}
	var b builder
	if len(local) > 1 {
		b.mapped(local, func(sub *builder) { sub.s = BinomialReduce(i, len(local), 0, count) })
		if i == 0 && len(leaders) == 1 {
			last := &b.s[len(b.s)-1]
			last.Recvs[len(last.Recvs)-1].Final = true
		}
	}
	if i == 0 && len(leaders) > 1 {
		b.mapped(leaders, func(sub *builder) { sub.s = RecursiveDoublingAllReduce(h, len(leaders), count) })
	}
	if len(local) > 1 {
		b.mapped(local, func(sub *builder) { sub.s = BinomialBroadcast(i, len(local), 0, count) })
	}
	return b.s
}

// LeaderBroadcast is the broadcast of small vectors across hosts: root
// sends to the first rank of every other host (its leader; on root's
// host root leads) by a binomial tree among the leaders, and each leader
// broadcasts on its host by a binomial tree. A vector crosses the
// network once a host and only the first rounds cross it, where the
// binomial tree over all ranks (or the chain) has ranks of one host send
// across in the same round, or the vector hop host to host. Hosts may
// have different numbers of ranks.
//
// Layout and traffic as BinomialBroadcast's: every rank but root
// receives count elements once.
func LeaderBroadcast(rank int, t Topology, root, count int) Schedule {
	size := t.Size()
	checkGroup("LeaderBroadcast", rank, size)
	checkRoot("LeaderBroadcast", root, size)
	checkCount("LeaderBroadcast", count)
	if err := t.Check(size); err != nil {
		panic(err.Error())
	}
	if size == 1 || count == 0 {
		return nil
	}
	h, i := t.place(rank)
	rootHost, rootLocal := t.place(root)
	leaders := make([]int, len(t.Hosts))
	for k, ranks := range t.Hosts {
		leaders[k] = ranks[0]
	}
	leaders[rootHost] = root
	lead := 0 // this host's leader, by its index on the host
	if h == rootHost {
		lead = rootLocal
	}
	var b builder
	if rank == leaders[h] && len(leaders) > 1 {
		b.mapped(leaders, func(sub *builder) { sub.s = BinomialBroadcast(h, len(leaders), rootHost, count) })
	}
	if local := t.Hosts[h]; len(local) > 1 {
		b.mapped(local, func(sub *builder) { sub.s = BinomialBroadcast(i, len(local), lead, count) })
	}
	return b.s
}
