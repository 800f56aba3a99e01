package rpc

// The agent's server side, as net/rpc's server.go: each request is served
// on a goroutine of its own (reused while requests keep coming), which
// finds the registered function, runs it and sends its reply; after
// Shutdown, requests are answered with ErrShutdown.

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/godist/godist/rpc/internal/wire"
	"github.com/godist/godist/transport"
)

// request is one request to serve.
type request struct {
	src  int
	id   uint64
	fp   uint64
	msg  []byte
	size int64
}

// maxIdleServers bounds the goroutines kept waiting for requests.
const maxIdleServers = 256

// dispatch serves r on an idle server goroutine, or a new one (a handler
// may block, so there is no fixed pool: a request never waits for one).
func (a *Agent) dispatch(r request) {
	select {
	case a.idle <- r:
	default:
		go a.server(r)
	}
}

// server serves r, then waits a while for more requests before it ends.
func (a *Agent) server(r request) {
	var t *time.Timer // one per server: a timer per request was a tenth of a small call
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		a.serve(r.src, r.id, r.fp, r.msg, r.size)
		r = request{}
		if a.idleServers.Add(1) > maxIdleServers {
			a.idleServers.Add(-1)
			return
		}
		if t == nil {
			t = time.NewTimer(serverIdle)
		} else {
			t.Reset(serverIdle) // Go 1.23 timers: no stale tick to drain
		}
		select {
		case r = <-a.idle:
			a.idleServers.Add(-1)
		case <-t.C:
			a.idleServers.Add(-1)
			return
		case <-a.serveCtx.Done():
			a.idleServers.Add(-1)
			return
		}
	}
}

// serverIdle is how long an idle server goroutine waits for a request.
const serverIdle = time.Second

// serve runs one request on its own goroutine.
func (a *Agent) serve(src int, id uint64, fp uint64, msg []byte, size int64) {
	<-a.ready
	if !a.isReady.Load() {
		a.serving.Add(-1)
		return // Init failed
	}
	replied := false
	x := &Exchange{Agent: a, Peer: src}
	reply := func(res any, resFP uint64, err error) {
		if replied {
			return
		}
		replied = true
		a.reply(src, id, resFP, res, err, x)
		a.serving.Add(-1)
	}
	h, body, err := decodeHead(msg)
	if err != nil {
		reply(nil, 0, &wireError{Kind: errBadArgs, Worker: a.self.Name, Message: err.Error()})
		return
	}
	if int64(len(msg)) < size {
		reply(nil, 0, &wireError{Kind: errTooLarge, Worker: a.self.Name, Function: h.name,
			Message: fmt.Sprintf("a request for %s of %d bytes, %s accepts at most %d (its Options.MaxMessage); nothing ran", h.name, size, a.self.Name, a.limit)})
		return
	}
	if err := giveNote(x, h.note); err != nil {
		reply(nil, 0, &wireError{Kind: errRefused, Worker: a.self.Name, Function: h.name, Message: a.self.Name + " would not take the call's note: " + err.Error()})
		return
	}
	if h.op == opToHere {
		a.rrefs.serveOwnerOp(src, &h, reply)
		return
	}
	if h.op == opRRefPing {
		reply(nil, 0, nil)
		return
	}
	fn, verr := a.check(fp, &h)
	isRemote := h.op == opRemote || h.op == opMRemote
	if verr != nil && !isRemote {
		reply(nil, 0, verr)
		return
	}
	var d *wire.Decoder
	if verr == nil {
		if d, err = wire.NewDecoder(body, &decodeCtx{agent: a, src: src, x: x}); err != nil {
			verr = &wireError{Kind: errBadArgs, Worker: a.self.Name, Function: h.name, Message: err.Error()}
			if !isRemote {
				reply(nil, 0, verr)
				return
			}
		}
	}
	ctx := context.WithValue(a.serveCtx, exchangeKey{}, x)
	var cancel context.CancelFunc = func() {}
	if h.timeout > 0 && !isRemote {
		dc := withLazyDeadline(ctx, h.timeout)
		ctx, cancel = dc, dc.stop
	}
	x.Context = ctx
	// run calls the function (on the target's value for a method) and
	// hands its result, with errors put in their wire form, to done.
	run := func(done func(any, error)) {
		finish := func(res any, err error) {
			cancel()
			done(res, a.wireErr(ctx, h.name, err))
		}
		if h.op == opMethod || h.op == opMRemote {
			a.rrefs.withValue(fromID(h.target), func(v any, err error) {
				if err != nil {
					finish(nil, err)
					return
				}
				a.invoke(ctx, fn, v, d, finish)
			})
			return
		}
		a.invoke(ctx, fn, nil, d, finish)
	}
	if isRemote {
		var resFP uint64
		if fn != nil {
			resFP = fn.resFP
		}
		var verrErr error
		if verr != nil {
			verrErr = verr
		}
		a.rrefs.serveRemote(src, &h, resFP, verrErr, run, reply)
		return
	}
	run(func(res any, err error) { reply(res, fn.resFP, err) })
}

