package samehost

import "fmt"

// Slots is the number of slots each member has in its block.
const Slots = 2

// Slot returns the slot that the call of ordinal ord uses. A member may
// write it again, for call ord+Slots, once call ord+Slots-1 has ended
// on it: that call saw every other member's header, which each wrote
// after it had ended call ord, the slot's last use (see the package
// doc's Ordering).
func Slot(ord uint64) int { return int(ord % Slots) }

// Turns is the order in which one member runs the calls of its control
// block: they are numbered 1, 2, ... (their ordinals) in the order they
// are issued, which is the same on every member, and run one at a time
// in that order, each in slot Slot(ordinal).
//
// It is a pure core: it shares no memory, blocks on nothing and reads no
// clock. The caller serializes its methods (Block holds a mutex around
// them, and wakes the calls waiting for their turn when one ends).
//
// A call goes Issue, Take, then Turn until it is its turn, then End. A
// call that never ends (its wait for its turn was abandoned: the group
// failed) keeps every later one from its turn; the group that failed
// ends those through their contexts instead.
//
// The zero value has issued no call.
type Turns struct {
	issued uint64            // calls issued
	ended  uint64            // calls 1..ended have ended
	byseq  map[uint64]uint64 // the ordinals of calls issued and not yet taken, by sequence number
}

// Issue numbers call seq, the group's sequence number of the call, and
// returns its ordinal. seq must not be that of a call issued and not yet
// taken (the group numbers its calls once each).
func (t *Turns) Issue(seq uint64) uint64 {
	if t.byseq == nil {
		t.byseq = map[uint64]uint64{}
	}
	t.issued++
	t.byseq[seq] = t.issued
	return t.issued
}

// Take returns the ordinal of call seq, which Issue numbered, when the
// call starts to run, and forgets seq; false if seq was not issued or
// was taken already.
func (t *Turns) Take(seq uint64) (uint64, bool) {
	ord, ok := t.byseq[seq]
	delete(t.byseq, seq)
	return ord, ok
}

// Turn reports whether the call of ordinal ord may run: every earlier
// call has ended, and none later has started.
func (t *Turns) Turn(ord uint64) bool { return ord == t.ended+1 }

// End records that the call of ordinal ord, which Turn let run, has
// ended, whatever its outcome. Ending any other call panics: calls run
// one at a time, in order.
func (t *Turns) End(ord uint64) {
	if ord != t.ended+1 || ord > t.issued {
		panic(fmt.Sprintf("samehost: call %d ended after call %d of %d issued", ord, t.ended, t.issued))
	}
	t.ended = ord
}

// Ended returns how many calls have ended: calls 1..Ended().
func (t *Turns) Ended() uint64 { return t.ended }

// Issued returns how many calls have been issued.
func (t *Turns) Issued() uint64 { return t.issued }
