package dist

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/internal/simd"
	"github.com/godist/godist/transport"
)

// Measuring the cost model at Init, for a job that spans hosts.
//
// Every rank must choose the same algorithm for a call, so every rank
// must hold the same model: rank 0 measures, and publishes the model in
// the store, where the others read it. Rank 0 measures shared memory's
// latency against another rank of its own host (when it has one), then
// the network against the first rank of the second host, while the other
// ranks of the two hosts, and those of every other pair of hosts, do the
// same in pairs (measureModel): small round trips, measureRounds after
// measureWarmRounds untimed, give the latency (their median, halved),
// then measureBulk bytes sent and acknowledged, measureBulkRounds times
// after measureWarmBulk untimed, give the network's bandwidth (the
// median, each less the small round trip just before it): sustained, not
// what a link's burst allowance or a first touch of memory shows. It
// times its own copy and reduction of 8 MiB for shared memory's bandwidth
// and the reduce rate, and counts the CPUs it may run on
// (runtime.NumCPU: its affinity mask) against its host's ranks. At 1
// Gbit/s the network's part takes about 80 ms.

const (
	measureWarmRounds = 32 // untimed small round trips: a new job's first calls fault in fresh memory
	measureRounds     = 32
	measureBulk       = 1 << 20
	measureBulkMax    = 16 << 20
	measureBulkTime   = 4 * time.Millisecond
	measureWarmBulk   = 4 // untimed: the shared-memory slots' first use, a shaper's burst
	measureBulkRounds = 5
	// measureDuplexRounds are the timed bulks both ways at once: their
	// median is the stack's rate (stackRate).
	measureDuplexRounds = 9
	// measureGroup is the group id of the measuring frames: no group has
	// it (ids count up from 0, and p2p's have p2pBit).
	measureGroup = p2pBit - 1
	modelKey     = "dist/model"
)

// measureModel sets the world's model through its world group g, within
// g's timeout; it ends as soon as g fails (a peer died: a survivor may
// be waiting for rank 0's model) with an error that says why.
func (g *Group) measureModel(ctx context.Context, given algo.Model) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	stop := context.AfterFunc(g.ctx, cancel)
	defer stop()
	err := g.world.measureModel(ctx, given)
	if err != nil && g.ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", err, context.Cause(g.ctx))
	}
	return err
}

