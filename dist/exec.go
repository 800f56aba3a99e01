package dist

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/dist/internal/scratch"
	"github.com/godist/godist/transport"
)

// space is the memory a schedule runs over: element ranges map to bytes.
type space interface {
	at(off, n int) []byte
}

// flat is one contiguous buffer.
type flat struct {
	b  []byte
	es int
}

func (f flat) at(off, n int) []byte { return f.b[off*f.es : (off+n)*f.es] }

// parts is a buffer made of separate chunks laid out by offsets (gather
// and scatter, whose transfers never cross a chunk).
type parts struct {
	bufs [][]byte
	offs []int // element offset of each chunk
	es   int
}

func (p parts) at(off, n int) []byte {
	if n == 0 {
		return nil
	}
	for i, o := range p.offs {
		if off >= o && (off+n)*p.es <= o*p.es+len(p.bufs[i]) {
			lo := (off - o) * p.es
			return p.bufs[i][lo : lo+n*p.es]
		}
	}
	panic(fmt.Sprintf("dist: transfer [%d, %d) crosses chunks %v", off, off+n, p.offs))
}

// execute runs schedule sched of collective seq over the transport: see
// executor.
func (g *Group) execute(ctx context.Context, seq uint64, c call, sched algo.Schedule, buf space, es int, red, final reducer) error {
	t := getExecTables(len(g.ranks))
	x := executor{g: g, ctx: ctx, seq: seq, fp: c.fingerprint(), sched: sched, buf: buf, red: red, final: final,
		sent: t.sent, recvd: t.recvd, pending: t.pending[:0], free: t.free[:0]}
	defer func() {
		x.release()
		t.put(x.pending, x.free)
	}()
	if err := x.run(); err != nil {
		withdraw(x.pending, func(p inflight) *transport.Receive { return p.r })
		return err
	}
	return nil
}

// executor runs one schedule over the transport.
//
// It follows the schedule's semantics (rounds in order; a round's sends
// read the buffer as the earlier rounds left it) without running the ranks
// in lock step: receives are posted at least lookahead rounds early (up to
// maxAhead while their scratch space stays within scratchBudget: a peer
// whose sends do not block runs ahead, and a frame with no receive posted
// costs an allocation and a copy), and a round's sends wait only for
// earlier receives that write what they read.
// So a ring's pieces stream back to back, and frames find their receive
// already posted (and land in place) instead of being copied on arrival.
// A receive lands in place (a reducing one reduces piece by piece as it
// is read) when nothing still to be sent reads its range and no earlier
// receive writes it; snapshot rounds' receives and the others land in
// scratch space and are applied in posting order. red reduces a reducing
// receive; final, when not nil, replaces it on the receives marked
// algo.Xfer.Final (an averaging all-reduce's last sum, see avgFinal).
type executor struct {
	g     *Group
	ctx   context.Context
	seq   uint64
	fp    uint64
	sched algo.Schedule
	buf   space
	red   reducer
	final reducer

	sent, recvd []uint32 // frames sent to and received from each member so far: their tags

	pending      []inflight // receives posted, in round order
	deferred     []later    // receives waiting for an earlier round's send before they can land in place
	free         [][]byte   // scratch buffers to reuse
	scratchInUse int        // bytes of pending receives' scratch
	posted       int        // rounds whose receives are posted
}

// inflight is a posted receive.
type inflight struct {
	r     *transport.Receive
	x     algo.Xfer
	tmp   []byte // nil: the frame lands in place
	round int
}

// later is a receive that could land in place but for a send of an
// earlier round not yet made (which reads the same bytes): it waits
// until that send is out, rather than landing in scratch and being
// copied.
type later struct {
	x     algo.Xfer
	tag   uint32
	round int
}

const (
	lookahead     = 2
	maxAhead      = 8
	scratchBudget = 16 << 20
)

func (x *executor) run() error {
	for i, round := range x.sched {
		if len(x.deferred) > 0 {
			x.retry(i)
		}
		for ; x.posted < len(x.sched) && (x.posted <= i+lookahead || x.posted <= i+maxAhead && x.scratchInUse < scratchBudget); x.posted++ {
			x.post(x.posted, i)
		}
		for _, s := range round.Sends {
			// Apply the earlier rounds' receives that write what this
			// send reads (in order).
			for x.sendWaits(s, i) {
				if err := x.completeFront(); err != nil {
					return err
				}
			}
			tag := x.sent[s.Peer]
			x.sent[s.Peer]++
			key := transport.Key{Group: x.g.id, Seq: x.seq, Tag: tag}
			if err := x.g.world.ep.Send(x.ctx, x.g.ranks[s.Peer], key, x.fp, x.buf.at(s.Off, s.Len)); err != nil {
				return err
			}
		}
	}
	for len(x.pending) > 0 {
		if err := x.completeFront(); err != nil {
			return err
		}
	}
	return nil
}

// sendWaits reports whether send s of round i must wait for the oldest
// pending receive: some receive of an earlier round writes what s reads.
// An empty transfer carries no data, only order (a barrier's): it waits
// for every earlier receive.
func (x *executor) sendWaits(s algo.Xfer, i int) bool {
	for _, p := range x.pending {
		if p.round < i && (s.Len == 0 || p.x.Len == 0 || overlaps(p.x, s)) {
			return true
		}
	}
	return false
}

func overlaps(a, b algo.Xfer) bool {
	return a.Len > 0 && b.Len > 0 && a.Off < b.Off+b.Len && b.Off < a.Off+a.Len
}

