package dist

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/godist/godist/transport"
)

// callState is the bookkeeping of one group's calls, kept apart from any
// network or clock in the style of etcd's raft: the Group feeds it the
// events it sees (a call begins or ends, a receive starts or stops
// waiting, a frame arrives that no receive expected, a control message,
// a peer's connection fails, the timer fires, with the time passed in as
// a value) and carries out what it decides (fail the group with this
// error, tell the other members this, probe that member, arm the timer
// for then). It is not safe for concurrent use; the Group holds its lock
// around every method.
//
// Calls are numbered in separate namespaces. Collectives are numbered in
// the order this member issues them, the same on every member: that
// number is the sequence number in their frames, and a frame or a probe
// for a collective this member is in, or recently finished, with another
// fingerprint means the members issued different collectives. The
// messages of each point-to-point stream (this member and one peer, one
// way, one tag) are numbered apart from everything else, so a send never
// takes a collective's number. Every call, either kind, also gets a
// handle of its own that never travels, under which its deadline and the
// peer it waits for are kept.
type callState struct {
	group      uint32
	me         int   // this member's global rank
	ranks      []int // the members' global ranks
	contiguous bool  // ranks[i] == ranks[0]+i, as the world's and a Split's are
	timeout    time.Duration
	probeAfter time.Duration

	err error // the group's failure; nil while it works
	// timingOut is the timeout the driver is explaining before it fails
	// the group with it (output.Timeout); ticks do not decide another.
	timingOut *TimeoutError
	seq       uint64              // the last collective's sequence number
	next      callID              // the last handle given out
	calls     map[callID]*callRec // calls in flight
	// spare is the record of the last call to end, for the next to
	// begin (nothing keeps a record past its end; status copies it):
	// one allocation less a call.
	spare  *callRec
	byseq  map[uint64]callID // collectives in flight by sequence number
	recent [recentCalls]struct{ seq, fp uint64 }
	early  map[uint64]early  // frames of collectives this member has not reached, by sequence number
	sent   map[p2pKey]uint64 // the next message number of each stream this member sends
	rcvd   map[p2pKey]uint64 // and of each stream it receives
	armed  time.Time         // when the driver's timer will call tick (zero: not armed)

	// flight keeps the last calls for the flight recorder (flight.go);
	// nil keeps none. lastEnd is when the last call ended.
	flight  *flightRing
	lastEnd time.Time
}

// callID is the handle of one call in flight on this member.
type callID uint64

// callKind tells collectives from the two sides of point-to-point.
type callKind uint8

const (
	kindCollective callKind = iota
	kindSend
	kindRecv
)

// callRec is one call in flight.
type callRec struct {
	kind     callKind
	c        call
	seq      uint64 // collective: its sequence number; send: its message number
	peer     int    // point-to-point: the peer's group rank (AnySource for a receive from any)
	tag      uint32
	deadline time.Time // zero: none
	// The receive the call is blocked on, if any: from which global rank,
	// since when, and whether the peer has been probed about it.
	waitPeer  int
	waitSince time.Time
	probed    bool
}

// started is when call id (r) began: its deadline less the timeout, or
// what the flight ring says; zero when neither knows.
func (s *callState) started(id callID, r *callRec) time.Time {
	if !r.deadline.IsZero() {
		return r.deadline.Add(-s.timeout)
	}
	if sl := s.flight.slot(id); sl != nil {
		return sl.start
	}
	return time.Time{}
}

// early is the first frame seen of a collective this member had not
// begun: when it begins, a different fingerprint is a desync even if no
// receive of the call would ever meet the frame.
type early struct {
	src int
	fp  uint64
}

// maxEarly bounds the early frames remembered (a root that broadcasts
// far ahead of this member sends one per call); beyond it they are not
// checked at the call's start, only by the receive that meets them.
const maxEarly = 1024

// p2pKey names a point-to-point stream: the peer (group rank) and tag.
type p2pKey struct {
	peer int
	tag  uint32
}