// measureModel sets w.model: the given one when not zero, the default
// when the job runs on one host, else what rank 0 measures.
func (w *world) measureModel(ctx context.Context, given algo.Model) error {
	if given != (algo.Model{}) {
		if err := given.Check(); err != nil {
			return err
		}
		w.model = given
		return nil
	}
	topo := topologyOf(w.ep, allRanks(w.size))
	if len(topo.Hosts) < 2 {
		w.model = algo.DefaultModel
		return nil
	}
	// The network: hosts pair up (0 with 1, 2 with 3, ...), their ranks
	// by local index, and all pairs measure at once, as a collective's
	// ranks all send at once (a host's link, and its CPUs when it has
	// fewer than ranks, are shared, and on a machine whose hosts share
	// CPUs, theirs: on 4 hosts of one rank sharing 2 CPUs, rank 0 saw a
	// latency of 12 µs with hosts 2 and 3 quiet and 57-68 µs with them
	// probing too, and the prediction of an 8 B all-reduce went from 0.2
	// of its time to 0.6-0.7). Rank 0 takes the latency it saw and the
	// bytes of the pairs of hosts 0 and 1, which share its link, over the
	// time they took together.
	pairs := min(len(topo.Hosts[0]), len(topo.Hosts[1]))
	local := -1
	if h0 := topo.Hosts[0]; len(h0) > 1 {
		local = h0[1]
	}
	// Shared memory first, before the network's bulks (probeLatency).
	var localLat time.Duration
	switch {
	case local < 0:
	case w.rank == 0:
		var err error
		if localLat, err = w.probeLatency(ctx, local); err != nil {
			return fmt.Errorf("measuring shared memory against rank %d: %w", local, err)
		}
	case w.rank == local:
		if err := w.answerProbe(ctx, 0); err != nil {
			return fmt.Errorf("answering rank 0's measurement of shared memory: %w", err)
		}
	}
	var probers, answerers []int
	for h := 0; h+1 < len(topo.Hosts); h += 2 {
		a, b := topo.Hosts[h], topo.Hosts[h+1]
		for i := range min(len(a), len(b)) {
			probers, answerers = append(probers, a[i]), append(answerers, b[i])
		}
	}
	var net algo.Link
	var duplex float64 // the pair's bytes a second each way, both ways at once
	for i, p := range probers {
		q := answerers[i]
		var err error
		switch w.rank {
		case p:
			// Every bulk round trip of the pairs starts together
			// (syncProbers), so that they share the link the way a
			// collective's transfers do: apart, two pairs at 1 Gbit/s
			// measured up to 0.21 GB/s together, and at 10 Gbit/s,
			// synchronised only at the first bulk, from 0.12 to 2.05
			// GB/s in three runs as the pairs drifted apart.
			sync := func(n int) (int, error) { return w.syncProbers(ctx, probers, n) }
			if net, duplex, err = w.probeLink(ctx, q, sync, true); err != nil {
				return fmt.Errorf("measuring the network against rank %d: %w", q, err)
			}
		case q:
			if err := w.answerProbe(ctx, p); err != nil {
				return fmt.Errorf("answering rank %d's measurement of the network: %w", p, err)
			}
		}
	}
	switch w.rank {
	case 0:
		m := algo.DefaultModel
		m.Network = net
		m.Network.Bandwidth *= float64(pairs)
		if local >= 0 {
			// A payload through shared memory is copied in by its sender
			// and out by its receiver. Timed as round trips between two
			// ranks, it was 0.17 GB/s in one run and 1.1 in the next on
			// the namespace hosts (two ranks to a CPU, their turns on it
			// deciding), and the algorithm across hosts flipped with it.
			m.Local = algo.Link{Latency: localLat, Bandwidth: copyRate() / 2}
		}
		m.Reduce = reduceRate()
		// Fewer CPUs here than ranks on this host: their messages queue.
		if cpus := runtime.NumCPU(); cpus < len(topo.Hosts[0]) {
			m.CPUs = cpus
		}
		m.Stack = stackRate(duplex*float64(pairs), min(pairs, runtime.NumCPU()))
		b, _ := json.Marshal(m)
		if err := w.store.Set(ctx, modelKey, b); err != nil {
			return err
		}
		w.model = m
		return nil
	}
	b, err := w.store.Get(ctx, modelKey)
	if err != nil {
		return fmt.Errorf("reading rank 0's measurement of the links: %w", err)
	}
	var m algo.Model
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("rank 0's measurement of the links: %w", err)
	}
	if err := m.Check(); err != nil {
		return err
	}
	w.model = m
	return nil
}

