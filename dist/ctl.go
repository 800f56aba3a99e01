package dist

import (
	"context"
	"encoding/binary"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/godist/godist/internal/futex"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// Small collectives in shared memory.
//
// When every member of a group shares this host's memory, barriers and
// all-reduces, broadcasts, all-gathers and reduce-scatters of at most ctlMax
// bytes a member
// go through a control block instead of the transport: a tensor from
// NewSharedTensor in which each member owns two slots, used by calls of
// even and odd ordinals (the calls that go through the block are
// numbered in the order they are issued, the same on every member, and
// run one at a time in that order). In call k a member writes its input
// (if any) into its slot k%2, then publishes the slot's header (the
// call's fingerprint, the length, then k), and waits until every other
// member has published k in its own slot k%2; then it reads what it needs of
// theirs (all of them, in rank order, for an all-reduce, so that every
// member sums in the same order and all get the same bits). A frame
// through the transport is a copy into a ring, a header, a reader that
// polls, a handoff to the waiting call; here it is a store and a load of
// one cache line each way.
//
// Why two slots are enough: a member writes slot p again in call k+2
// only after it has seen every other member's header of call k+1, which
// each wrote after it had finished reading everyone's slots of call k.
// Every call waits on every member, broadcasts too, for that reason.
//
// Waiting polls the headers (yielding to other goroutines), then sleeps
// on the header's sequence word (a futex) that the writer wakes; it ends
// with the call's context, which the group's failure (a member's death,
// a timeout) cancels, so failures and timeouts reach these calls as they
// reach any other. A header with the right sequence number and another
// fingerprint is a desync: a *transport.FingerprintError, explained as
// the transport's are.
const (
	ctlMax       = 4 << 10 // the largest input a member puts in its slot
	ctlHead      = 64      // seq (8), fingerprint (8), length (4), then padding to a cache line
	ctlSlotBytes = ctlHead + ctlMax
	// ctlWaiters (after the slots) counts members asleep on this
	// member's headers.
	ctlWaiters = 2 * ctlSlotBytes
	ctlBytes   = ctlWaiters + 64
	ctlSpin    = 50 * time.Microsecond // polling before sleeping
	ctlTight   = 2000                  // loads of a header before anything else (about 1-2 µs)
	// ctlYieldSpin is the polling of a member that yields its CPU between
	// polls (more ranks than CPUs): sleeping costs a wakeup through the
	// scheduler, tens of µs, where the others arrive within a few
	// timeslices of yielding.
	ctlYieldSpin = time.Millisecond
	ctlNap       = time.Millisecond // a sleep's bound, to look at the context
)

// ctlBlock is a group's control block.
type ctlBlock struct {
	sb   *sharedBuf
	mine []byte // this member's copy
}

// InitSmallCollectives makes g's control block of small collectives
// (ctl.go) when every member shares this host's memory; afterwards
// barriers and small all-reduces, broadcasts, all-gathers and
// reduce-scatters go through it. It is a collective: every member must
// call it, in the same order relative to its other calls. dist.Init does
// it for the groups it and their NewGroup and Split make
// (Options.SmallCollectives); groups from FromEndpoint have none unless
// this is called. Where the members do not all share memory it does
// nothing and returns nil.
func (g *Group) InitSmallCollectives(ctx context.Context) error {
	if g.Size() == 1 || g.ctl.Load() != nil {
		return nil
	}
	pm, ok := g.world.ep.PeerMemory()
	if !ok {
		return nil
	}
	for q, peer := range g.ranks {
		if q != g.rank && !pm.SharesMemoryWith(peer) {
			return nil
		}
	}
	t, err := g.NewSharedTensor(ctx, tensor.Uint8, ctlBytes)
	if err != nil {
		return err
	}
	if sb := g.sharedOf(t); sb != nil {
		g.ctl.Store(&ctlBlock{sb: sb, mine: t.Bytes()})
	}
	return nil
}

// initCtl is InitSmallCollectives for the groups of a world that wants
// it (Options.SmallCollectives).
func (g *Group) initCtl(ctx context.Context) error {
	if g == nil || g.world.noCtl {
		return nil
	}
	return g.InitSmallCollectives(ctx)
}

// sharedOf returns the sharedBuf of a tensor from NewSharedTensor, or nil.
func (g *Group) sharedOf(t *tensor.Tensor) *sharedBuf {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, sb := range g.mu.shared {
		if sb.t == t {
			return sb
		}
	}
	return nil
}

// ctlFits reports whether a call whose largest input is bytes goes
// through the control block (decided when the call is issued: call.ctl).
func (g *Group) ctlFits(bytes int) bool {
	return bytes <= ctlMax && g.ctl.Load() != nil
}

// ctlIssueLocked numbers call seq among the control-block calls (g.mu is
// held, in beginCollective: calls are numbered in the order they are
// issued).
func (g *Group) ctlIssueLocked(seq uint64) {
	g.mu.ctlIssued++
	if g.mu.ctlOrd == nil {
		g.mu.ctlOrd = map[uint64]uint64{}
	}
	g.mu.ctlOrd[seq] = g.mu.ctlIssued
}

// ctlStart returns call seq's ordinal once every earlier control-block
// call of this member has ended (they run one at a time, in order: the
// two slots of a member are safe to reuse only so), or the context's
// error.
func (g *Group) ctlStart(ctx context.Context, seq uint64) (uint64, error) {
	g.mu.Lock()
	ord := g.mu.ctlOrd[seq]
	delete(g.mu.ctlOrd, seq)
	g.mu.Unlock()
	for {
		g.ctlTurn.Lock()
		if g.ctlTurn.ended+1 == ord {
			g.ctlTurn.Unlock()
			return ord, nil
		}
		if g.ctlTurn.changed == nil {
			g.ctlTurn.changed = make(chan struct{})
		}
		ch := g.ctlTurn.changed
		g.ctlTurn.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
}

// ctlEnd records that the control-block call ord has ended, whatever
// its outcome (a failed call fails the group, and the calls after it
// then end at once).
func (g *Group) ctlEnd(ord uint64) {
	g.ctlTurn.Lock()
	defer g.ctlTurn.Unlock()
	if ord > g.ctlTurn.ended {
		g.ctlTurn.ended = ord
	}
	if g.ctlTurn.changed != nil {
		close(g.ctlTurn.changed)
		g.ctlTurn.changed = nil
	}
}

func ctlSeq(slot []byte) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&slot[0])) }