// reduceWith is the kernel of a reducing receive: final for one that
// completes its range, when the caller gave one.
func (x *executor) reduceWith(t algo.Xfer) reducer {
	if t.Final && x.final != nil {
		return x.final
	}
	return x.red
}

func (x *executor) scratch(n int) []byte {
	for i, b := range x.free {
		if cap(b) >= n {
			x.free = append(x.free[:i], x.free[i+1:]...)
			return b[:n]
		}
	}
	return scratch.Get(n)
}

func (x *executor) release() {
	for _, b := range x.free {
		scratch.Put(b)
	}
}

// execTables are an executor's tables, recycled from call to call: a
// small call allocates none of them (with thousands of members, the
// per-member tag counts alone would be kilobytes a call).
type execTables struct {
	sent, recvd []uint32
	pending     []inflight
	free        [][]byte
}

var execTablesPool sync.Pool

func getExecTables(members int) *execTables {
	t, _ := execTablesPool.Get().(*execTables)
	if t == nil {
		t = &execTables{}
	}
	if cap(t.sent) < members {
		t.sent, t.recvd = make([]uint32, members), make([]uint32, members)
	} else {
		t.sent, t.recvd = t.sent[:members], t.recvd[:members]
		clear(t.sent)
		clear(t.recvd)
	}
	return t
}

// put recycles t, keeping the larger of its lists and the executor's
// (which may have grown), holding nothing they pointed to.
func (t *execTables) put(pending []inflight, free [][]byte) {
	if cap(pending) > cap(t.pending) {
		t.pending = pending
	}
	if cap(free) > cap(t.free) {
		t.free = free
	}
	clear(t.pending[:cap(t.pending)])
	clear(t.free[:cap(t.free)])
	t.pending, t.free = t.pending[:0], t.free[:0]
	execTablesPool.Put(t)
}

// completeFront waits for the oldest receive and applies it.
func (x *executor) completeFront() error {
	p := x.pending[0]
	if err := x.g.await(x.ctx, p.r, x.g.ranks[p.x.Peer], x.seq); err != nil {
		return err
	}
	x.pending = x.pending[1:]
	if p.tmp != nil {
		dst := x.buf.at(p.x.Off, p.x.Len)
		if p.x.Reduce {
			x.reduceWith(p.x)(dst, p.tmp)
		} else {
			copy(dst, p.tmp)
		}
		x.free = append(x.free, p.tmp)
		x.scratchInUse -= len(p.tmp)
	}
	return nil
}

// place posts receive t of round j (with its tag), given that the sends
// of the rounds before current have been made. It reports false when t
// must wait for those sends (only when mayWait).
func (x *executor) place(t algo.Xfer, tag uint32, j, current int, mayWait bool) bool {
	dst := x.buf.at(t.Off, t.Len)
	// In place (a reducing receive reduces each piece into dst as it
	// is read, while the piece is in cache) unless its round reads a
	// snapshot, an earlier receive still writes there, or a send of
	// the rounds before it (not yet sent) reads there.
	inPlace := !x.sched[j].Snapshot
	for _, p := range x.pending {
		if inPlace && p.round < j && overlaps(p.x, t) {
			inPlace = false
		}
	}
	for _, d := range x.deferred {
		if inPlace && d.round < j && overlaps(d.x, t) {
			inPlace = false
		}
	}
	if inPlace {
		for k := current; k < j; k++ {
			for _, y := range x.sched[k].Sends {
				if overlaps(t, y) {
					if mayWait {
						return false
					}
					inPlace = false
				}
			}
		}
	}
	var tmp []byte
	if !inPlace {
		tmp = x.scratch(len(dst))
		dst = tmp
		x.scratchInUse += len(tmp)
	}
	ep := x.g.world.ep
	peer := x.g.ranks[t.Peer]
	key := transport.Key{Group: x.g.id, Seq: x.seq, Tag: tag}
	var r *transport.Receive
	if t.Reduce && inPlace {
		rx := x.reduceWith(t)
		r = ep.PostSinkKey(peer, key, x.fp, len(dst), func(off int, b []byte) {
			rx(dst[off:off+len(b)], b)
		})
	} else {
		r = ep.PostKey(peer, key, x.fp, dst)
	}
	f := inflight{r, t, tmp, j}
	// Keep pending in round order: receives are applied oldest first.
	at := len(x.pending)
	for at > 0 && x.pending[at-1].round > j {
		at--
	}
	x.pending = slices.Insert(x.pending, at, f)
	return true
}

// post posts the receives of round j, the sends of the rounds before
// current being made.
func (x *executor) post(j, current int) {
	for _, t := range x.sched[j].Recvs {
		tag := x.recvd[t.Peer]
		x.recvd[t.Peer]++
		if !x.place(t, tag, j, current, true) {
			x.deferred = append(x.deferred, later{t, tag, j})
		}
	}
}

// retry posts the deferred receives whose sends are out.
func (x *executor) retry(current int) {
	kept := x.deferred[:0]
	for _, d := range x.deferred {
		if !x.place(d.x, d.tag, d.round, current, d.round > current) {
			kept = append(kept, d)
		}
	}
	x.deferred = kept
}

// withdraw cancels posted receives that will not be waited for.
func withdraw[T any](ps []T, r func(T) *transport.Receive) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, p := range ps {
		r(p).Wait(ctx)
	}
}
