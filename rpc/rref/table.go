package rref

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Errors returned by Table methods. Each is wrapped with the worker, the
// RRef and the fork concerned; test with errors.Is.
var (
	// ErrMalformed: a control message does not decode, or an argument
	// names the zero RRef or fork, or an ID its sender could not have
	// minted.
	ErrMalformed = errors.New("rref: malformed")
	// ErrUnknown: the (RRef, fork) pair is not a live handle on this worker.
	ErrUnknown = errors.New("rref: no such RRef handle")
	// ErrReleased: the handle was already released.
	ErrReleased = errors.New("rref: RRef handle already released")
	// ErrPeerDown: a worker the call needs was reported down (PeerDown).
	ErrPeerDown = errors.New("rref: peer is down")
	// ErrGone: the owner has already deleted this RRef's value (or dropped
	// it because its creator died before the remote call arrived).
	ErrGone = errors.New("rref: RRef already deleted by its owner")
	// ErrDuplicate: the same remote call or fork was delivered twice; the
	// second delivery changed nothing and must be ignored.
	ErrDuplicate = errors.New("rref: duplicate delivery")
)

// Table is one worker's RRef reference-counting state: the RRefs it owns
// with the forks (references) counted against each, and the user
// references it holds to RRefs owned by others. It never sends, blocks,
// sleeps or starts goroutines: methods take an event and return the
// control messages to send. A Table is not safe for concurrent use; the
// agent serializes calls (one goroutine, or a mutex held across each call
// but never across network I/O).
//
// Slices returned by methods are newly allocated and owned by the caller.
// Returned messages are never addressed to the Table's own worker: those
// are handled inside the call.
type Table struct {
	self WorkerID
	next uint64 // last counter minted for an RRefID or ForkID

	owned map[RRefID]*ownerEntry
	users map[ForkID]*userEntry
	// childOf maps a pending child fork (sent, not yet accepted) to the
	// user fork it was forked from.
	childOf map[ForkID]ForkID
	// gone holds RRefs created by other workers that this owner has
	// deleted and for which a late ForkRequest may still arrive
	// (ownerEntry.mayRequest), so that it cannot bring them back. RRefs
	// this worker created need no entry: all of them were in owned from
	// the moment they were minted.
	gone map[RRefID]struct{}
	down map[WorkerID]struct{}

	deleted []RRefID
	out     []Msg
	loop    []Msg // messages to self, handled before a method returns
}

// ownerEntry is an OwnerRRef's reference count.
type ownerEntry struct {
	// born: the value exists (or is being computed). An RRef created by
	// remote() on another worker is unborn while fork requests for it have
	// overtaken the remote call itself; it cannot be deleted until born.
	born bool
	// forks counts the references: each fork and the worker holding it
	// (or the worker it is in flight to). Local handles are held by self.
	forks map[ForkID]WorkerID
	// requested holds the forks in forks that a ForkRequest counted: only
	// those can be named by a late duplicate request once deleted.
	requested map[ForkID]struct{}
	// dead holds deleted forks that a ForkRequest had counted, so that
	// duplicates of the request are answered but not counted again.
	dead map[ForkID]struct{}
	// mayRequest: a ForkRequest for this RRef may arrive after its
	// deletion, so the deletion must be remembered in Table.gone. Set when
	// a ForkRequest arrived, when a deleted user fork had been sent on
	// (Msg.Forked), and when a dead worker's forks were dropped: any
	// request for the RRef descends from one of those forks.
	mayRequest bool
}

// userEntry is one UserRRef.
type userEntry struct {
	rref      RRefID
	owner     WorkerID
	parent    WorkerID // the worker that sent this fork
	notify    bool     // send ChildAccept to parent once confirmed
	confirmed bool     // the owner counts this fork
	released  bool     // the handle was dropped; UserDelete is due
	forked    bool     // Fork was called on it: its UserDelete says so
	// children are forks of this RRef sent from this handle that the
	// owner may not know yet, with the worker each was sent to. While any
	// remain, this fork is not deleted, so the owner keeps the value.
	children map[ForkID]WorkerID
}