// ctlSeqLow is the low half of a slot's sequence word, which sleepers
// wait on.
func ctlSeqLow(slot []byte) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&slot[0])) }

func ctlSlotOf(mem []byte, seq uint64) []byte {
	off := int(seq%2) * ctlSlotBytes
	return mem[off : off+ctlSlotBytes]
}

// ctlCollect runs the first half of call seq through the control block:
// this member's input is in (at most ctlMax bytes, may be nil), and
// every member's but root's must be n bytes long (root's, when root >=
// 0, is rootN bytes). It returns every member's input (this member's
// copy in its slot included), in rank order, which stay valid until
// ctlDone(ord), which the caller must call whatever the error.
func (g *Group) ctlCollect(ctx context.Context, seq uint64, c call, in []byte, n, root, rootN int, slots [][]byte) (uint64, error) {
	ord, err := g.ctlStart(ctx, seq)
	if err != nil {
		return 0, err
	}
	cb := g.ctl.Load()
	g.sharedCalls.Add(1)
	fp := c.fingerprint()
	mine := ctlSlotOf(cb.mine, ord)
	copy(mine[ctlHead:], in)
	binary.LittleEndian.PutUint64(mine[8:], fp)
	binary.LittleEndian.PutUint32(mine[16:], uint32(len(in)))
	ctlSeq(mine).Store(ord)
	if (*atomic.Uint32)(unsafe.Pointer(&cb.mine[ctlWaiters])).Load() != 0 {
		futex.Wake(ctlSeqLow(mine), 1<<30)
	}
	pm := cb.sb.pm
	pm.LockPeerRegions()
	var waited bool
	for q := range g.Size() {
		s := mine
		if q != g.rank {
			mem := pm.PeerRegion(g.ranks[q], cb.sb.ids[q])
			if len(mem) < ctlBytes {
				return ord, &transport.PeerError{Rank: g.ranks[q], Err: errCtlUnmapped}
			}
			s = ctlSlotOf(mem, ord)
			if ctlSeq(s).Load() != ord {
				if err := g.ctlWait(ctx, seq, ord, q, mem, s, &waited); err != nil {
					return ord, err
				}
			}
			if theirs := binary.LittleEndian.Uint64(s[8:]); theirs != fp {
				return ord, &transport.FingerprintError{Src: g.ranks[q], Key: transport.Key{Group: g.id, Seq: seq}, Got: theirs, Want: fp}
			}
		}
		want := n
		if q == root {
			want = rootN
		}
		if got := binary.LittleEndian.Uint32(s[16:]); int64(got) != int64(want) {
			return ord, &transport.LengthError{Src: g.ranks[q], Key: transport.Key{Group: g.id, Seq: seq}, Got: int64(got), Want: int64(want)}
		}
		slots[q] = s[ctlHead : ctlHead+want]
	}
	if waited {
		g.mu.Lock()
		g.mu.st.received(g.mu.st.byseq[seq])
		g.mu.Unlock()
	}
	return ord, nil
}

