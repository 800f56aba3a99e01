package rpc

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/godist/godist/rpc/internal/wire"
	"github.com/godist/godist/rpc/rref"
)

// ErrNoRRef: the RRef named is not owned by the worker asked (released,
// or its creator died before it was made).
var ErrNoRRef = errors.New("no such RRef at its owner")

// RRef is a remote reference: a handle on a value of type T that lives
// on its owner worker (PyTorch's RRef). Remote returns one, NewRRef makes
// one around a local value, and RRefs travel inside the arguments and
// results of calls, each arrival a new handle (a fork). The owner keeps
// the value while any handle on any worker is alive, by the reference
// counting protocol of package rpc/rref; a handle dies with Release, or,
// as a safety net, when it becomes unreachable.
type RRef[T any] struct{ r *handle }

// handle is one RRef handle's state, shared with its cleanup.
type handle struct {
	s        *rrefs
	owner    int
	id       rref.RRefID
	fork     rref.ForkID
	fp       uint64        // wire fingerprint of T
	created  chan struct{} // closed when the remote call's reply came
	err      error         // the remote call failed (set before created closes)
	released atomic.Bool
	// confirmed is closed when the owner counts this handle (or the
	// handle failed: cerr says why), so that calls on the value wait
	// until the owner knows the RRef.
	confirmed chan struct{}
	cerr      error
	cdone     bool // confirmed closed; s.mu guards it
}

// rrefs is an agent's RRef state: the protocol's table, the values this
// worker owns, and the handles it holds.
type rrefs struct {
	a  *Agent
	mu sync.Mutex
	t  *rref.Table
	// values are the owned RRefs' values by id; a value still being
	// computed (or whose remote call has not arrived) is a pending future.
	values  map[rref.RRefID]*slot
	handles map[rref.ForkID]*handle
	// failed are RRefs whose owner died, with why.
	failed map[rref.RRefID]error
	out    chan rref.Msg
}

type slot struct {
	fut *Future[any]
	fp  uint64 // the value's wire fingerprint, once known
}

func newRRefs(a *Agent) *rrefs {
	s := &rrefs{a: a, t: rref.NewTable(rref.WorkerID(a.self.ID)), values: map[rref.RRefID]*slot{},
		handles: map[rref.ForkID]*handle{}, failed: map[rref.RRefID]error{}, out: make(chan rref.Msg, 1024)}
	go s.sender()
	return s
}

// sender sends the protocol's messages in order, off the callers' paths
// (some are produced on a connection's reader, which must not block).
func (s *rrefs) sender() {
	for m := range s.out {
		b, _ := m.AppendBinary(make([]byte, 0, rref.MsgSize))
		ctx, cancel := context.WithTimeout(context.Background(), s.a.replyTimeout())
		err := s.a.ep.SendMessage(ctx, int(m.To), key(tagRRef, 0), 0, b)
		cancel()
		if err != nil {
			s.a.sent.Add(-1) // it will never be received
			s.a.log.Debug("rpc: RRef message not sent", "msg", m.String(), "err", err)
		}
	}
}

// emit queues msgs for sending and frees the values the table deleted.
// s.mu is held.
func (s *rrefs) emitLocked(msgs []rref.Msg) {
	for _, m := range msgs {
		s.a.sent.Add(1)
		select {
		case s.out <- m:
		default:
			// The queue is full: send from a goroutine of its own rather
			// than block under the lock.
			go func() { s.out <- m }()
		}
	}
	for _, id := range s.t.Deleted() {
		if v := s.values[id]; v != nil {
			delete(s.values, id)
			v.fut.Set(nil, fmt.Errorf("%w: %v was deleted", ErrNoRRef, id))
		}
	}
}

// slotLocked returns id's value slot, making a pending one.
func (s *rrefs) slotLocked(id rref.RRefID) *slot {
	v := s.values[id]
	if v == nil {
		v = &slot{fut: NewFuture[any]()}
		s.values[id] = v
	}
	return v
}