// check finds the function a request names and checks that the caller
// agrees on its types and kind.
func (a *Agent) check(fp uint64, h *head) (*handler, *wireError) {
	fn := a.reg.lookup(h.name)
	if fn == nil {
		return nil, &wireError{Kind: errUnknown, Worker: a.self.Name, Function: h.name,
			Message: fmt.Sprintf("%s has no function %q registered; nothing ran (register it on every worker that serves it, before Init)", a.self.Name, h.name)}
	}
	if fp != fn.argFP || h.resultFP != fn.resFP {
		return nil, &wireError{Kind: errMismatch, Worker: a.self.Name, Function: h.name,
			Message: fmt.Sprintf("%s on %s takes arguments of fingerprint %#x and returns %#x; the caller sent %#x and expects %#x (are both built from the same types?)", h.name, a.self.Name, fn.argFP, fn.resFP, fp, h.resultFP)}
	}
	isMethod := h.op == opMethod || h.op == opMRemote
	if (fn.recv != nil) != isMethod {
		return nil, &wireError{Kind: errMismatch, Worker: a.self.Name, Function: h.name,
			Message: fmt.Sprintf("%s on %s is a %s, called as a %s", h.name, a.self.Name, kindOf(fn.recv != nil), kindOf(isMethod))}
	}
	return fn, nil
}

// wireErr turns a function's error into its wire form.
func (a *Agent) wireErr(ctx context.Context, fn string, err error) error {
	if err == nil {
		return nil
	}
	var de decodeErr
	if errors.As(err, &de) {
		switch {
		case errors.Is(de.err, ErrTypeMismatch):
			return &wireError{Kind: errMismatch, Worker: a.self.Name, Function: fn, Message: de.Error()}
		case isRefusal(de.err):
			return &wireError{Kind: errRefused, Worker: a.self.Name, Function: fn, Message: a.self.Name + " would not take the arguments: " + de.Error()}
		}
		return &wireError{Kind: errBadArgs, Worker: a.self.Name, Function: fn, Message: de.Error()}
	}
	if _, ok := err.(*wireError); ok {
		return err
	}
	kind := uint8(errRemote)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		kind = errDeadline
	}
	return &wireError{Kind: kind, Worker: a.self.Name, Function: fn, Message: err.Error()}
}

// invoke runs a registered function, turning a panic into an error.
func (a *Agent) invoke(ctx context.Context, fn *handler, self any, d *wire.Decoder, done func(any, error)) {
	once := sync.Once{}
	finish := func(res any, err error) { once.Do(func() { done(res, err) }) }
	defer func() {
		if p := recover(); p != nil {
			a.log.Error("rpc: handler panicked", "function", fn.name, "panic", p)
			finish(nil, &wireError{Kind: errPanic, Worker: a.self.Name, Function: fn.name,
				Message: fmt.Sprintf("%v\n%s", p, debug.Stack())})
		}
	}()
	fn.run(ctx, self, d, finish)
}