// recentCalls is how many finished collectives a group remembers, to
// recognise frames and probes for calls it has left.
const recentCalls = 256

// probeAfter is how long a collective's receive waits before asking the
// peer what call it is in. A member that issued a different collective
// may never send the frame that would show the mismatch (each side waits
// for the other); the probe finds it within this delay instead of at the
// group timeout.
var probeAfter = 500 * time.Millisecond

// output is what the state machine decided; the zero value is nothing.
type output struct {
	// Fail is the group's failure, decided now: cancel every call in
	// flight with it. Set once in the group's life.
	Fail error
	// Tell, when not nil, goes to every other member.
	Tell *control
	// Probes go to the members they name.
	Probes []probe
	// Arm, when not zero, is when the timer must next call tick (earlier
	// than any time it is armed for now).
	Arm time.Time
	// Timeout is a call that outlived the group's timeout: the driver
	// explains it (which rank the waits lead to, from the store, outside
	// the lock) and then fails the group with it through timedOut, so
	// that no caller sees the error before it is complete.
	Timeout *TimeoutError
}

// probe asks member To (a global rank) whether it is in collective Seq
// with fingerprint FP.
type probe struct {
	To  int
	Seq uint64
	FP  uint64
}

func newCallState(group uint32, me int, ranks []int, timeout time.Duration) *callState {
	contiguous := len(ranks) > 0
	for i, r := range ranks {
		if r != ranks[0]+i {
			contiguous = false
			break
		}
	}
	return &callState{
		group: group, me: me, ranks: ranks, contiguous: contiguous, timeout: timeout, probeAfter: probeAfter,
		calls: map[callID]*callRec{}, byseq: map[uint64]callID{}, early: map[uint64]early{},
		sent: map[p2pKey]uint64{}, rcvd: map[p2pKey]uint64{},
	}
}

func (s *callState) isMember(global int) bool { return s.groupRank(global) >= 0 }

// groupRank is global's rank in the group, -1 for none: arithmetic for
// contiguous members (every peer's loss reaches every group of a rank, so
// a scan made a job's teardown cost W³ at W ranks), a scan otherwise.
func (s *callState) groupRank(global int) int {
	if s.contiguous {
		if i := global - s.ranks[0]; i >= 0 && i < len(s.ranks) {
			return i
		}
		return -1
	}
	for i, r := range s.ranks {
		if r == global {
			return i
		}
	}
	return -1
}

// failed returns the error a new call gets on a failed group, or nil.
func (s *callState) failed() error {
	if s.err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrGroupFailed, s.err)
}

// begin enters a call in flight with its deadline.
func (s *callState) begin(rec callRec, now time.Time) (callID, output) {
	r := s.spare
	if r == nil {
		r = new(callRec)
	}
	s.spare = nil
	*r = rec
	s.next++
	id := s.next
	r.waitPeer = -1
	s.flight.begin(id, r, s.ranks, now)
	var out output
	if s.timeout > 0 {
		r.deadline = now.Add(s.timeout)
		s.armFor(r.deadline, &out)
	}
	s.calls[id] = r
	return id, out
}

// beginCollective numbers a collective. It fails when the group has.
func (s *callState) beginCollective(c call, now time.Time) (callID, uint64, output, error) {
	if err := s.failed(); err != nil {
		return 0, 0, output{}, err
	}
	s.seq++
	id, out := s.begin(callRec{kind: kindCollective, c: c, seq: s.seq}, now)
	s.byseq[s.seq] = id
	if e, ok := s.early[s.seq]; ok {
		delete(s.early, s.seq)
		if o := s.checkCollective(e.src, s.seq, e.fp); o.Fail != nil {
			o.Arm = out.Arm
			out = o
		}
	}
	return id, s.seq, out, nil
}

// beginSend numbers the next message of the stream to peer (a group
// rank) with tag.
func (s *callState) beginSend(c call, peer int, tag uint32, now time.Time) (callID, uint64, output, error) {
	if err := s.failed(); err != nil {
		return 0, 0, output{}, err
	}
	k := p2pKey{peer, tag}
	n := s.sent[k]
	s.sent[k]++
	id, out := s.begin(callRec{kind: kindSend, c: c, seq: n, peer: peer, tag: tag}, now)
	return id, n, out, nil
}