// NewTable returns the empty Table of worker self.
func NewTable(self WorkerID) *Table {
	return &Table{
		self:    self,
		owned:   map[RRefID]*ownerEntry{},
		users:   map[ForkID]*userEntry{},
		childOf: map[ForkID]ForkID{},
		gone:    map[RRefID]struct{}{},
		down:    map[WorkerID]struct{}{},
	}
}

// Self returns the worker the Table belongs to.
func (t *Table) Self() WorkerID { return t.self }

func (t *Table) mint() uint64 {
	t.next++
	return t.next
}

func (t *Table) isDown(w WorkerID) bool {
	_, ok := t.down[w]
	return ok && w != t.self
}

// NewOwned creates an RRef owned by this worker around a local value (the
// Go side of rpc.RRef(value)) and returns its ID and the ForkID of the
// one local handle it starts with.
func (t *Table) NewOwned() (RRefID, ForkID) {
	id := RRefID{t.self, t.mint()}
	f := ForkID{t.self, t.mint()}
	t.newEntry(id).born = true
	t.owned[id].forks[f] = t.self
	return id, f
}

// CreateRemote is the caller's side of remote(): call it before sending
// the remote call to owner, and send the returned RRefID and ForkID with
// the call. The new handle is a UserRRef that is unconfirmed until
// ConfirmRemote. When owner is this worker it is NewOwned instead: the
// handle is a local handle of an OwnerRRef, already counted, and the agent
// need not call AcceptRemote or ConfirmRemote for it (if it does, they
// change nothing).
func (t *Table) CreateRemote(owner WorkerID) (RRefID, ForkID, error) {
	if owner == t.self {
		id, f := t.NewOwned()
		return id, f, nil
	}
	if t.isDown(owner) {
		return RRefID{}, ForkID{}, fmt.Errorf("%w: %v cannot create an RRef on %v", ErrPeerDown, t.self, owner)
	}
	id := RRefID{t.self, t.mint()}
	f := ForkID{t.self, t.mint()}
	t.users[f] = &userEntry{rref: id, owner: owner, children: map[ForkID]WorkerID{}}
	return id, f, nil
}

// AcceptRemote is the owner's side of remote(): call it when the remote
// call from worker from arrives, before running the function. It creates
// the OwnerRRef and counts the caller's fork. A nil error means: keep a
// value slot for id and run the function. ErrDuplicate and ErrGone mean
// the call was already accepted (and maybe already deleted): do not run
// it again. A duplicate is recognized only while the RRef lives or while
// its deletion is remembered (see the package doc), so the RPC layer must
// still deliver remote calls at most once. It returns no messages: the
// reply to the remote call is the confirmation (ConfirmRemote on the
// caller).
func (t *Table) AcceptRemote(from WorkerID, id RRefID, fork ForkID) error {
	if from == t.self {
		// remote() to self: CreateRemote already made the OwnerRRef.
		if e := t.owned[id]; e != nil {
			if _, ok := e.forks[fork]; ok {
				return nil
			}
		}
		return fmt.Errorf("%w: %v has no local handle %v %v for a remote call to itself", ErrUnknown, t.self, id, fork)
	}
	if id.IsZero() || fork.IsZero() || id.Creator != from || fork.Creator != from {
		return fmt.Errorf("%w: remote call from %v names %v %v, which it did not create", ErrMalformed, from, id, fork)
	}
	if t.isDown(from) {
		return fmt.Errorf("%w: remote call from %v, which is down", ErrPeerDown, from)
	}
	e := t.owned[id]
	if e == nil {
		if t.isGone(id) {
			return fmt.Errorf("%w: %v got remote call %v from %v again after deleting it", ErrGone, t.self, id, from)
		}
		e = t.newEntry(id)
	} else if e.born {
		return fmt.Errorf("%w: %v got remote call %v from %v twice", ErrDuplicate, t.self, id, from)
	}
	e.born = true
	if _, dead := e.dead[fork]; !dead {
		e.forks[fork] = from
	}
	t.maybeFree(id, e) // only if the caller's delete overtook its own call
	return nil
}

