package samehost

import (
	"context"
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/godist/godist/internal/cpuyield"
	"github.com/godist/godist/internal/futex"
	"github.com/godist/godist/transport"
)

// The block's layout (see the package doc) and its waits.
const (
	MaxInput   = 4 << 10 // the largest input a member puts in its slot
	headBytes  = 64      // seq (8), fingerprint (8), length (4), then padding to a cache line
	slotBytes  = headBytes + MaxInput
	offWaiters = Slots * slotBytes // members asleep on this member's headers (4 bytes)
	// BlockBytes is the size of a member's block.
	BlockBytes = offWaiters + 64

	tightLoads = 2000 // loads of a header before anything else (about 1-2 µs)
	// A member with a CPU of its own polls for spinFor before it sleeps,
	// or for longSpin while the members it waited for lately came
	// within longSpin (Block.late): then a sleep costs more than the
	// wait it saves. On a VM a sleeping vCPU halts, and waking it takes
	// 100-150 µs here; with a 50 µs poll two ranks fell into turns of
	// sleeping on each other (each call waiting out the other's wakeup)
	// in about half of the short runs of a benchmark, every call then
	// taking 150 µs instead of 1. A poll that loses its thread's CPU
	// for preemptGap (other work wants the CPU) sleeps at once.
	spinFor    = 50 * time.Microsecond
	longSpin   = time.Millisecond
	preemptGap = 200 * time.Microsecond
	// yieldSpinFor is the polling of a member that yields its CPU
	// between polls (Config.Yield): sleeping costs a wakeup through the
	// scheduler, tens of µs, where the others arrive within a few
	// timeslices of yielding.
	yieldSpinFor = time.Millisecond
	maxNap       = time.Millisecond // a sleep's bound, to look at the context
)

// Block is a group's control block: this member's block, where the
// others' are, and the turn order of the calls through it. Its calls may
// be issued and run from any goroutines; each runs when its turn comes.
type Block struct {
	e       *Engine
	mine    []byte  // this member's block
	regions Regions // the others'
	ids     []uint8 // the region id of each member's block, by group rank
	// Written and read by the calls in turn only: the last call in which
	// this member saw every other member's header, and the last call
	// that published its header (its sequence number and fingerprint).
	sawAll          uint64
	lastSeq, lastFP uint64
	// late is how long this member's last wait for another lasted.
	late time.Duration

	turn struct {
		sync.Mutex
		t       Turns
		changed chan struct{} // closed when a call ends
	}
}

// Issue numbers call seq among the calls through the block. The group
// must call it for each such call in the order of the calls' sequence
// numbers (under the lock that numbers them), before the call runs.
func (b *Block) Issue(seq uint64) {
	b.turn.Lock()
	b.turn.t.Issue(seq)
	b.turn.Unlock()
}

// start returns call seq's ordinal once every earlier call through the
// block has ended (they run one at a time, in order: the two slots of a
// member are safe to reuse only so), or the context's cause.
func (b *Block) start(ctx context.Context, seq uint64) (uint64, error) {
	b.turn.Lock()
	ord, ok := b.turn.t.Take(seq)
	if !ok {
		b.turn.Unlock()
		panic("samehost: a call through the control block that was not issued")
	}
	for !b.turn.t.Turn(ord) {
		if b.turn.changed == nil {
			b.turn.changed = make(chan struct{})
		}
		ch := b.turn.changed
		b.turn.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
		b.turn.Lock()
	}
	b.turn.Unlock()
	return ord, nil
}

// end records that call ord has ended, whatever its outcome (a failed
// call fails the group, and the calls after it then end at once).
func (b *Block) end(ord uint64) {
	b.turn.Lock()
	defer b.turn.Unlock()
	b.turn.t.End(ord)
	if b.turn.changed != nil {
		close(b.turn.changed)
		b.turn.changed = nil
	}
}

func seqWord(slot []byte) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&slot[0])) }

// seqLow is the low half of a slot's sequence word, which sleepers wait
// on.
func seqLow(slot []byte) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&slot[0])) }

func waiters(block []byte) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&block[offWaiters]))
}

func slotOf(block []byte, ord uint64) []byte {
	off := Slot(ord) * slotBytes
	return block[off : off+slotBytes]
}