// ctlDone ends a call that ctlCollect began (ord 0: it never started).
func (g *Group) ctlDone(ord uint64) {
	if ord == 0 {
		return
	}
	g.ctl.Load().sb.pm.UnlockPeerRegions()
	g.ctlEnd(ord)
}

// ctlSlots returns room for a group's slots, on the stack for groups of
// up to 8 members.
func ctlSlots(buf *[8][]byte, size int) [][]byte {
	if size <= len(buf) {
		return buf[:size]
	}
	return make([][]byte, size)
}

// ctlWait waits until member q publishes call ord (seq) in slot s of its block
// mem: polling, then asleep on the sequence word; the call's state
// machine hears of the wait (its timeouts and probes), once per call.
func (g *Group) ctlWait(ctx context.Context, seq, ord uint64, q int, mem, s []byte, waited *bool) error {
	word := ctlSeq(s)
	yield := g.world.yield
	tight := ctlTight
	if yield {
		tight = 0 // the member awaited may need this CPU
	}
	// First a tight poll: the others usually arrive within a microsecond
	// or two, and a pass through the scheduler (Gosched) or the call's
	// state machine costs a fraction of that each.
	for range tight {
		if word.Load() == ord {
			return nil
		}
	}
	if !*waited {
		*waited = true
		now := time.Now()
		g.mu.Lock()
		out := g.mu.st.wait(g.mu.st.byseq[seq], g.ranks[q], now)
		g.armLocked(out.Arm, now)
		g.mu.Unlock()
	}
	start := time.Now()
	spin := ctlSpin
	if yield {
		spin = ctlYieldSpin
	}
	for polls := 0; ; polls++ {
		for range max(tight/8, 1) {
			if word.Load() == ord {
				return nil
			}
		}
		if polls%16 == 15 || yield {
			if err := g.ctlGone(ctx, q, word, ord); err != nil {
				return err
			}
			if time.Since(start) > spin {
				break
			}
		}
		runtime.Gosched()
		if yield {
			// More ranks than CPUs: the member this one waits for may
			// need this CPU to get there.
			osYield()
		}
	}
	waiters := (*atomic.Uint32)(unsafe.Pointer(&mem[ctlWaiters]))
	for nap := 20 * time.Microsecond; ; nap = min(2*nap, ctlNap) {
		low := ctlSeqLow(s)
		old := low.Load()
		waiters.Add(1)
		if word.Load() != ord {
			// Naps growing to ctlNap: a thread asleep in a futex keeps
			// its P until the runtime's monitor takes it back, and the
			// process's other goroutines may need it.
			futex.Wait(low, old, nap)
		}
		waiters.Add(^uint32(0))
		runtime.Gosched()
		if word.Load() == ord {
			return nil
		}
		if err := g.ctlGone(ctx, q, word, ord); err != nil {
			return err
		}
	}
}

