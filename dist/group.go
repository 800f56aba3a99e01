package dist

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/store"
	"github.com/godist/godist/transport"
)

// DefaultTimeout is how long a call waits for its peers before the group
// fails, as PyTorch's gloo default.
const DefaultTimeout = 30 * time.Minute

// world is what all groups of one process share: the endpoint, the store
// and the registry of groups by id.
type world struct {
	rank, size int
	ep         *transport.Endpoint
	store      store.Store
	backend    string
	closers    []func() error

	mu struct {
		sync.Mutex
		groups map[uint32]*Group
	}
}

func newWorld(rank, size int, ep *transport.Endpoint, st store.Store, backend string) *world {
	w := &world{rank: rank, size: size, ep: ep, store: st, backend: backend}
	w.mu.groups = map[uint32]*Group{}
	ep.SetHandlers(transport.Handlers{Abort: w.onAbort, PeerDown: w.onPeerDown, Unexpected: w.onUnexpected})
	return w
}

func (w *world) register(g *Group) {
	w.mu.Lock()
	w.mu.groups[g.id] = g
	w.mu.Unlock()
}

func (w *world) groups() []*Group {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*Group, 0, len(w.mu.groups))
	for _, g := range w.mu.groups {
		out = append(out, g)
	}
	return out
}

// onPeerDown fails every group that has the lost rank as a member. A peer
// that closed cleanly (Destroy, or a normal exit) fails nothing by itself:
// its frames before the goodbye are still delivered, and only a call that
// needs it again fails, naming it.
func (w *world) onPeerDown(e *transport.PeerError) {
	if errors.Is(e, transport.ErrPeerClosed) {
		return
	}
	for _, g := range w.groups() {
		if g.groupRank(e.Rank) >= 0 {
			g.failAndTell(&RankError{Rank: e.Rank, Op: "group", Err: e}, fmt.Sprintf("down %d %v", e.Rank, e.Err))
		}
	}
}

// onAbort handles a control frame: a peer's probe (it has waited a while
// for this rank in a call) or an abort (a peer failed the group).
func (w *world) onAbort(src int, key transport.Key, reason string) {
	w.mu.Lock()
	g := w.mu.groups[key.Group&^p2pBit]
	w.mu.Unlock()
	if g == nil {
		return
	}
	var fp uint64
	if n, _ := fmt.Sscanf(reason, "probe %x", &fp); n == 1 {
		g.onProbe(src, key.Seq, fp)
		return
	}
	err := decodeAbort(src, key, reason)
	var re *RankError
	if errors.As(err, &re) {
		// Pass a lost rank on, so that a member that hears of it only
		// through this rank's goodbye still learns the root cause first.
		g.failAndTell(err, reason)
		return
	}
	g.fail(err)
}

// failAndTell fails the group and, if that was its first failure, tells
// the other members why before this rank's own exit or goodbye can reach
// them. It does not send from the calling goroutine (the transport's
// reader); calls wait for it, briefly, before returning the failure.
func (g *Group) failAndTell(err error, reason string) {
	if !g.fail(err) {
		return
	}
	done := make(chan struct{})
	g.mu.Lock()
	g.mu.aborted = done
	g.mu.Unlock()
	go func() {
		defer close(done)
		g.abortAll(reason)
	}()
}

// Group is a process group: a set of ranks that run collectives together.
// Every member must issue the same collectives in the same order; the
// order is checked on every message. A Group is safe for concurrent use:
// calls are numbered in the order they are issued.
//
// When a member dies, or a call finds the members out of step, the group
// fails: every pending and later call returns an error naming the rank and
// the cause. A failed group stays failed; build a new one.
type Group struct {
	world   *world
	id      uint32
	ranks   []int // global rank of each member, ascending
	rank    int   // this process's rank in the group
	timeout time.Duration

	sharedReduces atomic.Int64 // all-reduces done through shared memory (sharedreduce.go)

	ctx    context.Context // cancelled, with the failure as cause, when the group fails
	cancel context.CancelCauseFunc

	mu struct {
		sync.Mutex
		seq       uint64
		err       error
		active    map[uint64]uint64          // fingerprints of the calls in flight, by sequence number
		recent    map[uint64]uint64          // fingerprints of recently finished calls
		children  uint32                     // subgroups made from this group so far
		aborted   chan struct{}              // closed when the peers have been told of a failure
		schedules map[schedKey]algo.Schedule // this rank's schedules, by call
		p2pSend   map[p2pKey]uint64
		p2pRecv   map[p2pKey]uint64
		// The group timeout: each call in flight and when it must end;
		// one timer, armed for the earliest end while any call is in
		// flight (a context with its own timer per call costs a small
		// collective a tenth of its time).
		deadlines map[uint64]callDeadline
		waitingOn map[uint64]int // the global rank each call in flight last waited for
		watchdog  *time.Timer
		watching  bool
		shared    []*sharedBuf // tensors every member has mapped from every other (sharedreduce.go)
	}
}