// probeLink measures the link to peer, which runs answerProbe: the
// latency from small round trips (while the other pairs make theirs);
// the bandwidth from bulk round trips, each less the small one just
// before it. Taken in pairs, a bulk and a
// small exchange see the link and the CPUs in the same state: a latency
// measured apart from the bulk (the first round trips of a job can be
// several times slower than later ones) once made a 10 Gbit/s link's
// 1 MiB look free (238 GB/s). The bulk grows from measureBulk until a
// round trip takes measureBulkTime (or measureBulkMax bytes), so that a
// shaper's burst allowance (tbf lets a millisecond of traffic through
// at once) is a small part of it: a 1 MiB bulk on a 10 Gbit/s link
// measured 2 GB/s.
//
// beforeBulk, when not nil, keeps the pairs in step: it is called before
// each timed small round trip (with 1, its answer unused) and before each
// bulk round trip with the size this prober would send (0 when it is
// done), and returns the size to send, 0 to stop: the first prober's
// choice, for every pair.
func (w *world) probeLink(ctx context.Context, peer int, beforeBulk func(n int) (int, error), duplex bool) (algo.Link, float64, error) {
	tag := uint32(0)
	defer func() { w.probe = nil }()
	defer w.probeExchange(ctx, peer, &tag, probeDone, false)
	var beforeSmall func() error
	if beforeBulk != nil {
		// The pairs' small round trips too start together, as a small
		// collective's messages do.
		beforeSmall = func() error { _, err := beforeBulk(1); return err }
	}
	rtt, err := w.smallRoundTrips(ctx, peer, &tag, beforeSmall)
	if err != nil {
		return algo.Link{}, 0, err
	}
	// bulks times bulk round trips of n bytes (both ways at once with
	// duplex): measureWarmBulk untimed, then rounds timed, each less the
	// small round trip just before it. With grow, a bulk shorter than
	// measureBulkTime starts them over four times larger (up to
	// measureBulkMax). It returns the times and the size they are of.
	//
	// With beforeBulk, a bulk's time is taken at the sync after it, which
	// returns when every pair's bulk has ended (each prober syncs after
	// its own): the pairs' bytes over the time they took together. Timed
	// by its own pair alone, rank 0's bulk said 0.128-0.21 GB/s of a
	// 0.125 GB/s link in three runs: the pairs do not share it evenly.
	bulks := func(n, rounds int, duplex, grow bool) ([]float64, int, error) {
		var ds []float64
		var last struct {
			start time.Time // when the bulk still to be timed began
			small float64   // the small round trip just before it
		}
		for i := 0; ; i++ {
			want := n
			if i >= measureWarmBulk+rounds {
				want = 0
			}
			if beforeBulk != nil {
				var err error
				if want, err = beforeBulk(want); err != nil {
					return nil, 0, err
				}
				if !last.start.IsZero() {
					ds = append(ds, time.Since(last.start).Seconds()-last.small)
					last.start = time.Time{}
				}
			}
			if want <= 0 {
				return ds, n, nil
			}
			n = want
			s, err := w.timedExchange(ctx, peer, &tag, 0, false)
			if err != nil {
				return nil, 0, err
			}
			start := time.Now()
			b, err := w.timedExchange(ctx, peer, &tag, n, duplex)
			if err != nil {
				return nil, 0, err
			}
			if grow && b < measureBulkTime.Seconds() && n < measureBulkMax {
				n, i, ds = n*4, -1, ds[:0] // too short to tell: start over, larger
				continue
			}
			switch {
			case i < measureWarmBulk:
			case beforeBulk != nil:
				last.start, last.small = start, s
			default:
				ds = append(ds, b-s)
			}
		}
	}
	ds, n, err := bulks(measureBulk, measureBulkRounds, false, true)
	if err != nil {
		return algo.Link{}, 0, err
	}
	link := algo.Link{Latency: time.Duration(rtt / 2 * 1e9), Bandwidth: float64(n) / bulkTime(ds, n)}
	if !duplex {
		return link, 0, nil
	}
	// Both ways at once, in step as the one-way bulks, of their size.
	if ds, n, err = bulks(n, measureDuplexRounds, true, false); err != nil {
		return algo.Link{}, 0, err
	}
	return link, float64(n) / bulkTime(ds, n), nil
}

// smallRoundTrips makes probeLink's small round trips with peer
// (measureWarmRounds untimed, then measureRounds timed, before() ahead of
// each timed one when not nil) and returns their median in seconds.
func (w *world) smallRoundTrips(ctx context.Context, peer int, tag *uint32, before func() error) (float64, error) {
	for range measureWarmRounds {
		if err := w.probeExchange(ctx, peer, tag, 0, false); err != nil {
			return 0, err
		}
	}
	rtts := make([]float64, measureRounds)
	for i := range rtts {
		if before != nil {
			if err := before(); err != nil {
				return 0, err
			}
		}
		var err error
		if rtts[i], err = w.timedExchange(ctx, peer, tag, 0, false); err != nil {
			return 0, err
		}
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], nil
}