func kindOf(method bool) string {
	if method {
		return "method of an RRef's value"
	}
	return "function"
}

// reply sends a request's result (or error) back to src.
// x is the call's exchange (nil for replies that are not a function's).
func (a *Agent) reply(src int, id uint64, resFP uint64, res any, err error, x *Exchange) {
	var e wire.Encoder
	status := byte(replyOK)
	if err == nil && res != nil {
		e.Ctx = &encodeCtx{agent: a, dst: src, x: x}
		if encErr := e.Encode(res); encErr != nil {
			err = &wireError{Kind: errRemote, Worker: a.self.Name, Message: "encoding the result: " + encErr.Error()}
			e = wire.Encoder{}
		}
	}
	if err != nil {
		status = replyError
		we, ok := err.(*wireError)
		if !ok {
			we = &wireError{Kind: errRemote, Worker: a.self.Name, Message: err.Error()}
		}
		e = wire.Encoder{}
		e.Encode(*we)
	} else if res == nil {
		e.Reset()
	}
	parts := e.Parts()
	var n int64 = 8
	for _, p := range parts {
		n += int64(len(p))
	}
	if src >= 0 && src < len(a.limits) && n > a.limits[src] && status == replyOK {
		e = wire.Encoder{}
		e.Encode(wireError{Kind: errTooLarge, Worker: a.self.Name,
			Message: fmt.Sprintf("the reply of %d bytes is larger than %s accepts (%d, its Options.MaxMessage)", n, a.name(src), a.limits[src])})
		status = replyError
		parts = e.Parts()
	}
	hdr := []byte{status, 0, 0, 0, 0, 0, 0, 0}
	a.sent.Add(1)
	k := key(tagReply, id)
	if src == a.self.ID {
		a.loopback(src, k, resFP, hdr, parts)
		return
	}
	if err := a.ep.SendMessage(a.serveCtx, src, k, resFP, append([][]byte{hdr}, parts...)...); err != nil {
		a.sent.Add(-1)
		a.log.Warn("rpc: reply not sent", "to", src, "call", id, "err", err)
	}
}

// messageHeadLimit is how much of a message a shut-down agent reads: a
// request's head, to answer it.
const messageHeadLimit = headSize + maxName

// onMessageClosed answers requests after shutdown, and graceful
// shutdown's probes with an abort: a worker still waiting on this one
// learns at once that it left.
func (a *Agent) onMessageClosed(src int, k transport.Key, fp uint64, msg []byte, size int64) {
	if k.Group != rpcGroup || src == a.self.ID {
		return
	}
	if k.Tag == tagShutdown {
		a.answerProbeClosed(src, msg)
		return
	}
	if k.Tag != tagRequest {
		return
	}
	h, _, _ := decodeHead(msg)
	var e wire.Encoder
	e.Encode(wireError{Kind: errShutdown, Worker: a.self.Name, Function: h.name, Message: a.self.Name + " has shut its RPC agent down"})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		a.ep.SendMessage(ctx, src, key(tagReply, k.Seq), 0, append([][]byte{{replyError, 0, 0, 0, 0, 0, 0, 0}}, e.Parts()...)...)
	}()
}

// answerProbeClosed answers a probe that reached this agent after it
// stopped.
func (a *Agent) answerProbeClosed(src int, msg []byte) {
	var m shutdownMsg
	d, err := wire.NewDecoder(msg, nil)
	if err == nil {
		err = d.Decode(&m)
	}
	if err != nil || m.Kind != shutProbe {
		return
	}
	me := int64(a.self.ID)
	ab := shutdownMsg{Kind: shutAbort, Culprit: me, Finder: me, Cause: causeDown,
		Reason: "stopped its RPC agent without agreeing with the others (Shutdown(ctx, false), or its graceful Shutdown failed)", Detail: "its agent stopped"}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		a.sendShutdown(ctx, src, ab)
	}()
}