type callDeadline struct {
	at time.Time
	c  call
}

// watch enters call seq into the group timeout's watch.
func (g *Group) watch(seq uint64, c call) {
	if g.timeout <= 0 {
		return
	}
	at := time.Now().Add(g.timeout)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.deadlines[seq] = callDeadline{at, c}
	if g.mu.watching {
		return // armed for an earlier end; it re-arms when it fires
	}
	g.mu.watching = true
	if g.mu.watchdog == nil {
		g.mu.watchdog = time.AfterFunc(g.timeout, g.expire)
	} else {
		g.mu.watchdog.Reset(g.timeout)
	}
}

// unwatch takes call seq out of the watch.
func (g *Group) unwatch(seq uint64) {
	if g.timeout <= 0 {
		return
	}
	g.mu.Lock()
	delete(g.mu.deadlines, seq)
	g.mu.Unlock()
}

// expire fails the group when a call has outlived the timeout, and
// otherwise re-arms the watchdog for the earliest end.
func (g *Group) expire() {
	now := time.Now()
	g.mu.Lock()
	var first callDeadline
	var firstSeq uint64
	for seq, d := range g.mu.deadlines {
		if first.at.IsZero() || d.at.Before(first.at) {
			first, firstSeq = d, seq
		}
	}
	switch {
	case first.at.IsZero():
		g.mu.watching = false
		g.mu.Unlock()
	case first.at.After(now):
		g.mu.watchdog.Reset(first.at.Sub(now))
		g.mu.Unlock()
	default:
		g.mu.watching = false
		g.mu.Unlock()
		g.fail(&TimeoutError{Op: first.c.String(), Timeout: g.timeout.String(), Waiting: g.waitedFor(firstSeq), seq: firstSeq})
	}
}

// waitedFor is the rank call seq last waited for, for a TimeoutError.
func (g *Group) waitedFor(seq uint64) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, ok := g.mu.waitingOn[seq]; ok {
		return []int{r}
	}
	return nil
}

// probeAfter is how long a receive waits before asking the peer what call
// it is in. A rank that issued a different collective may never send the
// frame that would show the mismatch (each side waits for the other); the
// probe finds it within this delay instead of at the group timeout.
var probeAfter = 500 * time.Millisecond

// recentCalls is how many finished calls a group remembers, to recognise
// frames that no call of this rank will ever receive.
const recentCalls = 256

// onUnexpected checks a frame that arrived before its receive was posted.
// A frame for a call this rank is in with another fingerprint, or for a
// call it has finished (which therefore never expected it), means the
// ranks issued different calls: a broadcast with two roots, say, where
// both think they send and nobody receives.
func (w *world) onUnexpected(src int, h *transport.Header) {
	if h.Key.Group&p2pBit != 0 {
		return
	}
	w.mu.Lock()
	g := w.mu.groups[h.Key.Group]
	w.mu.Unlock()
	if g == nil {
		return
	}
	g.mu.Lock()
	mine, active := g.mu.active[h.Key.Seq]
	if !active {
		mine, active = g.mu.recent[h.Key.Seq]
	}
	g.mu.Unlock()
	if !active || mine == h.FP {
		return
	}
	fe := &transport.FingerprintError{Src: src, Key: h.Key, Got: h.FP, Want: mine}
	g.fail(asDesync(g, fe))
	g.abortAll(encodeAbort(fe))
}

// onProbe answers a peer that has waited for this rank in call seq with
// fingerprint fp: if this rank is in call seq with another fingerprint,
// the ranks are out of step and both fail now.
func (g *Group) onProbe(src int, seq, fp uint64) {
	g.mu.Lock()
	mine, ok := g.mu.active[seq]
	if !ok {
		mine, ok = g.mu.recent[seq]
	}
	g.mu.Unlock()
	if !ok || mine == fp {
		return // not there yet: the peer keeps waiting
	}
	fe := &transport.FingerprintError{Src: src, Key: transport.Key{Group: g.id, Seq: seq}, Got: fp, Want: mine}
	g.fail(asDesync(g, fe))
	g.abortAll(encodeAbort(fe))
}

