package distautograd

import "github.com/godist/godist/rpc"

// Every call made in a context carries the context's id in its head
// (rpc.CallNote), as PyTorch attaches the context to every RPC made in
// one: the callee joins the context, its handler's ctx is in it, and what
// the call carries back (a result, the value a ToHere fetches) is
// recorded in it, whatever the arguments hold.
func init() {
	rpc.SetCallNote(rpc.CallNote{Take: takeNote, Give: giveNote})
}

// takeNote is the caller's half: the id of the context the call is made
// in (0: none), with the callee counted among the context's workers here
// and the id left on the exchange for the reply's decoding.
func takeNote(x *rpc.Exchange) uint64 {
	id, in := contextOf(x.Context)
	if !in {
		id, in = x.Value(ctxKey{}).(ContextID)
	}
	if !in {
		return 0
	}
	w, err := workerOf(x.Agent)
	if err != nil {
		return 0
	}
	c := w.lookup(id)
	if c == nil {
		return 0 // released here: the call goes out of it
	}
	c.addPeer(x.Peer)
	x.SetValue(ctxKey{}, id)
	return uint64(id)
}

// giveNote is the callee's half: it joins the context and leaves its id
// on the exchange.
func giveNote(x *rpc.Exchange, note uint64) error {
	w, err := workerOf(x.Agent)
	if err != nil {
		return err
	}
	id := ContextID(note)
	w.join(id).addPeer(x.Peer)
	x.SetValue(ctxKey{}, id)
	return nil
}