// ConfirmRemote is the caller's side of the reply to remote(): the owner
// has counted the caller's fork. It returns the caller's UserDelete when
// the handle was released while waiting. Duplicates are ignored.
func (t *Table) ConfirmRemote(id RRefID, fork ForkID) []Msg {
	if u := t.users[fork]; u != nil && u.rref == id {
		t.confirm(fork, u)
	}
	return t.flush()
}

// CancelRemote undoes CreateRemote when the remote call that was to
// carry (id, fork) is known never to have been sent (it did not encode,
// or the send failed before any byte left): the handle is dropped, and
// the agent must not use it again. Without it, the released handle would
// wait for ever for a confirmation that cannot come. Calling it when the
// call may have arrived, or after the handle was forked, breaks the
// guarantees. It returns no messages, since the owner never heard of the
// RRef; when this worker is the owner, see Deleted.
func (t *Table) CancelRemote(id RRefID, fork ForkID) []Msg {
	if e := t.owned[id]; e != nil {
		// remote() to self: the local handle NewOwned made.
		if h, ok := e.forks[fork]; ok && h == t.self {
			delete(e.forks, fork)
			t.maybeFree(id, e)
		}
		return t.flush()
	}
	if u := t.users[fork]; u != nil && u.rref == id && !u.confirmed && len(u.children) == 0 {
		delete(t.users, fork)
	}
	return t.flush()
}

// Fork is called when this worker sends the handle (id, fork) to worker
// to, as an argument or result of an RPC. It returns the child ForkID to
// send with the RRef's id and owner; the receiver passes them to
// ReceiveFork. Until the receiver's fork is known to the owner, this
// handle's fork stays counted (a pending child) even if the handle is
// released. When this worker is the owner, the child is counted at once.
//
// If the RPC is known not to have been delivered, call CancelFork.
func (t *Table) Fork(id RRefID, fork ForkID, to WorkerID) (ForkID, error) {
	if t.isDown(to) {
		return ForkID{}, fmt.Errorf("%w: %v cannot send %v to %v", ErrPeerDown, t.self, id, to)
	}
	if e := t.owned[id]; e != nil {
		if h, ok := e.forks[fork]; !ok || h != t.self {
			return ForkID{}, t.unknown(id, fork)
		}
		c := ForkID{t.self, t.mint()}
		e.forks[c] = to // early registration: the owner counts it now
		return c, nil
	}
	u := t.users[fork]
	if u == nil || u.rref != id {
		return ForkID{}, t.unknown(id, fork)
	}
	if u.released {
		return ForkID{}, fmt.Errorf("%w: %v cannot send %v %v to %v", ErrReleased, t.self, id, fork, to)
	}
	c := ForkID{t.self, t.mint()}
	u.forked = true
	u.children[c] = to
	t.childOf[c] = fork
	return c, nil
}

// CancelFork undoes Fork(id, ·, ·) that returned child when the RPC that
// was to carry it is known never to have been delivered (the send failed
// before any byte left). Calling it when the RPC may have arrived breaks
// the guarantees. It returns messages due because the parent was waiting
// only for this child.
func (t *Table) CancelFork(id RRefID, child ForkID) []Msg {
	if e := t.owned[id]; e != nil {
		if _, ok := e.forks[child]; ok {
			delete(e.forks, child)
			t.maybeFree(id, e)
		}
		return t.flush()
	}
	if p, ok := t.childOf[child]; ok {
		if u := t.users[p]; u != nil && u.rref == id {
			delete(u.children, child)
			delete(t.childOf, child)
			t.maybeDelete(p, u)
		}
	}
	return t.flush()
}