// timedExchange is probeExchange, timed in seconds.
func (w *world) timedExchange(ctx context.Context, peer int, tag *uint32, n int, duplex bool) (float64, error) {
	t0 := time.Now()
	err := w.probeExchange(ctx, peer, tag, n, duplex)
	return time.Since(t0).Seconds(), err
}

// probeLatency is probeLink's latency alone, for shared memory (whose
// bandwidth is copyRate's): made before the network's bulks, which keep
// a host's CPUs busy for milliseconds at a time where they bound the
// traffic. Its ranks' pollers then take their yields as lost to a hog
// and sleep for a while (cpuyield.Hold), and small round trips made
// after the bulks paid a wake-up each: on 2 hosts of 2 ranks and one CPU
// at 10 Gbit/s, shared memory measured 17-40 µs where it takes 6-8 µs
// at 1 Gbit/s, and the model then overpredicted every small call there.
func (w *world) probeLatency(ctx context.Context, peer int) (time.Duration, error) {
	var tag uint32
	defer w.probeExchange(ctx, peer, &tag, probeDone, false)
	rtt, err := w.smallRoundTrips(ctx, peer, &tag, nil)
	return time.Duration(rtt / 2 * 1e9), err
}

// bulkTime is the median of a bulk of n bytes' times ds, at least what
// maxBandwidth allows.
func bulkTime(ds []float64, n int) float64 {
	if len(ds) == 0 {
		// A prober that followed the first one's sizes and restarted at
		// the last: its figure is not used.
		return float64(n) / maxBandwidth
	}
	slices.Sort(ds)
	return max(ds[len(ds)/2], float64(n)/maxBandwidth)
}

// stackRate is Model.Stack from the network's probes: the hosts' bytes a
// second each way with both ways at once (duplex), moved by cpus CPUs of
// the probing host, each of which moved duplex bytes a second out and as
// many in: 2·duplex through the stack over cpus. Where the CPUs bound the
// traffic that is their rate; where the link does, the CPUs moved no
// more than the link let through, and a call's bytes across hosts at
// that rate take no longer than the link takes them both ways at once,
// so the bound adds only the host's own copies and reductions to it (a
// few per cent at 1 Gbit/s, and no choice of the lab's changes).
// Measured on namespace hosts of one CPU (six Inits each): at 1 Gbit/s
// both ways moved 1.00-1.05 of one way; at 10 Gbit/s 0.70-0.85 (0.76-0.90
// GB/s each way: a stack rate of 1.5-1.8 GB/s), where a ring all-gather
// of 16 MiB took twice the link's time, the host's CPU sending and
// receiving at once. A threshold between the two (both ways at 0.9 of
// one way, below which the CPUs bound) left the stack's rate out in one
// Init of four on another machine, whose both ways moved 0.87-0.95 of one
// way at 10 Gbit/s, and its predictions of 16 and 64 MiB then halved.
func stackRate(duplex float64, cpus int) float64 {
	if duplex <= 0 {
		return 0
	}
	return 2 * duplex / float64(max(cpus, 1))
}

