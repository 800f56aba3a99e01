package dist

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// The call-state machine, tested without a network: whole groups of
// members, each a callState driven as Group drives it, run random
// programs of collectives, sends and receives (any tags, any source)
// over a simulated network with a virtual clock, random delays and
// compute pauses longer than the probe's delay. Every frame and control
// message goes through the simulated transport's matching rules (exact
// match for collectives, (source, tag, order) for point-to-point, frames
// kept until a receive wants them) and every control message through
// proto.go's encoding.
//
// Four kinds of run:
//   - correct programs: every member finishes, no error anywhere;
//   - one real desync (a collective unlike the others' on one member, or
//     a receive unlike its send): every member fails with a DesyncError,
//     soon after the members reach the call;
//   - a member dies: every survivor fails with a RankError naming it,
//     soon after its death is noticed;
//   - a member stalls without dying: every member that cannot finish
//     fails with a TimeoutError exactly one timeout after its call began.

// simOp is one operation of a member's program.
type simOp struct {
	kind  callKind
	c     call
	peer  int // point-to-point: the peer's rank (AnySource for a receive from any)
	tag   uint32
	pause time.Duration // compute before the operation
}

// A collective's shape is in its call: all_reduce (every member sends to
// every other) or broadcast from root (the root sends to every other, the
// others receive from it alone).
func (o simOp) sendsTo(me, size int) []int {
	var to []int
	for q := range size {
		if q != me && (o.c.op == opAllReduce || o.c.root == me) {
			to = append(to, q)
		}
	}
	return to
}

func (o simOp) recvsFrom(me, size int) []int {
	var from []int
	for q := range size {
		if q != me && (o.c.op == opAllReduce || o.c.op == opBroadcast && o.c.root == q) {
			from = append(from, q)
		}
	}
	return from
}

// simFrame is what crosses the simulated network.
type simFrame struct {
	p2p  bool
	seq  uint64 // collective: its sequence number; p2p: the message number
	tag  uint32
	fp   uint64
	ctl  []byte // a control message (encoded)
	from int
}

type simEvent struct {
	at    time.Time
	n     int // tie-break: order of scheduling
	rank  int
	kind  int // evDeliver, evTimer, evWake, evDown
	frame simFrame
	lost  int // evDown: the rank whose connection failed
}

const (
	evDeliver = iota
	evTimer
	evWake
	evDown
)

type simQueue []*simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].n < q[j].n
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simMember is one member: its state machine, program and transport.
type simMember struct {
	st         *callState
	prog       []simOp
	pc         int
	cur        *simCall // the operation it is blocked in, if any
	kept       []simFrame
	timerAt    time.Time
	dead       bool
	stalled    bool
	finished   bool
	err        error     // the group's failure as this member saw it
	failedAt   time.Time // when
	began      map[int]time.Time
	timedOutAt time.Duration // for a TimeoutError: how long after its call began
}

type simCall struct {
	id    callID
	op    simOp
	seq   uint64
	need  []int // collective: the members still to receive from, in order
	began time.Time
}

type sim struct {
	t        *testing.T
	rng      *rand.Rand
	now      time.Time
	q        simQueue
	n        int
	members  []*simMember
	lastLink map[[2]int]time.Time
	maxNet   time.Duration
	probes   int
	timeout  time.Duration
	started  bool
}

func newSim(t *testing.T, seed uint64, progs [][]simOp, timeout time.Duration) *sim {
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, 7)), now: time.Unix(1e9, 0), lastLink: map[[2]int]time.Time{}, maxNet: 20 * time.Millisecond, timeout: timeout}
	ranks := make([]int, len(progs))
	for i := range ranks {
		ranks[i] = i
	}
	for i, p := range progs {
		s.members = append(s.members, &simMember{st: newCallState(0, i, ranks, timeout), prog: p, began: map[int]time.Time{}})
	}
	return s
}

func (s *sim) push(e *simEvent) {
	s.n++
	e.n = s.n
	heap.Push(&s.q, e)
}