func (s *rrefs) onMessage(src int, msg []byte) {
	var m rref.Msg
	if err := m.UnmarshalBinary(msg); err != nil {
		s.a.log.Warn("rpc: bad RRef message", "from", src, "err", err)
		return
	}
	if int(m.From) != src {
		// The transport authenticated src; a message claiming to be from
		// another worker is forged.
		s.a.log.Warn("rpc: RRef message with a forged sender dropped", "from", src, "claims", m.From)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emitLocked(s.t.Handle(m))
	if h := s.handles[m.Fork]; h != nil {
		s.checkConfirmedLocked(h)
	}
}

func (s *rrefs) peerDown(r int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	failed, out := s.t.PeerDown(rref.WorkerID(r))
	for _, h := range s.handles {
		if h.owner == r {
			s.failConfirmLocked(h, err)
		}
	}
	for _, id := range failed {
		s.failed[id] = err
		if v := s.values[id]; v != nil {
			delete(s.values, id)
			v.fut.Set(nil, err)
		}
	}
	s.emitLocked(out)
}

// releaseAll releases every handle this worker still holds (at graceful
// shutdown, as PyTorch deletes all user RRefs).
func (s *rrefs) releaseAll() {
	s.mu.Lock()
	hs := make([]*handle, 0, len(s.handles))
	for _, h := range s.handles {
		hs = append(hs, h)
	}
	s.mu.Unlock()
	for _, h := range hs {
		h.release()
	}
}

// Empty reports whether the agent holds no RRef state (every value it
// owned was freed and every handle released), and describes what is left.
func (a *Agent) RRefsEmpty() (bool, string) {
	s := a.rrefs
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t.Empty() && len(s.values) == 0, s.t.String()
}

func (h *handle) release() {
	if h.released.Swap(true) {
		return
	}
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.handles, h.fork)
	// A confirmation that comes now finds no handle: whoever still waits
	// for one hears that the handle is gone, not nothing, for ever.
	s.failConfirmLocked(h, fmt.Errorf("%v was released while a call waited for its owner to confirm it", h.id))
	s.emitLocked(s.t.Release(h.id, h.fork))
}

// newHandle registers a handle. s.mu is held.
func (s *rrefs) newHandleLocked(owner int, id rref.RRefID, fork rref.ForkID, fp uint64) *handle {
	h := &handle{s: s, owner: owner, id: id, fork: fork, fp: fp, created: make(chan struct{}), confirmed: make(chan struct{})}
	s.handles[fork] = h
	s.checkConfirmedLocked(h)
	return h
}

// checkConfirmedLocked closes h.confirmed once the table confirms h.
func (s *rrefs) checkConfirmedLocked(h *handle) {
	if !h.cdone && s.t.Confirmed(h.id, h.fork) {
		h.cdone = true
		close(h.confirmed)
	}
}

// failConfirmLocked ends the wait for confirmation with err.
func (s *rrefs) failConfirmLocked(h *handle, err error) {
	if !h.cdone {
		h.cdone, h.cerr = true, err
		close(h.confirmed)
	}
}