// collect runs the first half of call c through the block: this
// member's input is in (at most MaxInput bytes, may be nil), and every
// member's but root's must be n bytes long (root's, when root >= 0, is
// rootN bytes). It fills slots with the inputs this member reads, in
// rank order: every member's (this member's copy in its slot included),
// or for a broadcast (root >= 0) root's alone, and the root waits on
// nobody. They stay valid until done(ord), which the caller must call
// whatever the error.
//
// Before it writes its slot, a member waits until every other member
// has published the call before (ordinal ord-1), unless it has seen
// every member's header of that call already: each then ended call
// ord-2, the slot's last use, and reads it no more (see the package
// doc's Ordering).
func (b *Block) collect(ctx context.Context, c Call, in []byte, n, root, rootN int, slots [][]byte) (uint64, error) {
	ord, err := b.start(ctx, c.Seq)
	if err != nil {
		return 0, err
	}
	e := b.e
	e.calls.Add(1)
	b.regions.LockPeerRegions()
	var waited bool
	if ord > 1 && b.sawAll != ord-1 {
		for q := range len(e.ranks) {
			if q == e.rank {
				continue
			}
			mem, err := b.peer(q)
			if err != nil {
				return ord, err
			}
			s := slotOf(mem, ord-1)
			if seqWord(s).Load() < ord-1 {
				if err := b.wait(ctx, c.Seq, ord-1, q, mem, s, &waited); err != nil {
					return ord, err
				}
			}
			// q writes that slot again only after this member publishes
			// call ord: its header is q's of call ord-1, still. A
			// broadcast's root finds here that it was out of step.
			if theirs := binary.LittleEndian.Uint64(s[8:]); seqWord(s).Load() == ord-1 && theirs != b.lastFP {
				return ord, &transport.FingerprintError{Src: e.ranks[q], Key: transport.Key{Group: e.id, Seq: b.lastSeq}, Got: theirs, Want: b.lastFP}
			}
		}
	}
	mine := slotOf(b.mine, ord)
	copy(mine[headBytes:], in)
	binary.LittleEndian.PutUint64(mine[8:], c.FP)
	binary.LittleEndian.PutUint32(mine[16:], uint32(len(in)))
	seqWord(mine).Store(ord)
	if waiters(b.mine).Load() != 0 {
		futex.Wake(seqLow(mine), 1<<30)
	}
	b.lastSeq, b.lastFP = c.Seq, c.FP
	for q := range len(e.ranks) {
		if root >= 0 && q != root && q != e.rank {
			continue // a broadcast's members read the root's input alone
		}
		s := mine
		if q != e.rank {
			mem, err := b.peer(q)
			if err != nil {
				return ord, err
			}
			s = slotOf(mem, ord)
			if seqWord(s).Load() < ord {
				if err := b.wait(ctx, c.Seq, ord, q, mem, s, &waited); err != nil {
					return ord, err
				}
			}
			if theirs := binary.LittleEndian.Uint64(s[8:]); theirs != c.FP {
				return ord, &transport.FingerprintError{Src: e.ranks[q], Key: transport.Key{Group: e.id, Seq: c.Seq}, Got: theirs, Want: c.FP}
			}
		}
		want := n
		if q == root {
			want = rootN
		}
		if got := binary.LittleEndian.Uint32(s[16:]); int64(got) != int64(want) {
			return ord, &transport.LengthError{Src: e.ranks[q], Key: transport.Key{Group: e.id, Seq: c.Seq}, Got: int64(got), Want: int64(want)}
		}
		slots[q] = s[headBytes : headBytes+want]
	}
	if root < 0 || (e.rank != root && len(e.ranks) == 2) {
		b.sawAll = ord
	}
	if waited {
		e.g.Waited(c.Seq)
	}
	return ord, nil
}

// peer returns member q's block, mapped here until done.
func (b *Block) peer(q int) ([]byte, error) {
	mem := b.regions.PeerRegion(b.e.ranks[q], b.ids[q])
	if len(mem) < BlockBytes {
		return nil, &transport.PeerError{Rank: b.e.ranks[q], Err: errBlockUnmapped}
	}
	return mem, nil
}

// done ends a call that collect began (ord 0: it never started).
func (b *Block) done(ord uint64) {
	if ord == 0 {
		return
	}
	b.regions.UnlockPeerRegions()
	b.end(ord)
}

// slotsFor returns room for a group's slots, on the stack for groups of
// up to 8 members.
func slotsFor(buf *[8][]byte, size int) [][]byte {
	if size <= len(buf) {
		return buf[:size]
	}
	return make([][]byte, size)
}