// send puts a frame on the link from -> to, in order behind the link's
// earlier frames.
func (s *sim) send(from, to int, f simFrame) {
	f.from = from
	at := s.now.Add(time.Duration(s.rng.Int64N(int64(s.maxNet))))
	k := [2]int{from, to}
	if last := s.lastLink[k]; at.Before(last) {
		at = last
	}
	s.lastLink[k] = at
	s.push(&simEvent{at: at, rank: to, kind: evDeliver, frame: f})
}

// apply carries out a state machine's output as Group.carry does.
func (s *sim) apply(r int, out output) {
	m := s.members[r]
	if !out.Arm.IsZero() {
		m.timerAt = out.Arm
		s.push(&simEvent{at: out.Arm, rank: r, kind: evTimer})
	}
	for _, p := range out.Probes {
		s.probes++
		s.send(r, p.To, simFrame{ctl: (&control{Kind: ctlProbe, Seq: p.Seq, Got: p.FP}).encode()})
	}
	if out.Tell != nil {
		for q := range s.members {
			if q != r {
				s.send(r, q, simFrame{ctl: out.Tell.encode()})
			}
		}
	}
	if out.Fail != nil {
		m.err, m.failedAt = out.Fail, s.now
		if c := m.cur; c != nil {
			// The call in flight sees its context cancelled with the
			// group's failure.
			err, o := m.st.callFailed(c.id, context.Canceled)
			if !errors.Is(err, out.Fail) && err != out.Fail {
				s.t.Fatalf("member %d: call failed with %v, not wrapping the group's failure %v", r, err, out.Fail)
			}
			m.st.end(c.id)
			m.cur = nil
			s.apply(r, o)
		}
	}
}

// step runs member r's program until it blocks, pauses or ends.
func (s *sim) step(r int) {
	m := s.members[r]
	for m.cur == nil && m.err == nil && !m.dead && !m.stalled && m.pc < len(m.prog) {
		op := m.prog[m.pc]
		if op.pause > 0 {
			m.prog[m.pc].pause = 0
			s.push(&simEvent{at: s.now.Add(op.pause), rank: r, kind: evWake})
			return
		}
		m.began[m.pc] = s.now
		switch op.kind {
		case kindCollective:
			id, seq, out, err := m.st.beginCollective(op.c, s.now)
			if err != nil {
				m.err = err
				return
			}
			c := &simCall{id: id, op: op, seq: seq, need: op.recvsFrom(r, len(s.members)), began: s.now}
			m.cur = c
			s.apply(r, out)
			if m.cur == nil {
				return // the frame kept from earlier failed the group
			}
			for _, q := range op.sendsTo(r, len(s.members)) {
				s.send(r, q, simFrame{seq: seq, fp: op.c.fingerprint()})
			}
		case kindSend:
			id, n, out, err := m.st.beginSend(op.c, op.peer, op.tag, s.now)
			if err != nil {
				m.err = err
				return
			}
			s.apply(r, out)
			s.send(r, op.peer, simFrame{p2p: true, seq: n, tag: op.tag, fp: op.c.fingerprint()})
			m.st.end(id)
			m.pc++
			continue
		case kindRecv:
			id, out, err := m.st.beginRecv(op.c, op.peer, op.tag, s.now)
			if err != nil {
				m.err = err
				return
			}
			if op.peer != AnySource {
				out.Arm = minTime(out.Arm, m.st.wait(id, op.peer, s.now).Arm)
			}
			m.cur = &simCall{id: id, op: op, began: s.now}
			s.apply(r, out)
		}
		// Frames that came before the receives were posted, in order.
		kept := m.kept
		m.kept = nil
		for i, f := range kept {
			if m.cur == nil {
				m.kept = append(m.kept, kept[i:]...)
				break
			}
			if !s.match(r, f) {
				m.kept = append(m.kept, f)
			}
		}
		s.progress(r)
	}
	if m.pc == len(m.prog) && m.cur == nil {
		m.finished = true
	}
}

// progress completes member r's call if it has all it needs, or records
// what it waits for.
func (s *sim) progress(r int) {
	m := s.members[r]
	c := m.cur
	if c == nil {
		return
	}
	if c.op.kind == kindCollective {
		if len(c.need) > 0 {
			s.apply(r, m.st.wait(c.id, c.need[0], s.now))
			return
		}
		m.st.end(c.id)
		m.cur = nil
		m.pc++
	}
}