// ReceiveFork is called when an RRef arrives from worker from inside an
// RPC: owner is its owner, id its RRefID and child the ForkID minted for
// this worker by Fork on the sender. It creates the new handle (id,
// child): a UserRRef, or, when this worker is the owner, a local handle of
// the OwnerRRef. It returns the messages to send: a ForkRequest to the
// owner, or a ChildAccept to the sender.
//
// When this worker is the owner and the RRef's remote call has not arrived
// yet, the handle refers to a value that does not exist yet (the agent
// waits for it). Any error means no handle was created: fail the RPC that
// carried the RRef (ErrDuplicate: ignore the duplicate delivery). Send the
// returned messages even when the error is not nil.
func (t *Table) ReceiveFork(from, owner WorkerID, id RRefID, child ForkID) ([]Msg, error) {
	if id.IsZero() || child.IsZero() || child.Creator != from {
		return nil, fmt.Errorf("%w: %v received %v %v from %v, which did not mint that fork", ErrMalformed, t.self, id, child, from)
	}
	if t.isDown(from) {
		return nil, fmt.Errorf("%w: %v received %v from %v, which is down", ErrPeerDown, t.self, id, from)
	}
	if owner == t.self {
		e := t.owned[id]
		if e == nil {
			if t.isGone(id) {
				// Only when its creator died before the remote call
				// arrived. The sender still waits to hear the owner knows.
				if from != t.self {
					t.send(ChildAccept, from, id, child)
				}
				return t.flush(), fmt.Errorf("%w: %v received %v %v from %v", ErrGone, t.self, id, child, from)
			}
			e = t.newEntry(id)
		}
		if from == t.self {
			// Forked to self: Fork counted it already.
			if _, ok := e.forks[child]; !ok {
				return nil, t.unknown(id, child)
			}
			return nil, nil
		}
		if _, ok := e.forks[child]; ok {
			return nil, fmt.Errorf("%w: %v received %v %v from %v twice", ErrDuplicate, t.self, id, child, from)
		}
		e.forks[child] = t.self
		t.send(ChildAccept, from, id, child)
		return t.flush(), nil
	}
	if t.isDown(owner) {
		return nil, fmt.Errorf("%w: %v received %v from %v, but its owner %v is down", ErrPeerDown, t.self, id, from, owner)
	}
	if _, ok := t.users[child]; ok {
		return nil, fmt.Errorf("%w: %v received %v %v from %v twice", ErrDuplicate, t.self, id, child, from)
	}
	u := &userEntry{rref: id, owner: owner, parent: from, children: map[ForkID]WorkerID{}}
	t.users[child] = u
	if from == owner {
		u.confirmed = true // early registration: the owner counted it in Fork
	} else {
		u.notify = true
		t.send(ForkRequest, owner, id, child)
	}
	return t.flush(), nil
}

// Release is called when the handle (id, fork) is dropped: explicitly, or
// by a finalizer. Releasing twice, or releasing an unknown handle, is a
// no-op. A UserRRef's UserDelete is returned once the owner has confirmed
// it and every RRef sent from it has been accepted; until then it is
// deferred, and returned by the call that completes it. A local handle on
// the owner is uncounted at once; see Deleted.
func (t *Table) Release(id RRefID, fork ForkID) []Msg {
	if e := t.owned[id]; e != nil {
		if h, ok := e.forks[fork]; ok && h == t.self {
			delete(e.forks, fork)
			t.maybeFree(id, e)
		}
		return t.flush()
	}
	if u := t.users[fork]; u != nil && u.rref == id && !u.released {
		u.released = true
		t.maybeDelete(fork, u)
	}
	return t.flush()
}

// Handle processes one control message addressed to this worker and
// returns the messages to send in response. It is idempotent: a duplicate
// changes nothing (it may be answered again). Messages not addressed to
// this worker, from a worker reported down, or that match no state are
// ignored.
func (t *Table) Handle(m Msg) []Msg {
	if m.To != t.self || t.isDown(m.From) || m.RRef.IsZero() || m.Fork.IsZero() {
		return nil
	}
	t.handle(m)
	return t.flush()
}