// wait waits until member q publishes call ord (seq) in slot s of its
// block mem, or a later call there: polling, then asleep on the
// sequence word; the group hears of the wait (its timeouts and probes),
// once per call.
func (b *Block) wait(ctx context.Context, seq, ord uint64, q int, mem, s []byte, waited *bool) error {
	word := seqWord(s)
	yield := b.e.yield
	tight := tightLoads
	if yield {
		tight = 0 // the member awaited may need this CPU
	}
	// First a tight poll: the others usually arrive within a microsecond
	// or two, and a pass through the scheduler (Gosched) or the group's
	// state machine costs a fraction of that each.
	for range tight {
		if word.Load() >= ord {
			b.late = 0
			return nil
		}
	}
	if !*waited {
		*waited = true
		b.e.g.Waiting(seq, q)
	}
	start := time.Now()
	defer func() { b.late = time.Since(start) }()
	spin := spinBudget(yield, b.late)
	if yield && b.e.yieldHold.Held(start) {
		spin = 0 // this engine's waits lost their yields lately: sleep at once
	}
	last := start
	for polls := 0; ; polls++ {
		for range max(tight/8, 1) {
			if word.Load() >= ord {
				return nil
			}
		}
		if polls%16 == 15 || yield {
			if err := b.gone(ctx, q, word, ord); err != nil {
				return err
			}
			now := time.Now()
			if now.Sub(start) > spin || !yield && now.Sub(last) > preemptGap {
				break
			}
			last = now
		}
		runtime.Gosched()
		// More ranks than CPUs: the member this one waits for may need
		// this CPU to get there. A yield that came back only after
		// other work's whole slice (a CPU hog's) says polling finds the
		// member that late each time, where a sleeper is woken by it.
		if yield && cpuyield.YieldLost() {
			b.e.yieldHold.Lost(time.Now())
			break
		}
	}
	sleepers := waiters(mem)
	for nap := 20 * time.Microsecond; ; nap = min(2*nap, maxNap) {
		low := seqLow(s)
		old := low.Load()
		sleepers.Add(1)
		if word.Load() < ord {
			// Naps growing to maxNap: a thread asleep in a futex keeps its
			// P until the runtime's monitor takes it back, and the
			// process's other goroutines may need it.
			futex.Wait(low, old, nap)
		}
		sleepers.Add(^uint32(0))
		runtime.Gosched()
		if word.Load() >= ord {
			return nil
		}
		if err := b.gone(ctx, q, word, ord); err != nil {
			return err
		}
	}
}

// spinBudget is how long a wait polls before it sleeps, given whether
// the member yields its CPU between polls and how long its last wait
// lasted.
func spinBudget(yield bool, late time.Duration) time.Duration {
	switch {
	case yield:
		return yieldSpinFor
	case late < longSpin:
		return longSpin
	}
	return spinFor
}

// gone returns why a wait for member q's call ord must end: the call's
// context ended (the group failed, a timeout), or q's connection ended
// without q having published the call (a member that closes cleanly
// leaves the group alone, as over the transport, but fails the calls
// that wait on it).
func (b *Block) gone(ctx context.Context, q int, word *atomic.Uint64, ord uint64) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := b.e.g.PeerErr(q); err != nil && word.Load() < ord {
		return err
	}
	return nil
}

// Barrier returns once every member has entered call c.
func (b *Block) Barrier(ctx context.Context, c Call) error {
	var buf [8][]byte
	ord, err := b.collect(ctx, c, nil, 0, -1, 0, slotsFor(&buf, len(b.e.ranks)))
	b.done(ord)
	return err
}

// AllReduce all-reduces buf (at most MaxInput bytes, the same length on
// every member) with r: every member reduces all the inputs in rank
// order, so all get the same bits.
func (b *Block) AllReduce(ctx context.Context, c Call, buf []byte, r Reduction) error {
	var sb [8][]byte
	slots := slotsFor(&sb, len(b.e.ranks))
	ord, err := b.collect(ctx, c, buf, len(buf), -1, 0, slots)
	if err == nil {
		last := len(slots) - 1
		copy(buf, slots[0])
		for q := 1; q <= last; q++ {
			if q == last && r.Final != nil {
				r.Final(buf, slots[q])
			} else {
				r.Reduce(buf, slots[q])
			}
		}
	}
	b.done(ord)
	if err == nil && r.Final == nil && r.Scale != nil {
		r.Scale(buf)
	}
	return err
}

// Broadcast copies root's buf (a group rank's) into every member's.
func (b *Block) Broadcast(ctx context.Context, c Call, buf []byte, root int) error {
	var in []byte
	if b.e.rank == root {
		in = buf
	}
	var sb [8][]byte
	slots := slotsFor(&sb, len(b.e.ranks))
	ord, err := b.collect(ctx, c, in, 0, root, len(buf), slots)
	if err == nil && b.e.rank != root {
		copy(buf, slots[root])
	}
	b.done(ord)
	return err
}

// AllGather gathers every member's in into out, member q's at
// q·len(in) (in may be this member's chunk of out).
func (b *Block) AllGather(ctx context.Context, c Call, out, in []byte) error {
	n := len(in)
	var sb [8][]byte
	slots := slotsFor(&sb, len(b.e.ranks))
	ord, err := b.collect(ctx, c, in, n, -1, 0, slots)
	if err == nil {
		for q, d := range slots {
			copy(out[q*n:(q+1)*n], d)
		}
	}
	b.done(ord)
	return err
}

// ReduceScatter reduces chunk r (of len(out) bytes) of every member's in
// with red, in rank order, into member r's out (which may be a part of
// in: every member reads the copies in the slots).
func (b *Block) ReduceScatter(ctx context.Context, c Call, out, in []byte, r Reduction) error {
	n := len(out)
	var sb [8][]byte
	slots := slotsFor(&sb, len(b.e.ranks))
	ord, err := b.collect(ctx, c, in, len(in), -1, 0, slots)
	if err == nil {
		me := b.e.rank
		copy(out, slots[0][me*n:(me+1)*n])
		for _, d := range slots[1:] {
			r.Reduce(out, d[me*n:(me+1)*n])
		}
	}
	b.done(ord)
	if err == nil && r.Scale != nil {
		r.Scale(out)
	}
	return err
}