// await waits for a posted receive from global rank peer, probing the peer
// if the wait grows long.
func (g *Group) await(ctx context.Context, r *transport.Receive, peer int, seq, fp uint64) error {
	if r.Done() {
		_, err := r.Wait(ctx)
		return err
	}
	g.mu.Lock()
	if g.mu.waitingOn == nil {
		g.mu.waitingOn = map[uint64]int{}
	}
	g.mu.waitingOn[seq] = peer
	g.mu.Unlock()
	var finished atomic.Bool
	t := time.AfterFunc(probeAfter, func() {
		if !finished.Load() && ctx.Err() == nil {
			sctx, c := context.WithTimeout(context.Background(), time.Second)
			defer c()
			_ = g.world.ep.Abort(sctx, peer, transport.Key{Group: g.id, Seq: seq}, fmt.Sprintf("probe %x", fp))
		}
	})
	_, err := r.Wait(ctx)
	finished.Store(true)
	t.Stop()
	if err == nil {
		g.mu.Lock()
		delete(g.mu.waitingOn, seq)
		g.mu.Unlock()
	}
	return err
}

type p2pKey struct {
	peer int // group rank
	tag  uint32
}

// p2pBit marks the group ids of point-to-point frames, whose sequence
// numbers count per peer and tag rather than per call.
const p2pBit = 1 << 31

func newGroup(w *world, id uint32, ranks []int, timeout time.Duration) *Group {
	g := &Group{world: w, id: id, ranks: ranks, rank: slices.Index(ranks, w.rank), timeout: timeout}
	g.ctx, g.cancel = context.WithCancelCause(context.Background())
	g.mu.active = map[uint64]uint64{}
	g.mu.schedules = map[schedKey]algo.Schedule{}
	g.mu.recent = map[uint64]uint64{}
	g.mu.p2pSend = map[p2pKey]uint64{}
	g.mu.p2pRecv = map[p2pKey]uint64{}
	g.mu.deadlines = map[uint64]callDeadline{}
	w.register(g)
	return g
}

// Rank returns this process's rank in the group.
func (g *Group) Rank() int { return g.rank }

// Size returns the number of members.
func (g *Group) Size() int { return len(g.ranks) }

// Ranks returns the members' global ranks, ascending.
func (g *Group) Ranks() []int { return slices.Clone(g.ranks) }

// GlobalRank returns the global rank of group rank r.
func (g *Group) GlobalRank(r int) int { return g.ranks[r] }

// Backend names the transport ("tcp" or "inproc").
func (g *Group) Backend() string { return g.world.backend }

// Err returns the error that failed the group, or nil.
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.err
}

func (g *Group) groupRank(global int) int { return slices.Index(g.ranks, global) }

// fail marks the group failed and cancels every call in flight. It
// reports whether this was the group's first failure.
func (g *Group) fail(err error) bool {
	g.mu.Lock()
	if g.mu.err != nil {
		g.mu.Unlock()
		return false
	}
	g.mu.err = err
	g.mu.Unlock()
	g.cancel(err)
	return true
}

// begin numbers a call, or refuses it when the group has failed.
func (g *Group) begin() (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.err != nil {
		return 0, fmt.Errorf("%w: %w", ErrGroupFailed, g.mu.err)
	}
	g.mu.seq++
	return g.mu.seq, nil
}

// run executes one call: it numbers it, bounds it by the group timeout
// and by the group's failure, and turns transport errors into dist errors
// (failing the group when the call cannot have completed everywhere).
func (g *Group) run(ctx context.Context, c call, fn func(ctx context.Context, seq uint64) error) error {
	seq, err := g.begin()
	if err != nil {
		return err
	}
	return g.runSeq(ctx, c, seq, fn)
}

