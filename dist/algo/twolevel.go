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
