// Package rref is the reference counting of remote references (RRefs), as
// in PyTorch's Remote Reference Protocol, written as a pure state machine:
// no network, no goroutines, no clocks. The RPC agent feeds a worker's
// Table the local events and the control messages that arrive, sends the
// messages the Table returns, keeps the values, and frees a value when
// Deleted names it.
//
// # Model
//
// An RRef is a value living on one worker, its owner, named globally by an
// RRefID minted by the worker that created it. Every handle to it, on any
// worker, is a reference with its own ForkID: on the owner a local handle
// of the OwnerRRef, elsewhere a UserRRef. The owner counts the forks it
// knows of and deletes the value when none is left. Two guarantees make
// that safe when messages are delayed, reordered and duplicated:
//
//   - G1: a user's fork is never uncounted before the owner has counted it.
//     A UserRRef sends its UserDelete only once confirmed (by the reply to
//     remote(), by a ForkAccept, or because the owner sent it), so the
//     delete never overtakes the fork it deletes.
//   - G2: the owner never deletes a value while a reference to it is alive
//     or in flight. A user that sends its RRef to another worker keeps the
//     child as a pending child of its own fork, and does not delete its own
//     fork until the child reports (ChildAccept) that the owner counts it.
//     The owner, when it sends an RRef, counts the child at once.
//
// The messages: a user that receives an RRef from a worker other than the
// owner sends ForkRequest to the owner, which answers ForkAccept; the user
// then sends ChildAccept to the sender. An owner that receives its own
// RRef from a user answers ChildAccept directly. A released, confirmed
// user fork with no pending children sends UserDelete.
//
// Duplicates are harmless. Every message is idempotent except a
// ForkRequest that arrives after the fork (or the whole RRef) was deleted,
// which must not count it again; so the owner remembers, for the RRef's
// lifetime, the deleted forks that a ForkRequest had counted, and, for the
// Table's lifetime, the deleted RRefs created by other workers that were
// ever sent between users (a UserDelete says so in Msg.Forked). An RRef
// that only went between its creator and its owner leaves nothing behind.
// A ForkRequest may overtake the remote call that creates the RRef; the
// owner then counts the fork on an "unborn" entry that cannot be deleted
// before the remote call arrives.
//
// # What the agent must guarantee
//
// Control messages (Msg) may be delayed, reordered and duplicated, and lost
// only when their sender or receiver is down. The RPCs that carry RRef
// state (the remote call, its reply, and RPCs with RRefs in their
// arguments or results) are delivered at most once, in any order relative
// to everything else, and lost only when a peer is down or the send is
// known to have failed before delivery (CancelRemote, CancelFork). After PeerDown(w) the
// agent hands nothing more from w to the Table; a worker that went down
// does not come back under the same WorkerID.
//
// # Driving it
//
// Every call below is made under the agent's lock; send what it returns
// (each Msg to m.To, encoded with AppendBinary), and after any call that
// can uncount a reference free the values Deleted names.
//
//	rpc.RRef(v) on the owner     id, f := t.NewOwned()
//	remote(owner, fn) sent       id, f, err := t.CreateRemote(owner); send id, f with the call
//	  ... the call never left    out := t.CancelRemote(id, f)
//	remote call arrives (owner)  err := t.AcceptRemote(caller, id, f); nil: run fn into id's slot
//	remote reply arrives         out := t.ConfirmRemote(id, f)
//	RRef sent in an RPC          child, err := t.Fork(id, f, to); send (owner, id, child)
//	  ... the RPC never left     out := t.CancelFork(id, child)
//	RRef arrives in an RPC       out, err := t.ReceiveFork(sender, owner, id, child); send out even if
//	                             err != nil; if err == nil the new handle is (id, child)
//	handle Release / finalizer   out := t.Release(id, f)
//	control message arrives      var m Msg; m.UnmarshalBinary(b); out := t.Handle(m)
//	peer w declared dead         failed, out := t.PeerDown(w); fail ToHere/values of failed
//	shutdown                     release every handle, exchange messages until every
//	                             worker's t.Empty(); on timeout report t.String()
//
// # Example
//
// Worker 1 calls remote() on worker 0, passes the RRef to worker 2, and
// both users release it:
//
//	w0, w1, w2 := rref.NewTable(0), rref.NewTable(1), rref.NewTable(2)
//	id, f1, _ := w1.CreateRemote(0)       // remote call carries id, f1
//	w0.AcceptRemote(1, id, f1)            // owner counts f1
//	w1.ConfirmRemote(id, f1)              // the reply
//	f2, _ := w1.Fork(id, f1, 2)           // RPC to worker 2 carries (0, id, f2)
//	out, _ := w2.ReceiveFork(1, 0, id, f2) // ForkRequest → w0
//	out = w0.Handle(out[0])               // ForkAccept → w2
//	out = w2.Handle(out[0])               // ChildAccept → w1
//	w1.Handle(out[0])                     // w1 drops its pending child
//	w0.Handle(w1.Release(id, f1)[0])      // UserDelete f1
//	w0.Handle(w2.Release(id, f2)[0])      // UserDelete f2
//	w0.Deleted()                          // [id]: free the value
package rref