// beginRecv enters a receive from peer (a group rank, or AnySource).
// Which message it gets is decided when one arrives (accept).
func (s *callState) beginRecv(c call, peer int, tag uint32, now time.Time) (callID, output, error) {
	if err := s.failed(); err != nil {
		return 0, output{}, err
	}
	id, out := s.begin(callRec{kind: kindRecv, c: c, peer: peer, tag: tag}, now)
	return id, out, nil
}

// accept reports whether message n of the stream from peer (a group rank)
// with tag is the next one this member must receive, and if so counts it
// received: messages of a stream are received in the order they were
// sent, whatever order they arrive in.
func (s *callState) accept(peer int, tag uint32, n uint64) bool {
	k := p2pKey{peer, tag}
	if n != s.rcvd[k] {
		return false
	}
	s.rcvd[k]++
	return true
}

// end takes a call out of flight; a finished collective is remembered
// among the recent ones.
func (s *callState) end(id callID) { s.endAt(id, time.Time{}, nil) }

// endAt is end at now, the call having failed with err (nil: it
// succeeded), for the flight recorder.
func (s *callState) endAt(id callID, now time.Time, err error) {
	r, ok := s.calls[id]
	if !ok {
		return
	}
	delete(s.calls, id)
	s.flight.end(id, now, err)
	if now.After(s.lastEnd) {
		s.lastEnd = now
	}
	if r.kind == kindCollective {
		delete(s.byseq, r.seq)
		s.recent[r.seq%recentCalls] = struct{ seq, fp uint64 }{r.seq, r.c.fingerprint()}
	}
	*r = callRec{}
	s.spare = r
}

// wait records that call id is blocked on a receive from global rank
// peer; a collective's wait is probed if it lasts.
func (s *callState) wait(id callID, peer int, now time.Time) output {
	r, ok := s.calls[id]
	if !ok {
		return output{}
	}
	r.waitPeer, r.waitSince, r.probed = peer, now, false
	s.flight.wait(id, r.waitPeer)
	var out output
	if r.kind == kindCollective && s.probeAfter > 0 {
		s.armFor(now.Add(s.probeAfter), &out)
	}
	return out
}

// received records that call id's wait is over.
func (s *callState) received(id callID) {
	if r, ok := s.calls[id]; ok {
		r.waitPeer = -1
		s.flight.wait(id, r.waitPeer)
	}
}

// waitingOn is the global rank call id last waited for, if it still does.
func (s *callState) waitingOn(id callID) []int {
	if r, ok := s.calls[id]; ok && r.waitPeer >= 0 {
		return []int{r.waitPeer}
	}
	return nil
}

// armFor asks for the timer at t unless it is armed for t or earlier.
func (s *callState) armFor(t time.Time, out *output) {
	if !s.armed.IsZero() && !s.armed.After(t) {
		return
	}
	s.armed = t
	out.Arm = t
}

// tick is the timer firing at now: it fails the group if a call has
// outlived the timeout, probes the peers that collectives have waited on
// long enough, and says when it must fire next.
func (s *callState) tick(now time.Time) output {
	s.armed = time.Time{}
	var out output
	if s.err != nil {
		return out
	}
	var first callID
	var firstAt time.Time
	for id, r := range s.calls {
		if !r.deadline.IsZero() && (firstAt.IsZero() || r.deadline.Before(firstAt) || r.deadline.Equal(firstAt) && id < first) {
			first, firstAt = id, r.deadline
		}
	}
	if first != 0 && !firstAt.After(now) {
		if s.timingOut != nil {
			return out // the driver is explaining it
		}
		r := s.calls[first]
		s.timingOut = &TimeoutError{Op: r.c.String(), Timeout: s.timeout.String(), Waiting: s.waitingOn(first), call: first}
		return output{Timeout: s.timingOut}
	}
	var next time.Time
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, r := range s.calls {
		if !r.deadline.IsZero() {
			later(r.deadline)
		}
		if r.kind != kindCollective || r.waitPeer < 0 || r.probed || s.probeAfter <= 0 {
			continue
		}
		if due := r.waitSince.Add(s.probeAfter); due.After(now) {
			later(due)
			continue
		}
		r.probed = true
		out.Probes = append(out.Probes, probe{To: r.waitPeer, Seq: r.seq, FP: r.c.fingerprint()})
	}
	if !next.IsZero() {
		s.armFor(next, &out)
	}
	return out
}