// ctlGone returns why a wait for member q's call ord must end: the
// call's context ended (the group failed, a timeout), or q's connection
// ended without q having published the call (a member that closes
// cleanly leaves the group alone, as over the transport, but fails the
// calls that wait on it).
func (g *Group) ctlGone(ctx context.Context, q int, word *atomic.Uint64, ord uint64) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := g.world.ep.PeerErr(g.ranks[q]); err != nil && word.Load() != ord {
		return err
	}
	return nil
}

var (
	errCtlUnmapped = errorString("its control block is no longer mapped (connection ended)")
)

type errorString string

func (e errorString) Error() string { return string(e) }

// barrierCtl is a barrier through the control block.
func (g *Group) barrierCtl(ctx context.Context, seq uint64, c call) error {
	var buf [8][]byte
	ord, err := g.ctlCollect(ctx, seq, c, nil, 0, -1, 0, ctlSlots(&buf, g.Size()))
	g.ctlDone(ord)
	return err
}

// allReduceCtl all-reduces b through the control block: every member
// reduces all the inputs in rank order, so all get the same bits.
func (g *Group) allReduceCtl(ctx context.Context, seq uint64, c call, b []byte, red, final reducer, op ReduceOp) error {
	var buf [8][]byte
	slots := ctlSlots(&buf, g.Size())
	ord, err := g.ctlCollect(ctx, seq, c, b, len(b), -1, 0, slots)
	if err == nil {
		last := len(slots) - 1
		copy(b, slots[0])
		for q := 1; q <= last; q++ {
			if q == last && final != nil {
				final(b, slots[q])
			} else {
				red(b, slots[q])
			}
		}
	}
	g.ctlDone(ord)
	if err == nil && op == Avg && final == nil {
		finishAvg(b, c.dtype, g.Size())
	}
	return err
}

// broadcastCtl broadcasts b from root through the control block.
func (g *Group) broadcastCtl(ctx context.Context, seq uint64, c call, b []byte, root int) error {
	var in []byte
	if g.rank == root {
		in = b
	}
	var buf [8][]byte
	slots := ctlSlots(&buf, g.Size())
	ord, err := g.ctlCollect(ctx, seq, c, in, 0, root, len(b), slots)
	if err == nil && g.rank != root {
		copy(b, slots[root])
	}
	g.ctlDone(ord)
	return err
}

// allGatherCtl gathers every member's in into out through the control
// block (in may be this member's chunk of out).
func (g *Group) allGatherCtl(ctx context.Context, seq uint64, c call, out, in []byte) error {
	n := len(in)
	var buf [8][]byte
	slots := ctlSlots(&buf, g.Size())
	ord, err := g.ctlCollect(ctx, seq, c, in, n, -1, 0, slots)
	if err == nil {
		for q, d := range slots {
			copy(out[q*n:(q+1)*n], d)
		}
	}
	g.ctlDone(ord)
	return err
}

// reduceScatterCtl reduce-scatters in through the control block: member
// r reduces chunk r of every member's in, in rank order, into out (which
// may be a part of in: every member reads the copies in the slots).
func (g *Group) reduceScatterCtl(ctx context.Context, seq uint64, c call, out, in []byte, red reducer, op ReduceOp) error {
	n := len(out)
	var buf [8][]byte
	slots := ctlSlots(&buf, g.Size())
	ord, err := g.ctlCollect(ctx, seq, c, in, len(in), -1, 0, slots)
	if err == nil {
		r := g.rank
		copy(out, slots[0][r*n:(r+1)*n])
		for _, d := range slots[1:] {
			red(out, d[r*n:(r+1)*n])
		}
	}
	g.ctlDone(ord)
	if err == nil && op == Avg {
		finishAvg(out, c.dtype, g.Size())
	}
	return err
}