// match offers frame f to member r's call in flight; it reports whether
// the call took it.
func (s *sim) match(r int, f simFrame) bool {
	m := s.members[r]
	c := m.cur
	if c == nil {
		return false
	}
	var fe *transport.FingerprintError
	switch {
	case !f.p2p && c.op.kind == kindCollective && f.seq == c.seq:
		i := indexOf(c.need, f.from)
		if i < 0 {
			return false
		}
		if f.fp != c.op.c.fingerprint() {
			fe = &transport.FingerprintError{Src: f.from, Key: transport.Key{Seq: f.seq}, Got: f.fp, Want: c.op.c.fingerprint()}
			break
		}
		c.need = append(c.need[:i], c.need[i+1:]...)
		m.st.received(c.id)
		s.progress(r)
		return true
	case f.p2p && c.op.kind == kindRecv && f.tag == c.op.tag && (c.op.peer == AnySource || c.op.peer == f.from):
		if !m.st.accept(f.from, f.tag, f.seq) {
			return false
		}
		if f.fp != c.op.c.fingerprint() {
			fe = &transport.FingerprintError{Src: f.from, Key: transport.Key{Group: p2pBit, Seq: f.seq, Tag: f.tag}, Got: f.fp, Want: c.op.c.fingerprint()}
			break
		}
		m.st.end(c.id)
		m.cur = nil
		m.pc++
		return true
	default:
		return false
	}
	err, out := m.st.callFailed(c.id, fe)
	var de *DesyncError
	if !errors.As(err, &de) {
		s.t.Fatalf("member %d: a frame unlike its receive gave %v, want a DesyncError", r, err)
	}
	m.st.end(c.id)
	m.cur = nil
	s.apply(r, out)
	return true
}

func indexOf(xs []int, x int) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// run processes events until none is left or the clock passes limit.
func (s *sim) run(limit time.Duration) {
	end := s.now.Add(limit)
	if !s.started {
		s.started = true
		for r := range s.members {
			s.step(r)
		}
	}
	for s.q.Len() > 0 && !s.q[0].at.After(end) {
		e := heap.Pop(&s.q).(*simEvent)
		s.now = e.at
		m := s.members[e.rank]
		if m.dead {
			continue
		}
		switch e.kind {
		case evWake:
			s.step(e.rank)
		case evTimer:
			if !e.at.Equal(m.timerAt) {
				continue // re-armed since
			}
			m.timerAt = time.Time{}
			var id callID
			if m.cur != nil {
				id = m.cur.id
			}
			began := time.Time{}
			if m.cur != nil {
				began = m.cur.began
			}
			out := m.st.tick(s.now)
			if te := out.Timeout; te != nil {
				// The driver explains it, then fails the group.
				out = m.st.timedOut(te)
			}
			if te, ok := out.Fail.(*TimeoutError); ok && te.call == id && id != 0 {
				m.timedOutAt = s.now.Sub(began)
			}
			s.apply(e.rank, out)
		case evDown:
			// The transport fails a receive waiting on the lost member
			// first, or reports the connection first: either order.
			if c := m.cur; c != nil && s.rng.IntN(2) == 0 && (indexOf(c.need, e.lost) >= 0 || c.op.kind == kindRecv && c.op.peer == e.lost) {
				err, out := m.st.callFailed(c.id, &transport.PeerError{Rank: e.lost, Err: errors.New("connection reset")})
				var re *RankError
				if !errors.As(err, &re) || re.Rank != e.lost {
					s.t.Fatalf("member %d: receive from lost %d failed with %v", e.rank, e.lost, err)
				}
				m.st.end(c.id)
				m.cur = nil
				s.apply(e.rank, out)
			}
			s.apply(e.rank, m.st.peerDown(e.lost, errors.New("connection reset")))
		case evDeliver:
			f := e.frame
			if f.ctl != nil {
				msg, err := decodeControl(f.ctl)
				if err != nil {
					s.t.Fatalf("control message does not decode: %v", err)
				}
				s.apply(e.rank, m.st.control(f.from, msg))
				continue
			}
			if s.match(e.rank, f) {
				s.step(e.rank)
				continue
			}
			m.kept = append(m.kept, f)
			if !f.p2p {
				s.apply(e.rank, m.st.unexpected(f.from, f.seq, f.fp))
			}
		}
	}
}