// timedOut fails the group with te, the timeout a tick handed the driver
// (output.Timeout), now that the driver has explained it, unless the group
// failed otherwise meanwhile.
func (s *callState) timedOut(te *TimeoutError) output {
	if s.timingOut == te {
		s.timingOut = nil
	}
	return s.fail(te, nil)
}

// fail decides the group's failure, once; tell goes to the other members
// with it.
func (s *callState) fail(err error, tell *control) output {
	if s.err != nil {
		return output{}
	}
	s.err = err
	return output{Fail: err, Tell: tell}
}

// fingerprintOf is the fingerprint of collective seq as this member
// issued it, if it is in it or finished it recently.
func (s *callState) fingerprintOf(seq uint64) (uint64, bool) {
	if id, ok := s.byseq[seq]; ok {
		return s.calls[id].c.fingerprint(), true
	}
	if r := s.recent[seq%recentCalls]; r.seq == seq && seq != 0 {
		return r.fp, true
	}
	return 0, false
}

// unexpected checks a collective's frame from global rank src that
// arrived before any receive wanted it. A frame for a collective this
// member is in with another fingerprint, or for one it has finished
// (which therefore never expected it), means the members issued
// different collectives: a broadcast with two roots, say, where both
// think they send and nobody receives.
func (s *callState) unexpected(src int, seq, fp uint64) output {
	if seq > s.seq {
		if _, ok := s.early[seq]; !ok && len(s.early) < maxEarly {
			s.early[seq] = early{src, fp}
		}
		return output{}
	}
	return s.checkCollective(src, seq, fp)
}

// checkCollective fails the group if src's collective seq has fingerprint
// fp and this member's has another.
func (s *callState) checkCollective(src int, seq, fp uint64) output {
	mine, ok := s.fingerprintOf(seq)
	if !ok || mine == fp {
		return output{} // not there yet (the peer keeps waiting), or in step
	}
	d := &DesyncError{Group: s.group, Seq: seq, Rank: s.me, Peer: src, Mine: decodeCall(mine).String(), Theirs: decodeCall(fp).String(), Tag: -1}
	return s.fail(d, &control{Kind: ctlDesync, From: s.me, Seq: seq, Rank: src, Got: fp, Want: mine})
}

// control handles a control message from global rank src.
func (s *callState) control(src int, m *control) output {
	if !s.isMember(src) {
		return output{}
	}
	switch m.Kind {
	case ctlProbe:
		return s.checkCollective(src, m.Seq, m.Got)
	// Each is passed on unchanged (proto.go): a lost rank, so that a
	// member that hears of it only through this member's goodbye still
	// learns the root cause first, and the others, so that the news
	// reaches the members not connected to the one that saw it.
	case ctlDown:
		err := &RankError{Rank: m.Rank, Op: fmt.Sprintf("group (rank %d saw it go)", m.From), Err: errors.New(m.Text)}
		return s.fail(err, m)
	case ctlDesync:
		// m.From found that m.Rank (maybe this member) sent Got where
		// it expected Want.
		d := &DesyncError{Group: s.group, Seq: m.Seq, Rank: m.From, Peer: m.Rank, Mine: decodeCall(m.Want).String(), Theirs: decodeCall(m.Got).String(), Tag: -1}
		if m.P2P {
			d.Tag, d.P2P = int(m.Tag), true
		}
		return s.fail(d, m)
	case ctlAbort:
		return s.fail(&AbortError{Rank: m.From, Reason: m.Text}, m)
	}
	return output{}
}