// awaitConfirmed waits until the owner counts h.
func (h *handle) awaitConfirmed(ctx context.Context) error {
	select {
	case <-h.confirmed:
		return h.cerr
	default:
	}
	select {
	case <-h.confirmed:
		return h.cerr
	case <-h.created:
		if h.err != nil {
			return h.err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-h.confirmed:
		return h.cerr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func wrap[T any](h *handle) *RRef[T] {
	r := &RRef[T]{r: h}
	runtime.AddCleanup(r, func(h *handle) { h.release() }, h)
	return r
}

// NewRRef makes an RRef owned by this worker around v (PyTorch's
// RRef(value)), to pass to other workers.
func NewRRef[T any](a *Agent, v T) *RRef[T] {
	fp := typeFP(reflect.TypeFor[T]())
	s := a.rrefs
	s.mu.Lock()
	id, fork := s.t.NewOwned()
	sl := s.slotLocked(id)
	sl.fp = fp
	sl.fut.Set(v, nil)
	h := s.newHandleLocked(a.self.ID, id, fork, fp)
	s.mu.Unlock()
	close(h.created)
	return wrap[T](h)
}

// Remote runs the function on worker to and returns an RRef to its
// result, which stays on that worker (PyTorch's rpc.remote). It does not
// wait for the function: an error it returns (or an unknown function, a
// type mismatch) comes out of ToHere.
func (f Fn[A, R]) Remote(ctx context.Context, a *Agent, to string, args A) (*RRef[R], error) {
	return remote[A, R](ctx, a, to, head{op: opRemote, name: f.name}, args)
}

// Remote runs the method on ref's value at its owner and returns an RRef
// to the result, owned by the same worker (rref.remote().method(args)).
func (m Method[T, A, R]) Remote(ctx context.Context, a *Agent, ref *RRef[T], args A) (*RRef[R], error) {
	if ref == nil || ref.r == nil {
		return nil, &CallError{Function: m.name, Err: fmt.Errorf("a nil RRef")}
	}
	return remote[A, R](ctx, a, a.name(ref.r.owner), head{op: opMRemote, name: m.name, target: toID(ref.r.id)}, args)
}

func remote[A, R any](ctx context.Context, a *Agent, to string, hd head, args A) (*RRef[R], error) {
	dst, argFP, resFP, err := target[A, R](a, to, hd.name)
	if err != nil {
		return nil, &CallError{Worker: to, Function: hd.name, Err: err}
	}
	s := a.rrefs
	s.mu.Lock()
	id, fork, err := s.t.CreateRemote(rref.WorkerID(dst))
	if err != nil {
		s.mu.Unlock()
		return nil, &CallError{Worker: to, Function: hd.name, Err: a.peerDown(dst, err)}
	}
	h := s.newHandleLocked(dst, id, fork, resFP)
	s.mu.Unlock()
	hd.rref, hd.fork, hd.resultFP = toID(id), toForkID(fork), resFP
	// A request that never leaves undoes what was done for it, as start's
	// does: the forks of the RRefs among the arguments, and the new RRef's
	// handle, which no owner will ever confirm.
	ec := &encodeCtx{agent: a, dst: dst, x: &Exchange{Agent: a, Peer: dst, Context: ctx}}
	unsent := func() {
		ec.cancelForks()
		h.cancelRemote()
	}
	err = a.sendArgs(ctx, &hd, argFP, args, ec, &call{dst: dst, fn: hd.name, unsent: unsent, complete: func(_ []byte, err error) {
		if err != nil {
			h.err = &CallError{Worker: to, Function: hd.name, Err: err}
			s.mu.Lock()
			s.failConfirmLocked(h, h.err)
			s.mu.Unlock()
			close(h.created)
			return
		}
		s.mu.Lock()
		s.emitLocked(s.t.ConfirmRemote(id, fork))
		s.checkConfirmedLocked(h)
		s.mu.Unlock()
		close(h.created)
	}})
	if err != nil {
		h.cancelRemote() // sendArgs unforked the arguments
		h.fail(fmt.Errorf("encoding the arguments: %w", err))
		return nil, &CallError{Worker: to, Function: hd.name, Err: a.peerDown(dst, err)}
	}
	return wrap[R](h), nil
}

// downFor is the agent's *WorkerDownError for dst when err is the RRef
// table's refusal to create or send an RRef to dst because it is down;
// nil otherwise.
func (a *Agent) downFor(dst int, err error) error {
	if errors.Is(err, rref.ErrPeerDown) {
		return a.downErr(dst)
	}
	return nil
}

// peerDown is downFor's error, or err when there is none.
func (a *Agent) peerDown(dst int, err error) error {
	if werr := a.downFor(dst, err); werr != nil {
		return werr
	}
	return err
}

// cancelRemote drops the table's handle of a remote call that was never
// sent.
func (h *handle) cancelRemote() {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.s.emitLocked(h.s.t.CancelRemote(h.id, h.fork))
}

// fail marks a handle whose remote call was never sent.
func (h *handle) fail(err error) {
	h.err = err
	h.s.mu.Lock()
	h.s.failConfirmLocked(h, err)
	h.s.mu.Unlock()
	close(h.created)
	h.release()
}

// Owner returns the worker that holds the value.
func (r *RRef[T]) Owner() WorkerInfo { return r.r.s.a.workers[r.r.owner] }

// IsOwner reports whether this worker holds the value.
func (r *RRef[T]) IsOwner() bool { return r.r.owner == r.r.s.a.self.ID }

// Agent returns the agent this handle belongs to (the worker holding it).
func (r *RRef[T]) Agent() *Agent { return r.r.s.a }

// ConfirmedByOwner reports whether the owner knows of this handle (so
// that the value stays alive for it).
func (r *RRef[T]) ConfirmedByOwner() bool {
	s := r.r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t.Confirmed(r.r.id, r.r.fork)
}

// String names the RRef.
func (r *RRef[T]) String() string {
	return fmt.Sprintf("RRef[%s](%v on %s)", typeName[T](), r.r.id, r.r.s.a.name(r.r.owner))
}

// Release drops this handle: the owner frees the value once no handle
// anywhere refers to it. Using the handle afterwards is an error.
// Releasing twice does nothing.
func (r *RRef[T]) Release() { r.r.release() }

// LocalValue returns the value on its owner (PyTorch's local_value),
// waiting for it if the function computing it still runs. On another
// worker it is an error: use ToHere.
func (r *RRef[T]) LocalValue(ctx context.Context) (T, error) {
	var zero T
	if !r.IsOwner() {
		return zero, fmt.Errorf("rpc: LocalValue of %v on %s, which is not its owner (use ToHere)", r, r.r.s.a.self.Name)
	}
	return r.ToHere(ctx)
}

// ToHere returns a copy of the value, fetched from its owner (on the
// owner, the value itself), waiting for the function computing it.
func (r *RRef[T]) ToHere(ctx context.Context) (T, error) {
	// r's cleanup releases the handle once r is unreachable: the call
	// keeps it, as a caller's reference would.
	defer runtime.KeepAlive(r)
	var zero T
	h := r.r
	if h.released.Load() {
		return zero, fmt.Errorf("rpc: ToHere of %v after Release", r)
	}
	a := h.s.a
	if h.owner == a.self.ID {
		select {
		case <-h.created:
		case <-ctx.Done():
			return zero, ctx.Err()
		}
		h.s.mu.Lock()
		sl := h.s.values[h.id]
		h.s.mu.Unlock()
		if sl == nil {
			return zero, fmt.Errorf("%w: %v", ErrNoRRef, h.id)
		}
		v, err := sl.fut.Wait(ctx)
		if err != nil {
			return zero, err
		}
		t, ok := v.(T)
		if !ok && v != nil {
			return zero, fmt.Errorf("%w: %v holds a %T, not a %s", ErrTypeMismatch, r, v, typeName[T]())
		}
		return t, nil
	}
	// Ask the owner once it knows this handle; the request waits there
	// for the value.
	owner := a.name(h.owner)
	if err := h.awaitConfirmed(ctx); err != nil {
		if !errors.As(err, new(*CallError)) {
			err = &CallError{Worker: owner, Function: "ToHere", Err: err}
		}
		return zero, err
	}
	f := start[struct{}, T](ctx, a, owner, head{op: opToHere, name: "ToHere", target: toID(h.id)}, struct{}{})
	v, err := await(ctx, f, owner, "ToHere")
	if err != nil {
		// A remote call that failed says why better than the owner.
		select {
		case <-h.created:
			if h.err != nil {
				return zero, h.err
			}
		default:
		}
		return zero, err
	}
	return v, nil
}

// serveOwnerOp answers a ToHere at the owner.
func (s *rrefs) serveOwnerOp(src int, h *head, reply func(any, uint64, error)) {
	id := fromID(h.target)
	s.mu.Lock()
	sl := s.values[id]
	if sl == nil && s.t.Owns(id) {
		sl = s.slotLocked(id) // counted, not yet computed: wait for it
	}
	ferr := s.failed[id]
	s.mu.Unlock()
	if sl == nil {
		msg := fmt.Sprintf("%v is not owned by %s (released, or never created)", id, s.a.self.Name)
		if ferr != nil {
			msg += ": " + ferr.Error()
		}
		reply(nil, 0, &wireError{Kind: errNoRRef, Worker: s.a.self.Name, Function: "ToHere", Message: msg})
		return
	}
	sl.fut.Then(func(v any, err error) {
		if err != nil {
			if _, ok := err.(*wireError); !ok {
				err = &wireError{Kind: errRemote, Worker: s.a.self.Name, Function: "ToHere", Message: err.Error()}
			}
			reply(nil, 0, err)
			return
		}
		if sl.fp != h.resultFP {
			reply(nil, 0, &wireError{Kind: errMismatch, Worker: s.a.self.Name, Function: "ToHere",
				Message: fmt.Sprintf("%v holds a %T (fingerprint %#x); the caller's RRef type has fingerprint %#x", id, v, sl.fp, h.resultFP)})
			return
		}
		reply(v, sl.fp, nil)
	})
}

// serveRemote runs a remote call at the owner: it counts the caller's
// fork, confirms at once (reply), and computes the value into the RRef's
// slot with run; verr, when not nil, is the value instead (an unknown
// function, a type mismatch: they come out of ToHere).
func (s *rrefs) serveRemote(src int, h *head, resFP uint64, verr error, run func(fill func(any, error)), reply func(any, uint64, error)) {
	id, fork := fromID(h.rref), fromForkID(h.fork)
	s.mu.Lock()
	err := s.t.AcceptRemote(rref.WorkerID(src), id, fork)
	if err != nil {
		s.mu.Unlock()
		if errors.Is(err, rref.ErrDuplicate) || errors.Is(err, rref.ErrGone) {
			reply(nil, 0, nil)
			return
		}
		reply(nil, 0, &wireError{Kind: errNoRRef, Worker: s.a.self.Name, Function: h.name, Message: err.Error()})
		return
	}
	sl := s.slotLocked(id)
	sl.fp = resFP
	s.emitLocked(nil)
	s.mu.Unlock()
	// Still serving until the value is in: graceful shutdown waits for it.
	s.a.serving.Add(1)
	reply(nil, 0, nil)
	fill := func(v any, err error) {
		sl.fut.Set(v, err)
		s.a.serving.Add(-1)
	}
	if verr != nil {
		fill(nil, verr)
		return
	}
	run(fill)
}

// withValue runs fn with the value of the owned RRef id, once it is
// computed.
func (s *rrefs) withValue(id rref.RRefID, fn func(any, error)) {
	s.mu.Lock()
	sl := s.values[id]
	if sl == nil && s.t.Owns(id) {
		sl = s.slotLocked(id)
	}
	s.mu.Unlock()
	if sl == nil {
		fn(nil, &wireError{Kind: errNoRRef, Worker: s.a.self.Name, Message: fmt.Sprintf("%v is not owned by %s (released, or never created)", id, s.a.self.Name)})
		return
	}
	sl.fut.Then(fn)
}

// The wire form of an RRef inside arguments and results: its owner, id,
// the fork minted for the receiver, and T's fingerprint.

// EncodeWire forks the handle for the worker the message goes to.
func (r *RRef[T]) EncodeWire(e *wire.Encoder) error {
	ec, ok := e.Ctx.(*encodeCtx)
	if !ok || ec.agent != r.r.s.a {
		return fmt.Errorf("rpc: an RRef can only travel in a call of the agent that holds it")
	}
	if r.r.released.Load() {
		return fmt.Errorf("rpc: %v was released and cannot be sent", r)
	}
	s := r.r.s
	s.mu.Lock()
	child, err := s.t.Fork(r.r.id, r.r.fork, rref.WorkerID(ec.dst))
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("rpc: sending %v to %s: %w", r, s.a.name(ec.dst), err)
	}
	ec.forks = append(ec.forks, [2]any{r.r.id, child})
	e.Uvarint(uint64(r.r.owner))
	putWireID(e, r.r.id.Creator, r.r.id.Local)
	putWireID(e, child.Creator, child.Local)
	e.Uvarint(r.r.fp)
	return nil
}

// DecodeWire makes the receiver's handle of an RRef that arrived.
func (r *RRef[T]) DecodeWire(d *wire.Decoder) error {
	dc, ok := d.Ctx.(*decodeCtx)
	if !ok {
		return fmt.Errorf("rpc: an RRef outside a call")
	}
	a := dc.agent
	owner, err := d.Uvarint()
	if err != nil {
		return err
	}
	ic, il, err := getWireID(d)
	if err != nil {
		return err
	}
	fc, fl, err := getWireID(d)
	if err != nil {
		return err
	}
	fp, err := d.Uvarint()
	if err != nil {
		return err
	}
	if owner >= uint64(len(a.workers)) {
		return fmt.Errorf("%w: an RRef owned by rank %d of %d", ErrMalformed, owner, len(a.workers))
	}
	want := typeFP(reflect.TypeFor[T]())
	id, child := rref.RRefID{Creator: ic, Local: il}, rref.ForkID{Creator: fc, Local: fl}
	s := a.rrefs
	s.mu.Lock()
	out, err := s.t.ReceiveFork(rref.WorkerID(dc.src), rref.WorkerID(owner), id, child)
	s.emitLocked(out)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("rpc: receiving %v from %s: %w", id, a.name(dc.src), err)
	}
	h := s.newHandleLocked(int(owner), id, child, fp)
	if int(owner) == a.self.ID {
		s.slotLocked(id) // the value may still be on its way
	}
	s.mu.Unlock()
	close(h.created)
	if fp != want {
		h.release()
		return fmt.Errorf("%w: an RRef of fingerprint %#x arrived where an RRef[%s] (%#x) was expected", ErrTypeMismatch, fp, typeName[T](), want)
	}
	r.r = h
	runtime.AddCleanup(r, func(h *handle) { h.release() }, h)
	return nil
}

func putWireID(e *wire.Encoder, w rref.WorkerID, local uint64) {
	e.Uvarint(uint64(uint32(w)))
	e.Uvarint(local)
}

func getWireID(d *wire.Decoder) (rref.WorkerID, uint64, error) {
	w, err := d.Uvarint()
	if err != nil {
		return 0, 0, err
	}
	l, err := d.Uvarint()
	if err != nil {
		return 0, 0, err
	}
	if w > 1<<31-1 {
		return 0, 0, fmt.Errorf("%w: worker %d", ErrMalformed, w)
	}
	return rref.WorkerID(w), l, nil
}

// cancelForks undoes the forks of a message that was never sent.
func (ec *encodeCtx) cancelForks() {
	if len(ec.forks) == 0 {
		return
	}
	s := ec.agent.rrefs
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range ec.forks {
		s.emitLocked(s.t.CancelFork(f[0].(rref.RRefID), f[1].(rref.ForkID)))
	}
	ec.forks = nil
}

func toID(i rref.RRefID) id     { return id{Worker: int32(i.Creator), Local: i.Local} }
func toForkID(f rref.ForkID) id { return id{Worker: int32(f.Creator), Local: f.Local} }
func fromID(i id) rref.RRefID   { return rref.RRefID{Creator: rref.WorkerID(i.Worker), Local: i.Local} }
func fromForkID(i id) rref.ForkID {
	return rref.ForkID{Creator: rref.WorkerID(i.Worker), Local: i.Local}
}