// kill makes member r die at the current time; the others notice within
// detect.
func (s *sim) kill(r int, detect time.Duration) {
	s.members[r].dead = true
	for q := range s.members {
		if q != r {
			s.push(&simEvent{at: s.now.Add(time.Duration(s.rng.Int64N(int64(detect)))), rank: q, kind: evDown, lost: r})
		}
	}
}

// genPrograms makes a correct program for size members: a global
// sequence of collectives and messages, each member's program the part
// of it that member takes. Tag 9 is received from any source only, with
// one fingerprint per receiver.
func genPrograms(rng *rand.Rand, size, steps int) (progs [][]simOp, stepOf [][]int) {
	progs = make([][]simOp, size)
	stepOf = make([][]int, size) // program index -> global step
	pause := func() time.Duration {
		switch rng.IntN(10) {
		case 0:
			return time.Duration(600+rng.IntN(1500)) * time.Millisecond // past the probe's delay
		case 1, 2, 3:
			return time.Duration(rng.IntN(5000)) * time.Microsecond
		}
		return 0
	}
	add := func(r, step int, op simOp) {
		op.pause = pause()
		progs[r] = append(progs[r], op)
		stepOf[r] = append(stepOf[r], step)
	}
	for step := range steps {
		if size > 1 && rng.IntN(10) < 6 {
			src := rng.IntN(size)
			dst := (src + 1 + rng.IntN(size-1)) % size
			tag := uint32(rng.IntN(3))
			c := call{op: opSend, dtype: tensor.Float32, count: 1 + rng.IntN(4), root: -1}
			peer := src
			if rng.IntN(5) == 0 {
				tag, peer = 9, AnySource
				c.count = 100 + dst
			}
			add(src, step, simOp{kind: kindSend, c: c, peer: dst, tag: tag})
			add(dst, step, simOp{kind: kindRecv, c: c, peer: peer, tag: tag})
			continue
		}
		c := call{op: opAllReduce, dtype: tensor.Float32, count: 1 + rng.IntN(3), root: -1, rop: Sum}
		if rng.IntN(2) == 0 {
			c = call{op: opBroadcast, dtype: tensor.Float32, count: 1 + rng.IntN(3), root: rng.IntN(size)}
		}
		for r := range size {
			add(r, step, simOp{kind: kindCollective, c: c})
		}
	}
	return progs, stepOf
}