func (g *Group) runSeq(ctx context.Context, c call, seq uint64, fn func(ctx context.Context, seq uint64) error) error {
	if seq != 0 {
		g.mu.Lock()
		g.mu.active[seq] = c.fingerprint()
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			g.mu.recent[seq] = g.mu.active[seq]
			delete(g.mu.recent, seq-recentCalls)
			delete(g.mu.active, seq)
			delete(g.mu.waitingOn, seq)
			g.mu.Unlock()
		}()
	}
	// The call ends at the earliest of: the caller's cancellation or
	// deadline, the group timeout, and the group's failure.
	var opctx context.Context
	if ctx.Done() == nil {
		// A caller that never cancels (async calls, most loops): derive
		// straight from the group's context, one context and one timer.
		opctx = g.ctx
	} else {
		c, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(g.ctx, func() { cancel(context.Cause(g.ctx)) })
		defer stop()
		opctx = c
	}
	g.watch(seq, c)
	err := fn(opctx, seq)
	g.unwatch(seq)
	if err == nil {
		return nil
	}
	return g.classify(ctx, opctx, c, seq, err)
}

// flushAbort waits (at most a second) until the peers have been told why
// the group failed, so that a process exiting on the error does not beat
// the news.
func (g *Group) flushAbort() {
	g.mu.Lock()
	ch := g.mu.aborted
	g.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-time.After(time.Second):
		}
	}
}

// classify explains a failed call and fails the group.
func (g *Group) classify(user, opctx context.Context, c call, seq uint64, err error) error {
	if cause := context.Cause(g.ctx); cause != nil {
		if te, ok := cause.(*TimeoutError); ok && te.seq == seq {
			return te // this call timed out: it tells its own story
		}
		g.flushAbort()
		return fmt.Errorf("dist: %v: %w", c, cause)
	}
	var fe *transport.FingerprintError
	if errors.As(err, &fe) {
		d := asDesync(g, err).(*DesyncError)
		g.fail(d)
		g.abortAll(encodeAbort(fe))
		return d
	}
	var pe *transport.PeerError
	if errors.As(err, &pe) {
		re := &RankError{Rank: pe.Rank, Op: c.String(), Err: pe}
		if g.fail(re) && !errors.Is(pe, transport.ErrPeerClosed) {
			g.abortAll(fmt.Sprintf("down %d %v", pe.Rank, pe.Err))
		}
		g.flushAbort()
		return re
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		if user.Err() != nil && !errors.Is(user.Err(), context.DeadlineExceeded) {
			// The caller gave up; the peers may be mid-call, so the group
			// cannot continue either.
			g.fail(fmt.Errorf("dist: %v cancelled by the caller: %w", c, user.Err()))
			return fmt.Errorf("dist: %v: %w", c, user.Err())
		}
		limit := g.timeout.String()
		if d, ok := user.Deadline(); ok && user.Err() != nil {
			limit = "the caller's deadline (" + (-time.Until(d)).Round(time.Millisecond).String() + " ago)"
		}
		te := &TimeoutError{Op: c.String(), Timeout: limit, Waiting: g.waitedFor(seq)}
		g.fail(te)
		return te
	}
	err = fmt.Errorf("dist: %v: %w", c, err)
	if g.fail(err) {
		// A size mismatch, say: the peers are waiting for something this
		// rank will not do; tell them.
		g.abortAll(err.Error())
	}
	return err
}

// abortAll tells every other member that the group failed.
func (g *Group) abortAll(reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, r := range g.ranks {
		if r != g.world.rank {
			_ = g.world.ep.Abort(ctx, r, transport.Key{Group: g.id}, reason)
		}
	}
}

// encodeAbort carries a desync to the other members: they rebuild the
// DesyncError from the two fingerprints.
func encodeAbort(fe *transport.FingerprintError) string {
	return fmt.Sprintf("desync %d %d %d %x %x", fe.Key.Group, fe.Key.Seq, fe.Src, fe.Got, fe.Want)
}

func decodeAbort(src int, key transport.Key, reason string) error {
	var grp uint32
	var seq uint64
	var other int
	var got, want uint64
	var lost int
	var cause string
	if n, _ := fmt.Sscanf(reason, "down %d", &lost); n == 1 {
		if _, after, ok := strings.Cut(reason, fmt.Sprintf("down %d ", lost)); ok {
			cause = after
		}
		return &RankError{Rank: lost, Op: fmt.Sprintf("group (rank %d saw it go)", src), Err: errors.New(cause)}
	}
	if n, _ := fmt.Sscanf(reason, "desync %d %d %d %x %x", &grp, &seq, &other, &got, &want); n == 5 {
		// src found that `other` (maybe us) sent `got` where it expected
		// `want`.
		return &DesyncError{Group: grp, Seq: seq, Rank: src, Peer: other, Mine: decodeCall(want).String(), Theirs: decodeCall(got).String()}
	}
	return fmt.Errorf("dist: rank %d aborted the group: %s", src, reason)
}