// syncProbers returns once every prober of the network (this rank among
// them; probers[0] is rank 0) is ready for its next round trip, with the
// size rank 0 chose (n on rank 0; 0 to stop): each tells rank 0, which
// then tells them all the size.
func (w *world) syncProbers(ctx context.Context, probers []int, n int) (int, error) {
	key := transport.Key{Group: measureGroup, Tag: syncTag}
	var msg [8]byte
	if w.rank != probers[0] {
		if err := w.ep.Send(ctx, probers[0], key, 0, msg[:]); err != nil {
			return 0, err
		}
		if err := w.recvProbe(ctx, probers[0], syncTag, msg[:]); err != nil {
			return 0, err
		}
		m := int64(binary.LittleEndian.Uint64(msg[:]))
		if m < 0 || m > measureBulkMax {
			return 0, fmt.Errorf("rank %d asked for bulks of %d bytes (at most %d)", probers[0], m, measureBulkMax)
		}
		return int(m), nil
	}
	for _, p := range probers[1:] {
		if err := w.recvProbe(ctx, p, syncTag, msg[:]); err != nil {
			return 0, err
		}
	}
	binary.LittleEndian.PutUint64(msg[:], uint64(n))
	for _, p := range probers[1:] {
		if err := w.ep.Send(ctx, p, key, 0, msg[:]); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// syncTag is the tag of syncProbers' messages, far from probeLink's.
const syncTag = 1 << 30

// maxBandwidth bounds a measured bandwidth (bytes per second): a bulk
// round trip no slower than a small one says only that the link is
// fast.
const maxBandwidth = 100e9

// probeDone is the size that ends answerProbe.
const probeDone = -1

// probeExchange is one round trip of probeLink: an 8-byte message that
// says how many bytes follow (n, or probeDone; with duplexBit, the peer
// sends as many back at once), those bytes, and the peer's 8-byte answer
// (or its n bytes), each with a tag of its own.
func (w *world) probeExchange(ctx context.Context, peer int, tag *uint32, n int, duplex bool) error {
	var head [8]byte
	h := uint64(int64(n))
	if duplex {
		h |= duplexBit
	}
	binary.LittleEndian.PutUint64(head[:], h)
	key := func(k uint32) transport.Key { return transport.Key{Group: measureGroup, Tag: *tag + k} }
	defer func() { *tag += 3 }()
	if duplex && n > 0 {
		buf := w.probeBuf(2 * n)
		return w.swap(ctx, peer, key(1), buf[:n], key(2), buf[n:], func() error {
			return w.ep.Send(ctx, peer, key(0), 0, head[:])
		})
	}
	answer := make([]byte, 8)
	r := w.ep.Post(peer, transport.ExactMatch(peer, key(2)), 0, answer)
	err := w.ep.Send(ctx, peer, key(0), 0, head[:])
	if err == nil && n > 0 {
		err = w.ep.Send(ctx, peer, key(1), 0, w.probeBuf(n))
	}
	if err != nil || n == probeDone {
		r.Wait(canceled)
		return err
	}
	_, err = r.Wait(ctx)
	return err
}

// swap sends out to peer under outKey while it receives in under inKey,
// both cut into the same pieces (duplexPieces): the receives posted
// first, then first() (nil: nothing), then the sends. Pieces, as a
// collective's pipelined transfers go: both ways at once in one message
// each, the probe swung between runs (both ways at 0.8 of one way in
// some, above it in others, at 10 Gbit/s).
func (w *world) swap(ctx context.Context, peer int, outKey transport.Key, out []byte, inKey transport.Key, in []byte, first func() error) error {
	k := duplexPieces(len(in))
	rs := make([]*transport.Receive, 0, k)
	for _, p := range pieces(in, k) {
		rs = append(rs, w.ep.Post(peer, transport.ExactMatch(peer, inKey), 0, p))
	}
	withdraw := func(err error) error {
		for _, r := range rs {
			r.Wait(canceled)
		}
		return err
	}
	if first != nil {
		if err := first(); err != nil {
			return withdraw(err)
		}
	}
	for _, p := range pieces(out, k) {
		if err := w.ep.Send(ctx, peer, outKey, 0, p); err != nil {
			return withdraw(err)
		}
	}
	for _, r := range rs {
		if _, err := r.Wait(ctx); err != nil {
			return withdraw(err)
		}
	}
	return nil
}

// duplexPieces is how many pieces a swap of n bytes goes in: up to 16,
// none under 64 KiB.
func duplexPieces(n int) int { return max(1, min(16, n/(64<<10))) }

// pieces cuts b into k pieces, the last taking the rest.
func pieces(b []byte, k int) [][]byte {
	out := make([][]byte, k)
	step := len(b) / k
	for i := range out {
		lo, hi := i*step, (i+1)*step
		if i == k-1 {
			hi = len(b)
		}
		out[i] = b[lo:hi]
	}
	return out
}

// duplexBit marks a probe whose bytes the peer sends back at once.
const duplexBit = 1 << 62

// probeBuf returns a buffer of n bytes for probes, kept for the next.
func (w *world) probeBuf(n int) []byte {
	if cap(w.probe) < n {
		w.probe = make([]byte, n)
	}
	return w.probe[:n]
}

// answerProbe answers probeLink's round trips from peer until it says
// it is done.
func (w *world) answerProbe(ctx context.Context, peer int) error {
	defer func() { w.probe = nil }()
	var tag uint32
	head := make([]byte, 8)
	for {
		if err := w.recvProbe(ctx, peer, tag, head); err != nil {
			return err
		}
		h := binary.LittleEndian.Uint64(head)
		n, duplex := int64(h&^duplexBit), h&duplexBit != 0
		if int64(h) == probeDone {
			return nil
		}
		if n < 0 || n > measureBulkMax || duplex && n == 0 {
			return fmt.Errorf("rank %d asked to measure with %d bytes (at most %d)", peer, n, measureBulkMax)
		}
		answer := head
		switch {
		case duplex:
			// Both ways at once.
			buf := w.probeBuf(2 * int(n))
			err := w.swap(ctx, peer, transport.Key{Group: measureGroup, Tag: tag + 2}, buf[n:],
				transport.Key{Group: measureGroup, Tag: tag + 1}, buf[:n], nil)
			if err != nil {
				return err
			}
			answer = nil
		case n > 0:
			if err := w.recvProbe(ctx, peer, tag+1, w.probeBuf(int(n))); err != nil {
				return err
			}
		}
		if answer != nil {
			if err := w.ep.Send(ctx, peer, transport.Key{Group: measureGroup, Tag: tag + 2}, 0, answer); err != nil {
				return err
			}
		}
		tag += 3
	}
}

func (w *world) recvProbe(ctx context.Context, peer int, tag uint32, into []byte) error {
	r := w.ep.Post(peer, transport.ExactMatch(peer, transport.Key{Group: measureGroup, Tag: tag}), 0, into)
	_, err := r.Wait(ctx)
	return err
}

// canceled is a context that has ended: Wait on it withdraws a receive.
var canceled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// copyRate times a copy of 8 MiB, best of three, in bytes per second.
// A last-level cache may hold it (this project's machines have 32 MiB):
// it is the rate of the mid-size transfers that decide most choices.
// Calls of 16 MiB and more copy at about half of it: across hosts whose
// one CPU binds the traffic, a shared-memory rate of a quarter of this
// (2.5 GB/s) fits their measured times (16 MiB all-gathers and
// all-reduces at 10 Gbit/s, 0.78-1.04 of the prediction against 0.54-0.78)
// and misses the 1 MiB calls' (1.1-1.47): a model with one rate for all
// sizes cannot fit both.
func copyRate() float64 {
	const bytes = 8 << 20
	a, b := make([]byte, bytes), make([]byte, bytes)
	for i := range a {
		a[i] = byte(i) // touched: no page faults in the timed copies
	}
	copy(b, a)
	best := 0.0
	for range 3 {
		t0 := time.Now()
		copy(b, a)
		if d := time.Since(t0).Seconds(); d > 0 {
			best = max(best, float64(bytes)/d)
		}
	}
	if best == 0 {
		return 2 * algo.DefaultModel.Local.Bandwidth
	}
	return best
}

// reduceRate times the sum of two float32 vectors of 8 MiB, best of
// three, in bytes per second (as copyRate's, a last-level cache may hold
// them).
func reduceRate() float64 {
	const bytes = 8 << 20
	n := bytes / 4
	a, b := make([]float32, n), make([]float32, n)
	best := 0.0
	for range 3 {
		t0 := time.Now()
		simd.AddF32(a, b)
		if d := time.Since(t0).Seconds(); d > 0 {
			best = max(best, float64(bytes)/d)
		}
	}
	if best == 0 {
		return algo.DefaultModel.Reduce
	}
	return best
}