// peerDown handles the connection to global rank lost failing with cause.
// A peer that closed cleanly fails nothing by itself: its frames before
// the goodbye are still delivered, and only a call that needs it again
// fails, naming it.
func (s *callState) peerDown(lost int, cause error) output {
	if !s.isMember(lost) || errors.Is(cause, transport.ErrPeerClosed) {
		return output{}
	}
	return s.fail(&RankError{Rank: lost, Op: "group", Err: cause},
		&control{Kind: ctlDown, From: s.me, Rank: lost, Text: fmt.Sprint(cause)})
}

// callFailed explains the transport error err of call id, deciding the
// group's failure. It returns the call's error.
func (s *callState) callFailed(id callID, err error) (error, output) {
	r, ok := s.calls[id]
	if !ok {
		return err, output{}
	}
	if s.err != nil {
		if te, ok := s.err.(*TimeoutError); ok && te.call == id {
			return te, output{} // this call timed out: it tells its own story
		}
		return fmt.Errorf("dist: %v: %w", r.c, s.err), output{}
	}
	var fe *transport.FingerprintError
	if errors.As(err, &fe) {
		if r.kind != kindCollective {
			// A message of a point-to-point stream unlike its receive.
			d := &DesyncError{Group: s.group, Seq: fe.Key.Seq, Rank: s.me, Peer: fe.Src, Mine: decodeCall(fe.Want).String(), Theirs: decodeCall(fe.Got).String(), Tag: int(fe.Key.Tag), P2P: true}
			return d, s.fail(d, &control{Kind: ctlDesync, From: s.me, P2P: true, Seq: fe.Key.Seq, Tag: fe.Key.Tag, Rank: fe.Src, Got: fe.Got, Want: fe.Want})
		}
		d := &DesyncError{Group: s.group, Seq: fe.Key.Seq, Rank: s.me, Peer: fe.Src, Mine: decodeCall(fe.Want).String(), Theirs: decodeCall(fe.Got).String(), Tag: -1}
		return d, s.fail(d, &control{Kind: ctlDesync, From: s.me, Seq: fe.Key.Seq, Rank: fe.Src, Got: fe.Got, Want: fe.Want})
	}
	var pe *transport.PeerError
	if errors.As(err, &pe) {
		re := &RankError{Rank: pe.Rank, Op: r.c.String(), Err: pe}
		var tell *control
		if !errors.Is(pe, transport.ErrPeerClosed) {
			tell = &control{Kind: ctlDown, From: s.me, Rank: pe.Rank, Text: fmt.Sprint(pe.Err)}
		}
		return re, s.fail(re, tell)
	}
	// A size mismatch, say: the peers are waiting for something this
	// member will not do; tell them.
	err = fmt.Errorf("dist: %v: %w", r.c, err)
	return err, s.fail(err, &control{Kind: ctlAbort, From: s.me, Text: err.Error()})
}

// callCancelled decides the failure of call id whose caller's context
// ended (err, its context's error): a deadline is a timeout; a
// cancellation fails the group too, since the peers may be mid-call.
func (s *callState) callCancelled(id callID, err error, deadline time.Time, now time.Time) (error, output) {
	r, ok := s.calls[id]
	if !ok {
		return err, output{}
	}
	if s.err != nil {
		return s.callFailed(id, err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		e := fmt.Errorf("dist: %v cancelled by the caller: %w", r.c, err)
		return fmt.Errorf("dist: %v: %w", r.c, err), s.fail(e, nil)
	}
	limit := s.timeout.String()
	if !deadline.IsZero() {
		limit = "the caller's deadline (" + now.Sub(deadline).Round(time.Millisecond).String() + " ago)"
	}
	te := &TimeoutError{Op: r.c.String(), Timeout: limit, Waiting: s.waitingOn(id), call: id}
	return te, s.fail(te, nil)
}
