package rpc

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"unsafe"

	"github.com/godist/godist/rpc/internal/wire"
)

// Fn is a typed handle on a registered function: it calls the function
// of that name on any worker, with arguments of type A and a result of
// type R. Register returns one; Func makes one for a function registered
// only on other workers.
type Fn[A, R any] struct{ name string }

// Func returns the handle of the function registered as name elsewhere.
func Func[A, R any](name string) Fn[A, R] { return Fn[A, R]{name} }

// Name returns the function's name.
func (f Fn[A, R]) Name() string { return f.name }

// Call runs the function on worker to and returns its result
// (rpc_sync). ctx bounds the whole call; without a deadline, the agent's
// Options.Timeout does. Its error is a *CallError, also when ctx ends
// first (it wraps ctx's error then).
func (f Fn[A, R]) Call(ctx context.Context, a *Agent, to string, args A) (R, error) {
	return await(ctx, f.Go(ctx, a, to, args), to, f.name)
}

// await waits for the future of a call to fn on worker to. When ctx ends
// first, the error is a *CallError naming the call that wraps ctx's.
func await[R any](ctx context.Context, f *Future[R], to, fn string) (R, error) {
	v, err := f.Wait(ctx)
	select {
	case <-f.done: // completed, perhaps just after ctx ended
		return f.val, f.err
	default: // ctx ended first
	}
	what := "the caller's ctx ended before the reply"
	if errors.Is(err, context.DeadlineExceeded) {
		what = "no reply within the call's deadline"
	}
	return v, &CallError{Worker: to, Function: fn, Err: fmt.Errorf("%s: %w", what, err)}
}

// Go starts the function on worker to and returns a future of its result
// (rpc_async). ctx's deadline (or the agent's Options.Timeout) bounds
// the call.
func (f Fn[A, R]) Go(ctx context.Context, a *Agent, to string, args A) *Future[R] {
	return start[A, R](ctx, a, to, head{op: opCall, name: f.name}, args)
}

// Method is a typed handle on a method registered with RegisterMethod:
// it runs on the owner of an RRef[T], on the value the RRef refers to.
type Method[T, A, R any] struct{ name string }

// MethodOf returns the handle of a method registered as name elsewhere.
func MethodOf[T, A, R any](name string) Method[T, A, R] { return Method[T, A, R]{name} }

// Name returns the method's name.
func (m Method[T, A, R]) Name() string { return m.name }

// Call runs the method on ref's value at its owner and returns the result
// (rref.rpc_sync().method(args)). Its errors are Fn.Call's.
func (m Method[T, A, R]) Call(ctx context.Context, a *Agent, ref *RRef[T], args A) (R, error) {
	to := ""
	if ref != nil && ref.r != nil {
		to = a.name(ref.r.owner)
	}
	return await(ctx, m.Go(ctx, a, ref, args), to, m.name)
}

// Go starts the method on ref's value at its owner (rref.rpc_async()).
func (m Method[T, A, R]) Go(ctx context.Context, a *Agent, ref *RRef[T], args A) *Future[R] {
	if ref == nil || ref.r == nil {
		return Done(*new(R), &CallError{Function: m.name, Err: fmt.Errorf("a nil RRef")})
	}
	h := head{op: opMethod, name: m.name, target: toID(ref.r.id)}
	to := a.name(ref.r.owner)
	f := m.goRef(ctx, a, ref, h, to, args)
	// The call keeps ref, as a caller's reference would, until it ends:
	// its owner may free the value once every handle is released.
	f.Then(func(R, error) { runtime.KeepAlive(ref) })
	return f
}

func (m Method[T, A, R]) goRef(ctx context.Context, a *Agent, ref *RRef[T], h head, to string, args A) *Future[R] {
	select {
	case <-ref.r.confirmed:
		if ref.r.cerr != nil {
			return Done(*new(R), &CallError{Worker: to, Function: m.name, Err: ref.r.cerr})
		}
		return start[A, R](ctx, a, to, h, args)
	default:
	}
	// The owner does not know this handle yet: call once it does.
	f := NewFuture[R]()
	go func() {
		if err := ref.r.awaitConfirmed(ctx); err != nil {
			f.Set(*new(R), &CallError{Worker: to, Function: m.name, Err: err})
			return
		}
		start[A, R](ctx, a, to, h, args).Then(func(v R, err error) { f.Set(v, err) })
	}()
	return f
}

