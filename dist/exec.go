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
	x := &t.x
	*x = executor{g: g, ctx: ctx, seq: seq, fp: c.fingerprint(), sched: sched, buf: buf, red: red, final: final,
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
// algo.Xfer.Final (an averaging all-reduce's last sum, see avgFinal). A
// run of joined transfers (algo.Xfer.Joined) is one frame: sent with one
// vectored write, received through a sink that spreads it over the
// run's ranges (or into one piece of scratch space, applied range by
// range).
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

// inflight is a posted receive: of one message, a run of transfers (one,
// unless joined) from one peer.
type inflight struct {
	r     *transport.Receive
	xs    []algo.Xfer
	tmp   []byte // nil: the frame lands in place
	round int
}

// later is a receive that could land in place but for a send of an
// earlier round not yet made (which reads the same bytes): it waits
// until that send is out, rather than landing in scratch and being
// copied.
type later struct {
	xs    []algo.Xfer
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
		for j := 0; j < len(round.Sends); {
			msg := algo.Message(round.Sends[j:])
			j += len(msg)
			// Apply the earlier rounds' receives that write what this
			// send reads (in order).
			for x.sendWaits(msg, i) {
				if err := x.completeFront(); err != nil {
					return err
				}
			}
			peer := msg[0].Peer
			tag := x.sent[peer]
			x.sent[peer]++
			key := transport.Key{Group: x.g.id, Seq: x.seq, Tag: tag}
			var err error
			if len(msg) == 1 {
				err = x.g.world.ep.Send(x.ctx, x.g.ranks[peer], key, x.fp, x.buf.at(msg[0].Off, msg[0].Len))
			} else {
				err = x.g.world.ep.Send(x.ctx, x.g.ranks[peer], key, x.fp, x.ranges(msg)...)
			}
			if err != nil {
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

// sendWaits reports whether the send of message msg in round i must wait
// for the oldest pending receive: some receive of an earlier round writes
// what msg reads. An empty transfer carries no data, only order (a
// barrier's): it waits for every earlier receive.
func (x *executor) sendWaits(msg []algo.Xfer, i int) bool {
	for _, p := range x.pending {
		if p.round >= i {
			continue
		}
		for _, s := range msg {
			for _, y := range p.xs {
				if s.Len == 0 || y.Len == 0 || overlaps(y, s) {
					return true
				}
			}
		}
	}
	return false
}

func overlaps(a, b algo.Xfer) bool {
	return a.Len > 0 && b.Len > 0 && a.Off < b.Off+b.Len && b.Off < a.Off+a.Len
}

// overlapsAny reports whether a transfer of xs overlaps one of ys.
func overlapsAny(xs, ys []algo.Xfer) bool {
	for _, a := range xs {
		for _, b := range ys {
			if overlaps(a, b) {
				return true
			}
		}
	}
	return false
}

// ranges returns the buffer's bytes of each transfer of a message.
func (x *executor) ranges(msg []algo.Xfer) [][]byte {
	out := make([][]byte, len(msg))
	for i, t := range msg {
		out[i] = x.buf.at(t.Off, t.Len)
	}
	return out
}

// spread is a sink that lays a joined message's bytes over its ranges in
// dsts, in order, reducing into those of reducing transfers with red
// (their kernel). The sink's pieces may straddle the ranges' ends.
func spread(msg []algo.Xfer, dsts [][]byte, red func(algo.Xfer) reducer) transport.Sink {
	return func(off int, b []byte) {
		for i, d := range dsts {
			if off >= len(d) {
				off -= len(d)
				continue
			}
			n := min(len(d)-off, len(b))
			if msg[i].Reduce {
				red(msg[i])(d[off:off+n], b[:n])
			} else {
				copy(d[off:off+n], b[:n])
			}
			b, off = b[n:], 0
			if len(b) == 0 {
				return
			}
		}
	}
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
	x           executor // the call's executor: on the heap, it would be one allocation a call
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
	t.x = executor{}
	execTablesPool.Put(t)
}

// completeFront waits for the oldest receive and applies it.
func (x *executor) completeFront() error {
	p := x.pending[0]
	if err := x.g.await(x.ctx, p.r, x.g.ranks[p.xs[0].Peer], x.seq); err != nil {
		return err
	}
	// Shift rather than reslice: a slice advanced past its front loses
	// that capacity, and the next insert would allocate (a barrier's
	// every call did).
	copy(x.pending, x.pending[1:])
	x.pending[len(x.pending)-1] = inflight{}
	x.pending = x.pending[:len(x.pending)-1]
	if p.tmp != nil {
		src := p.tmp
		for _, t := range p.xs {
			dst := x.buf.at(t.Off, t.Len)
			if t.Reduce {
				x.reduceWith(t)(dst, src[:len(dst)])
			} else {
				copy(dst, src)
			}
			src = src[len(dst):]
		}
		x.free = append(x.free, p.tmp)
		x.scratchInUse -= len(p.tmp)
	}
	return nil
}

// place posts the receive of message msg (a run of transfers from one
// peer) of round j, with its tag, given that the sends of the rounds
// before current have been made. It reports false when msg must wait for
// those sends (only when mayWait).
func (x *executor) place(msg []algo.Xfer, tag uint32, j, current int, mayWait bool) bool {
	// In place (a reducing receive reduces each piece into the buffer as
	// it is read, while the piece is in cache) unless its round reads a
	// snapshot, an earlier receive still writes there, or a send of
	// the rounds before it (not yet sent) reads there.
	inPlace := !x.sched[j].Snapshot
	for _, p := range x.pending {
		if inPlace && p.round < j && overlapsAny(p.xs, msg) {
			inPlace = false
		}
	}
	for _, d := range x.deferred {
		if inPlace && d.round < j && overlapsAny(d.xs, msg) {
			inPlace = false
		}
	}
	if inPlace {
		for k := current; k < j; k++ {
			if overlapsAny(msg, x.sched[k].Sends) {
				if mayWait {
					return false
				}
				inPlace = false
			}
		}
	}
	n := 0
	for _, t := range msg {
		n += len(x.buf.at(t.Off, t.Len))
	}
	var tmp []byte
	if !inPlace {
		tmp = x.scratch(n)
		x.scratchInUse += len(tmp)
	}
	ep := x.g.world.ep
	peer := x.g.ranks[msg[0].Peer]
	key := transport.Key{Group: x.g.id, Seq: x.seq, Tag: tag}
	var r *transport.Receive
	switch t := msg[0]; {
	case !inPlace:
		r = ep.PostKey(peer, key, x.fp, tmp)
	case len(msg) > 1:
		r = ep.PostSinkKey(peer, key, x.fp, n, spread(msg, x.ranges(msg), x.reduceWith))
	case t.Reduce:
		dst := x.buf.at(t.Off, t.Len)
		rx := x.reduceWith(t)
		r = ep.PostSinkKey(peer, key, x.fp, len(dst), func(off int, b []byte) {
			rx(dst[off:off+len(b)], b)
		})
	default:
		r = ep.PostKey(peer, key, x.fp, x.buf.at(t.Off, t.Len))
	}
	f := inflight{r, msg, tmp, j}
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
	recvs := x.sched[j].Recvs
	for k := 0; k < len(recvs); {
		msg := algo.Message(recvs[k:])
		k += len(msg)
		peer := msg[0].Peer
		tag := x.recvd[peer]
		x.recvd[peer]++
		if !x.place(msg, tag, j, current, true) {
			x.deferred = append(x.deferred, later{msg, tag, j})
		}
	}
}

// retry posts the deferred receives whose sends are out.
func (x *executor) retry(current int) {
	kept := x.deferred[:0]
	for _, d := range x.deferred {
		if !x.place(d.xs, d.tag, d.round, current, d.round > current) {
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
