package rpc

import (
	"context"
	"sync"
	"sync/atomic"
)

// Exchange is one call seen from one side: the request and its reply. A
// value that encodes itself (a wire.Extension, as RRefs and distributed
// autograd's Vars do) learns from it the agent, the peer and the context
// of the call, and can leave a note for the other half of the same call:
// what an argument records while it is decoded on the callee is there when
// the result is encoded, and what the caller records while encoding the
// arguments is there when the result is decoded. Distributed autograd
// carries its context id across a call this way.
//
// On the caller, Context is the context the call was made with; on the
// callee it is the handler's context, which holds the Exchange
// (ExchangeFrom), so that calls the handler makes can find it too.
type Exchange struct {
	Agent   *Agent
	Peer    int // the other worker's rank
	Context context.Context

	mu struct {
		sync.Mutex
		vals map[any]any
	}
}

// Value returns the note stored under key, or nil.
func (x *Exchange) Value(key any) any {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.mu.vals[key]
}

// SetValue stores a note under key for the rest of the call.
func (x *Exchange) SetValue(key, v any) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.vals == nil {
		x.mu.vals = map[any]any{}
	}
	x.mu.vals[key] = v
}

// ExchangeOf returns the exchange of the wire.Encoder's or
// wire.Decoder's Ctx (as given to a wire.Extension), and false when the
// value is not being coded by this package's agent.
func ExchangeOf(wireCtx any) (*Exchange, bool) {
	switch c := wireCtx.(type) {
	case *encodeCtx:
		return c.exchange(), true
	case *decodeCtx:
		return c.exchange(), true
	}
	return nil, false
}

type exchangeKey struct{}

// ExchangeFrom returns the exchange of the call a handler's ctx serves.
func ExchangeFrom(ctx context.Context) (*Exchange, bool) {
	x, ok := ctx.Value(exchangeKey{}).(*Exchange)
	return x, ok
}

func (c *encodeCtx) exchange() *Exchange {
	if c.x == nil {
		c.x = &Exchange{Agent: c.agent, Peer: c.dst, Context: context.Background()}
	}
	return c.x
}

func (c *decodeCtx) exchange() *Exchange {
	if c.x == nil {
		c.x = &Exchange{Agent: c.agent, Peer: c.src, Context: context.Background()}
	}
	return c.x
}

// CallNote carries one value of a caller's context to the callee of
// every call made with it, in the request's head: distributed autograd's
// context id, so that a call made in a context is recorded in it on both
// sides whatever its arguments hold (PyTorch attaches the context to
// every RPC made in one, a to_here included). There is one per process,
// set by the package that needs it (SetCallNote), as wire extensions are
// registered.
type CallNote struct {
	// Take returns the note of a call about to leave, whose exchange x
	// holds the caller's context (x.Context) and the callee (x.Peer); 0
	// for none. It may leave values on x for the decoding of the reply.
	Take func(x *Exchange) uint64
	// Give runs on the callee with a note Take returned, before the
	// arguments are decoded (or the value a ToHere asks for is encoded):
	// it may leave values on x, which the arguments' decoding, the
	// handler's ctx (ExchangeFrom) and the result's encoding then see. An
	// error refuses the call.
	Give func(x *Exchange, note uint64) error
}

var callNote atomic.Pointer[CallNote]

// SetCallNote installs n for every agent of the process; a second call
// replaces the first.
func SetCallNote(n CallNote) { callNote.Store(&n) }

// takeNote returns the note of a call leaving with exchange x.
func takeNote(x *Exchange) uint64 {
	if n := callNote.Load(); n != nil && n.Take != nil {
		return n.Take(x)
	}
	return 0
}

// giveNote hands a call's note to the registered CallNote on the callee.
func giveNote(x *Exchange, note uint64) error {
	if note == 0 {
		return nil
	}
	if n := callNote.Load(); n != nil && n.Give != nil {
		return n.Give(x, note)
	}
	return nil // no package here wants it
}