// start encodes args, sends the request and returns the future its reply
// completes.
func start[A, R any](ctx context.Context, a *Agent, to string, h head, args A) *Future[R] {
	f := NewFuture[R]()
	fail := func(err error) {
		var zero R
		f.Set(zero, &CallError{Worker: to, Function: h.name, Err: err})
	}
	dst, argFP, resFP, err := target[A, R](a, to, h.name)
	if err != nil {
		fail(err)
		return f
	}
	h.resultFP = resFP
	x := &Exchange{Agent: a, Peer: dst, Context: ctx}
	ec := &encodeCtx{agent: a, dst: dst, x: x}
	err = a.sendArgs(ctx, &h, argFP, args, ec, &call{dst: dst, fn: h.name, unsent: ec.cancelForks, complete: func(body []byte, err error) {
		if err != nil {
			fail(err)
			return
		}
		r, err := decodeResult[R](a, dst, body, x)
		if err != nil {
			fail(err)
			return
		}
		f.Set(r, nil)
	}})
	if err != nil {
		if werr := a.downFor(dst, err); werr != nil {
			fail(werr) // an RRef in the arguments cannot go to a dead worker
		} else {
			fail(fmt.Errorf("encoding the arguments: %w", err))
		}
	}
	return f
}

// target resolves a call to fn on worker to, as start and remote make
// it: the worker's rank and the wire fingerprints of A and R.
func target[A, R any](a *Agent, to, fn string) (dst int, argFP, resFP uint64, err error) {
	dst, ok := a.byName[to]
	if !ok {
		return 0, 0, 0, fmt.Errorf("%w %q (the job's workers: %v)", ErrUnknownWorker, to, a.workerNames())
	}
	argFP, resFP, err = fingerprints[A, R](fn)
	return dst, argFP, resFP, err
}

// sendArgs encodes args in ec (which forks the RRefs among them to
// ec.dst) and sends them to ec.dst as the request h, for c to hear the
// reply. When args do not encode, it unforks those RRefs, sends nothing
// and returns the encoder's error; c then never completes.
func (a *Agent) sendArgs(ctx context.Context, h *head, argFP uint64, args any, ec *encodeCtx, c *call) error {
	e := encoders.Get().(*wire.Encoder)
	defer putEncoder(e)
	e.Reset()
	e.Ctx = ec
	if err := e.Encode(args); err != nil {
		ec.cancelForks()
		return err
	}
	h.note = takeNote(ec.exchange())
	a.send(ctx, ec.dst, h, argFP, e.Parts(), c)
	return nil
}

func decodeResult[R any](a *Agent, src int, body []byte, x *Exchange) (R, error) {
	var r R
	d, err := wire.NewDecoder(body, &decodeCtx{agent: a, src: src, x: x})
	if err == nil {
		if err = d.Decode(&r); err == nil {
			err = d.Finish()
		}
	}
	switch {
	case err == nil:
		return r, nil
	case errors.Is(err, ErrTypeMismatch):
		return r, fmt.Errorf("the reply: %w", err)
	case isRefusal(err):
		return r, fmt.Errorf("%w: %s would not take the reply: %w", ErrRefused, a.self.Name, err)
	}
	return r, fmt.Errorf("%w: the reply: %v", ErrMalformed, err)
}

var encoders = sync.Pool{New: func() any { return new(wire.Encoder) }}

func putEncoder(e *wire.Encoder) {
	e.Ctx = nil
	e.Reset()
	encoders.Put(e)
}

func (a *Agent) workerNames() []string {
	out := make([]string, len(a.workers))
	for i, w := range a.workers {
		out[i] = w.Name
	}
	return out
}

// encodeCtx is the encoder's context: the agent and the worker the
// message goes to (RRefs fork as they are encoded).
type encodeCtx struct {
	agent *Agent
	dst   int
	forks [][2]any  // (rref.RRefID, rref.ForkID) forked into the message
	x     *Exchange // the call's; nil: made on demand
}

// decodeCtx is the decoder's: the agent and the worker the message came
// from.
type decodeCtx struct {
	agent *Agent
	src   int
	x     *Exchange // the call's; nil: made on demand
}

func unsafeBytes(w []uint64, n int) []byte {
	if n == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

// typeName names T in messages.
func typeName[T any]() string { return reflect.TypeFor[T]().String() }