// Work is the handle of an asynchronous call. It is done when the call
// has completed on this rank, with or without an error.
type Work struct {
	done chan struct{}
	err  error
	src  int // the sender, for a receive
}

func goWork(fn func() error) *Work {
	w := &Work{done: make(chan struct{}), src: -1}
	go func() {
		w.err = fn()
		close(w.done)
	}()
	return w
}

func doneWork(err error) *Work {
	w := &Work{done: make(chan struct{}), err: err, src: -1}
	close(w.done)
	return w
}

// Source returns the group rank a completed receive got its message from
// (-1 for other calls, or before completion).
func (w *Work) Source() int {
	select {
	case <-w.done:
		return w.src
	default:
		return -1
	}
}

// Wait blocks until the call completes and returns its error, or returns
// ctx's error if ctx ends first (the call goes on).
func (w *Work) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the call completes.
func (w *Work) Done() <-chan struct{} { return w.done }

// Err returns the call's error once Done is closed (nil before).
func (w *Work) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

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

// execute runs a schedule over the transport.
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
func (g *Group) execute(ctx context.Context, seq uint64, c call, sched algo.Schedule, buf space, es int, red, final reducer) error {
	const (
		lookahead     = 2
		maxAhead      = 8
		scratchBudget = 16 << 20
	)
	ep := g.world.ep
	fp := c.fingerprint()
	sent, recvd := make([]uint32, len(g.ranks)), make([]uint32, len(g.ranks))
	type inflight struct {
		r     *transport.Receive
		x     algo.Xfer
		tmp   []byte // nil: the frame lands in place
		round int
	}
	var pending []inflight
	var free [][]byte
	scratchInUse := 0 // bytes of pending receives' scratch
	scratch := func(n int) []byte {
		for i, b := range free {
			if cap(b) >= n {
				free = append(free[:i], free[i+1:]...)
				return b[:n]
			}
		}
		return getScratch(n)
	}
	defer func() {
		for _, b := range free {
			putScratch(b)
		}
	}()
	// reduceWith is the kernel of a reducing receive: final for one that
	// completes its range, when the caller gave one.
	reduceWith := func(x algo.Xfer) reducer {
		if x.Final && final != nil {
			return final
		}
		return red
	}
	fail := func(err error) error {
		withdraw(pending, func(p inflight) *transport.Receive { return p.r })
		return err
	}
	// completeFront waits for the oldest receive and applies it.
	completeFront := func() error {
		p := pending[0]
		if err := g.await(ctx, p.r, g.ranks[p.x.Peer], seq, fp); err != nil {
			return err
		}
		pending = pending[1:]
		if p.tmp != nil {
			dst := buf.at(p.x.Off, p.x.Len)
			if p.x.Reduce {
				reduceWith(p.x)(dst, p.tmp)
			} else {
				copy(dst, p.tmp)
			}
			free = append(free, p.tmp)
			scratchInUse -= len(p.tmp)
		}
		return nil
	}
	overlaps := func(a, b algo.Xfer) bool {
		return a.Len > 0 && b.Len > 0 && a.Off < b.Off+b.Len && b.Off < a.Off+a.Len
	}
	// A receive that could land in place but for a send of an earlier
	// round not yet made (which reads the same bytes) waits here until that
	// send is out, rather than landing in scratch and being copied.
	type later struct {
		x     algo.Xfer
		tag   uint32
		round int
	}
	var deferred []later
	// place posts receive x of round j (with its tag), given that the sends
	// of the rounds before current have been made. It reports false when x
	// must wait for those sends.
	place := func(x algo.Xfer, tag uint32, j, current int, mayWait bool) bool {
		dst := buf.at(x.Off, x.Len)
		// In place (a reducing receive reduces each piece into dst as it
		// is read, while the piece is in cache) unless its round reads a
		// snapshot, an earlier receive still writes there, or a send of
		// the rounds before it (not yet sent) reads there.
		inPlace := !sched[j].Snapshot
		for _, p := range pending {
			if inPlace && p.round < j && overlaps(p.x, x) {
				inPlace = false
			}
		}
		for _, d := range deferred {
			if inPlace && d.round < j && overlaps(d.x, x) {
				inPlace = false
			}
		}
		if inPlace {
			for k := current; k < j; k++ {
				for _, y := range sched[k].Sends {
					if overlaps(x, y) {
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
			tmp = scratch(len(dst))
			dst = tmp
			scratchInUse += len(tmp)
		}
		peer := g.ranks[x.Peer]
		key := transport.Key{Group: g.id, Seq: seq, Tag: tag}
		var r *transport.Receive
		if x.Reduce && inPlace {
			rx := reduceWith(x)
			r = ep.PostSink(peer, transport.ExactMatch(peer, key), fp, len(dst), func(off int, b []byte) {
				rx(dst[off:off+len(b)], b)
			})
		} else {
			r = ep.Post(peer, transport.ExactMatch(peer, key), fp, dst)
		}
		f := inflight{r, x, tmp, j}
		// Keep pending in round order: receives are applied oldest first.
		at := len(pending)
		for at > 0 && pending[at-1].round > j {
			at--
		}
		pending = slices.Insert(pending, at, f)
		return true
	}
	post := func(j, current int) {
		for _, x := range sched[j].Recvs {
			tag := recvd[x.Peer]
			recvd[x.Peer]++
			if !place(x, tag, j, current, true) {
				deferred = append(deferred, later{x, tag, j})
			}
		}
	}
	// retry posts the deferred receives whose sends are out.
	retry := func(current int) {
		kept := deferred[:0]
		for _, d := range deferred {
			if !place(d.x, d.tag, d.round, current, d.round > current) {
				kept = append(kept, d)
			}
		}
		deferred = kept
	}
	posted := 0
	for i, round := range sched {
		if len(deferred) > 0 {
			retry(i)
		}
		for ; posted < len(sched) && (posted <= i+lookahead || posted <= i+maxAhead && scratchInUse < scratchBudget); posted++ {
			post(posted, i)
		}
		for _, x := range round.Sends {
			// Apply the earlier rounds' receives that write what this
			// send reads (in order).
			for {
				need := false
				for _, p := range pending {
					// An empty transfer carries no data, only order (a
					// barrier's): it waits for every earlier receive.
					if p.round < i && (x.Len == 0 || p.x.Len == 0 || overlaps(p.x, x)) {
						need = true
						break
					}
				}
				if !need {
					break
				}
				if err := completeFront(); err != nil {
					return fail(err)
				}
			}
			tag := sent[x.Peer]
			sent[x.Peer]++
			key := transport.Key{Group: g.id, Seq: seq, Tag: tag}
			if err := ep.Send(ctx, g.ranks[x.Peer], key, fp, buf.at(x.Off, x.Len)); err != nil {
				return fail(err)
			}
		}
	}
	for len(pending) > 0 {
		if err := completeFront(); err != nil {
			return fail(err)
		}
	}
	return nil
}

// Scratch buffers for receives are recycled across calls by size class
// (powers of two): a training step's all-reduces would otherwise allocate
// and zero megabytes each time.
var scratchPools [48]sync.Pool

func sizeClass(n int) int {
	c := 0
	for 1<<c < n {
		c++
	}
	return c
}

func getScratch(n int) []byte {
	c := sizeClass(n)
	if b, ok := scratchPools[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<c)
}

func putScratch(b []byte) {
	c := sizeClass(cap(b))
	if cap(b) != 1<<c {
		return
	}
	scratchPools[c].Put(&b)
}

// withdraw cancels posted receives that will not be waited for.
func withdraw[T any](ps []T, r func(T) *transport.Receive) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, p := range ps {
		r(p).Wait(ctx)
	}
}

// Then returns a Work that completes when w has, after running fn on
// success (a communication hook decompressing its result, say). fn runs at
// most once, on the goroutine that first observes w's completion.
func (w *Work) Then(fn func() error) *Work {
	return goWork(func() error {
		<-w.done
		if w.err != nil {
			return w.err
		}
		return fn()
	})
}

// Go runs fn on a new goroutine and returns its Work: for code that
// composes several calls into one asynchronous step (a communication
// hook). The calls fn issues are numbered when fn issues them, so fn must
// issue them in the same order on every member.
func Go(fn func() error) *Work { return goWork(fn) }