func (t *Table) handle(m Msg) {
	switch m.Kind {
	case ForkRequest:
		e := t.owned[m.RRef]
		if e == nil {
			if m.RRef.Creator == t.self && m.RRef.Local > t.next {
				return // not minted: a forged request
			}
			if !t.isGone(m.RRef) {
				// The request overtook the remote call that creates the
				// RRef; count the fork now, the value comes later.
				e = t.newEntry(m.RRef)
			}
		}
		if e != nil {
			e.mayRequest = true
			if _, dead := e.dead[m.Fork]; !dead {
				if _, ok := e.forks[m.Fork]; !ok {
					e.forks[m.Fork] = m.From
					e.requested[m.Fork] = struct{}{}
				}
			}
		}
		// Always answer: a stale duplicate's answer is ignored, and a user
		// whose RRef is gone (its creator died) must not wait forever.
		t.send(ForkAccept, m.From, m.RRef, m.Fork)
	case ForkAccept:
		if u := t.users[m.Fork]; u != nil && u.rref == m.RRef && u.owner == m.From {
			t.confirm(m.Fork, u)
		}
	case ChildAccept:
		p, ok := t.childOf[m.Fork]
		if !ok {
			return
		}
		u := t.users[p]
		if u == nil || u.rref != m.RRef || u.children[m.Fork] != m.From {
			return
		}
		delete(u.children, m.Fork)
		delete(t.childOf, m.Fork)
		t.maybeDelete(p, u)
	case UserDelete:
		e := t.owned[m.RRef]
		if e == nil {
			return
		}
		if h, ok := e.forks[m.Fork]; ok {
			if h != m.From {
				return // not the holder's to delete
			}
			delete(e.forks, m.Fork)
			if _, ok := e.requested[m.Fork]; ok {
				delete(e.requested, m.Fork)
				e.dead[m.Fork] = struct{}{}
			}
			if m.Forked {
				e.mayRequest = true
			}
			t.maybeFree(m.RRef, e)
			return
		}
		// A delete before the fork was counted (it cannot happen with the
		// protocol's ordering, but costs nothing to survive): remember it
		// so a late ForkRequest is answered but not counted.
		e.dead[m.Fork] = struct{}{}
		e.mayRequest = true
	}
}

// PeerDown tells the Table that worker w is dead. Call it once the agent
// will hand no further message or RPC from w to the Table (late arrivals
// from w must be dropped, not handled). It:
//
//   - uncounts the forks held by w (and those in flight to it) on the
//     RRefs this worker owns, so values only w referenced are deleted;
//   - drops unborn RRefs whose creator was w (its remote call will never
//     arrive), so their handles here fail;
//   - drops this worker's user handles to RRefs owned by w;
//   - forgets pending children sent to w, and ChildAccepts owed to w.
//
// failed lists, sorted, the RRefs whose handles here are now dead: those
// owned by w and the dropped unborn ones; the agent fails the ToHere calls
// and value slots waiting on them. Later Releases of their handles are
// no-ops. out holds the UserDeletes that were waiting only for w.
func (t *Table) PeerDown(w WorkerID) (failed []RRefID, out []Msg) {
	if w == t.self || t.isDown(w) {
		return nil, nil
	}
	t.down[w] = struct{}{}
	fail := map[RRefID]struct{}{}
	for _, id := range sortedKeys(t.owned, cmpRRef) {
		e := t.owned[id]
		for f, h := range e.forks {
			if h == w {
				delete(e.forks, f)
				delete(e.requested, f)
				e.mayRequest = true
			}
		}
		if !e.born && id.Creator == w {
			delete(t.owned, id)
			t.gone[id] = struct{}{}
			fail[id] = struct{}{}
			continue
		}
		t.maybeFree(id, e)
	}
	for _, f := range sortedKeys(t.users, cmpFork) {
		u := t.users[f]
		if u.owner == w {
			delete(t.users, f)
			for c := range u.children {
				delete(t.childOf, c)
			}
			fail[u.rref] = struct{}{}
			continue
		}
		if u.parent == w {
			u.notify = false
		}
		for c, to := range u.children {
			if to == w {
				delete(u.children, c)
				delete(t.childOf, c)
			}
		}
		t.maybeDelete(f, u)
	}
	return sortedKeys(fail, cmpRRef), t.flush()
}