func TestCallStateRandomPrograms(t *testing.T) {
	const runs = 6000
	var stats struct{ programs, ops, probes, desyncs, deaths, timeouts int }
	for i := range runs {
		seed := uint64(i)
		rng := rand.New(rand.NewPCG(seed, 1))
		size := 2 + rng.IntN(4)
		progs, stepOf := genPrograms(rng, size, 10+rng.IntN(30))
		variant := i % 4
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d, world %d, variant %d: %s", seed, size, variant, fmt.Sprintf(format, args...))
		}
		stats.programs++
		for _, p := range progs {
			stats.ops += len(p)
		}
		switch variant {
		case 0: // correct
			s := newSim(t, seed, progs, time.Hour)
			s.run(24 * time.Hour)
			stats.probes += s.probes
			for r, m := range s.members {
				if m.err != nil || !m.finished || len(m.st.calls) != 0 {
					fail("correct program: member %d at op %d of %d, %d calls in flight, error %v", r, m.pc, len(m.prog), len(m.st.calls), m.err)
				}
			}
		case 1: // one real desync
			step := rng.IntN(len(stepOf[0]) + 1)
			odd := -1
			// Find a step to spoil: a collective (one member's call
			// differs), or a message (its receive differs).
			for try := 0; try < 100 && odd < 0; try++ {
				r := rng.IntN(size)
				if len(progs[r]) == 0 {
					continue
				}
				k := rng.IntN(len(progs[r]))
				op := &progs[r][k]
				switch {
				case op.kind == kindCollective:
					switch rng.IntN(3) {
					case 0:
						op.c.count += 1 + rng.IntN(3)
					case 1:
						if op.c.op == opBroadcast {
							op.c.root = (op.c.root + 1 + rng.IntN(size-1)) % size
						} else {
							op.c.rop = Max
						}
					default:
						if op.c.op == opBroadcast {
							op.c = call{op: opAllReduce, dtype: op.c.dtype, count: op.c.count, root: -1, rop: Sum}
						} else {
							op.c = call{op: opBroadcast, dtype: op.c.dtype, count: op.c.count, root: rng.IntN(size)}
						}
					}
					odd, step = r, stepOf[r][k]
				case op.kind == kindRecv && op.tag != 9:
					op.c.count += 1 + rng.IntN(3)
					odd, step = r, stepOf[r][k]
				}
			}
			if odd < 0 {
				continue
			}
			s := newSim(t, seed, progs, time.Hour)
			s.run(24 * time.Hour)
			stats.probes += s.probes
			var reached time.Time
			for r, m := range s.members {
				for k, st := range stepOf[r] {
					if st == step {
						if b, ok := m.began[k]; ok && b.After(reached) {
							reached = b
						}
					}
				}
			}
			for r, m := range s.members {
				var de *DesyncError
				if !errors.As(m.err, &de) {
					fail("desync at step %d (member %d): member %d ended with %v (op %d of %d)", step, odd, r, m.err, m.pc, len(m.prog))
				}
				if late := m.failedAt.Sub(reached); late > probeAfter+5*s.maxNet {
					fail("desync at step %d: member %d failed %v after the last member reached it", step, r, late)
				}
			}
			stats.desyncs++
		case 2: // a member dies
			victim := rng.IntN(size)
			s := newSim(t, seed, progs, time.Hour)
			at := time.Duration(rng.Int64N(int64(3 * time.Second)))
			// Run to the death, kill, then run on.
			s.runUntil(at)
			s.kill(victim, time.Second)
			deathAt := s.now
			s.run(24 * time.Hour)
			for r, m := range s.members {
				if r == victim {
					continue
				}
				var re *RankError
				if !errors.As(m.err, &re) || re.Rank != victim {
					fail("member %d died at %v: member %d ended with %v", victim, at, r, m.err)
				}
				if late := m.failedAt.Sub(deathAt); late > time.Second+2*s.maxNet {
					fail("member %d died: member %d failed %v later", victim, r, late)
				}
			}
			stats.deaths++
		case 3: // a member stalls
			victim := rng.IntN(size)
			timeout := 10 * time.Minute
			s := newSim(t, seed, progs, timeout)
			at := time.Duration(rng.Int64N(int64(3 * time.Second)))
			s.runUntil(at)
			s.members[victim].stalled = true
			s.run(24 * time.Hour)
			for r, m := range s.members {
				if r == victim || m.finished {
					continue
				}
				var te *TimeoutError
				if !errors.As(m.err, &te) {
					fail("member %d stalled: member %d (op %d of %d) ended with %v", victim, r, m.pc, len(m.prog), m.err)
				}
				if m.timedOutAt != 0 && m.timedOutAt != timeout {
					fail("member %d timed out %v after its call began, want %v", r, m.timedOutAt, timeout)
				}
				if m.timedOutAt != 0 {
					stats.timeouts++
				}
			}
		}
	}
	t.Logf("%d programs (%d operations): %d probes sent, %d desyncs, %d deaths, %d timeouts found", stats.programs, stats.ops, stats.probes, stats.desyncs, stats.deaths, stats.timeouts)
	if stats.probes == 0 || stats.timeouts == 0 {
		t.Fatalf("the runs never probed or timed out: the test tests less than it says")
	}
}

// runUntil processes events up to d after the start.
func (s *sim) runUntil(d time.Duration) {
	end := s.now.Add(d)
	s.run(d)
	s.now = end
}