// Deleted returns, in the order decided, the owned RRefs whose values may
// now be freed, and forgets them: each RRef is returned once. Call it
// after any call that may uncount a reference (Release, Handle, PeerDown,
// CancelFork, AcceptRemote). A value still being computed when its RRef
// is deleted is dropped when it arrives.
func (t *Table) Deleted() []RRefID {
	d := t.deleted
	t.deleted = nil
	return d
}

func (t *Table) newEntry(id RRefID) *ownerEntry {
	e := &ownerEntry{forks: map[ForkID]WorkerID{}, requested: map[ForkID]struct{}{}, dead: map[ForkID]struct{}{}}
	t.owned[id] = e
	return e
}

// isGone reports whether an RRef not in owned was deleted here, or can
// never be created here.
func (t *Table) isGone(id RRefID) bool {
	if id.Creator == t.self {
		return true // every RRef this worker created was in owned at birth
	}
	if t.isDown(id.Creator) {
		return true // its remote call will not be handled now
	}
	_, ok := t.gone[id]
	return ok
}

func (t *Table) unknown(id RRefID, fork ForkID) error {
	return fmt.Errorf("%w: %v has no live handle %v %v", ErrUnknown, t.self, id, fork)
}

func (t *Table) confirm(f ForkID, u *userEntry) {
	if u.confirmed {
		return
	}
	u.confirmed = true
	if u.notify {
		u.notify = false
		t.send(ChildAccept, u.parent, u.rref, f)
	}
	t.maybeDelete(f, u)
}

// maybeDelete sends a released user fork's UserDelete once the owner
// counts it (G1: the owner learns of every fork before its delete) and
// once the owner counts every fork sent from it (G2: the value outlives
// every reference in flight).
func (t *Table) maybeDelete(f ForkID, u *userEntry) {
	if !u.released || !u.confirmed || len(u.children) > 0 {
		return
	}
	delete(t.users, f)
	t.sendMsg(Msg{Kind: UserDelete, From: t.self, To: u.owner, RRef: u.rref, Fork: f, Forked: u.forked})
}

func (t *Table) maybeFree(id RRefID, e *ownerEntry) {
	if !e.born || len(e.forks) > 0 {
		return
	}
	delete(t.owned, id)
	if id.Creator != t.self && e.mayRequest {
		t.gone[id] = struct{}{}
	}
	t.deleted = append(t.deleted, id)
}

func (t *Table) send(k Kind, to WorkerID, id RRefID, f ForkID) {
	t.sendMsg(Msg{Kind: k, From: t.self, To: to, RRef: id, Fork: f})
}

func (t *Table) sendMsg(m Msg) {
	if t.isDown(m.To) {
		return
	}
	if m.To == t.self {
		t.loop = append(t.loop, m)
	} else {
		t.out = append(t.out, m)
	}
}

// flush handles the messages this worker sent to itself and returns the
// rest.
func (t *Table) flush() []Msg {
	for len(t.loop) > 0 {
		m := t.loop[0]
		t.loop = t.loop[1:]
		t.handle(m)
	}
	t.loop = nil
	out := t.out
	t.out = nil
	return out
}

func cmpRRef(a, b RRefID) int {
	return cmp.Or(cmp.Compare(a.Creator, b.Creator), cmp.Compare(a.Local, b.Local))
}

func cmpFork(a, b ForkID) int {
	return cmp.Or(cmp.Compare(a.Creator, b.Creator), cmp.Compare(a.Local, b.Local))
}

func sortedKeys[K comparable, V any](m map[K]V, c func(a, b K) int) []K {
	return slices.SortedFunc(maps.Keys(m), c)
}