// TestCallStateCallErrors: how a call's own failure is explained and
// what the other members are told.
func TestCallStateCallErrors(t *testing.T) {
	now := time.Unix(1e9, 0)
	c := call{op: opAllReduce, dtype: tensor.Float32, count: 4, root: -1, rop: Sum}
	begin := func() (*callState, callID) {
		s := newCallState(3, 1, []int{0, 1, 2}, time.Minute)
		id, _, _, err := s.beginCollective(c, now)
		if err != nil {
			t.Fatal(err)
		}
		s.wait(id, 2, now)
		return s, id
	}
	t.Run("caller deadline", func(t *testing.T) {
		s, id := begin()
		err, out := s.callCancelled(id, context.DeadlineExceeded, now.Add(time.Second), now.Add(1500*time.Millisecond))
		var te *TimeoutError
		if !errors.As(err, &te) || out.Fail != err || out.Tell != nil || len(te.Waiting) != 1 || te.Waiting[0] != 2 {
			t.Fatalf("got %v (waiting %v), output %+v", err, te, out)
		}
	})
	t.Run("caller cancelled", func(t *testing.T) {
		s, id := begin()
		err, out := s.callCancelled(id, context.Canceled, time.Time{}, now)
		if !errors.Is(err, context.Canceled) || out.Fail == nil || s.failed() == nil {
			t.Fatalf("got %v, output %+v", err, out)
		}
	})
	t.Run("other error", func(t *testing.T) {
		s, id := begin()
		err, out := s.callFailed(id, errors.New("length mismatch"))
		if out.Fail == nil || out.Tell == nil || out.Tell.Kind != ctlAbort {
			t.Fatalf("got %v, output %+v", err, out)
		}
		// The others hear of it as an AbortError naming this member.
		peer := newCallState(3, 0, []int{0, 1, 2}, time.Minute)
		m, derr := decodeControl(out.Tell.encode())
		if derr != nil {
			t.Fatal(derr)
		}
		var ae *AbortError
		if o := peer.control(1, m); !errors.As(o.Fail, &ae) || ae.Rank != 1 || ae.Reason != err.Error() {
			t.Fatalf("peer got %v", o.Fail)
		}
	})
	t.Run("timed out call", func(t *testing.T) {
		s, id := begin()
		out := s.tick(now.Add(time.Minute))
		te := out.Timeout
		if te == nil || te.call != id || out.Fail != nil || s.err != nil {
			t.Fatalf("tick at the deadline: %+v (the timeout goes to the driver before it fails the group)", out)
		}
		if again := s.tick(now.Add(2 * time.Minute)); again.Timeout != nil || again.Fail != nil {
			t.Fatalf("a second tick while the driver explains: %+v", again)
		}
		out = s.timedOut(te)
		if !errors.As(out.Fail, &te) || te.call != id {
			t.Fatalf("timedOut: %+v", out)
		}
		// The call that timed out reports the TimeoutError itself;
		// another call in flight reports the group's failure.
		if err, _ := s.callFailed(id, context.Canceled); err != te {
			t.Fatalf("the timed-out call got %v", err)
		}
	})
	t.Run("peer closed cleanly", func(t *testing.T) {
		s, _ := begin()
		if out := s.peerDown(2, transport.ErrPeerClosed); out.Fail != nil {
			t.Fatalf("a clean close failed the group: %v", out.Fail)
		}
		if out := s.peerDown(7, errors.New("reset")); out.Fail != nil {
			t.Fatalf("a non-member's loss failed the group: %v", out.Fail)
		}
		if out := s.control(7, &control{Kind: ctlAbort, Text: "x"}); out.Fail != nil {
			t.Fatalf("a non-member's abort failed the group: %v", out.Fail)
		}
	})
}

// TestGroupRank checks the member lookup both ways it is done: by
// arithmetic for contiguous ranks, by a scan otherwise.
func TestGroupRank(t *testing.T) {
	for _, c := range []struct {
		ranks []int
		want  map[int]int
	}{
		{[]int{4, 5, 6}, map[int]int{3: -1, 4: 0, 5: 1, 6: 2, 7: -1}},
		{[]int{0}, map[int]int{-1: -1, 0: 0, 1: -1}},
		{[]int{2, 0, 7}, map[int]int{0: 1, 1: -1, 2: 0, 7: 2, 8: -1}},
		{[]int{1, 3}, map[int]int{1: 0, 2: -1, 3: 1}},
	} {
		s := newCallState(0, c.ranks[0], c.ranks, time.Minute)
		for global, want := range c.want {
			if got := s.groupRank(global); got != want || s.isMember(global) != (want >= 0) {
				t.Errorf("ranks %v: groupRank(%d) = %d, isMember %v; want %d", c.ranks, global, got, s.isMember(global), want)
			}
		}
	}
}
