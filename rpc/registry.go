package rpc

import (
	"context"
	"fmt"
	"hash/fnv"
	"reflect"
	"sync"

	"github.com/godist/godist/rpc/internal/wire"
)

// Registry holds the functions a worker serves, by name. Only registered
// functions ever run on behalf of a caller: nothing that arrives is
// executed as code.
type Registry struct {
	mu    sync.RWMutex
	funcs map[string]*handler
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{funcs: map[string]*handler{}} }

// Registrar is where functions are registered: a *Registry, or an *Agent
// (its registry).
type Registrar interface{ registry() *Registry }

func (r *Registry) registry() *Registry { return r }

// handler is a registered function with its types erased.
type handler struct {
	name         string
	argFP, resFP uint64
	// recv is the type of the object a method is called on (nil for a
	// function).
	recv reflect.Type
	// run decodes the arguments and calls the function; done receives the
	// result exactly once (at once for a plain function, later for one
	// registered with RegisterAsync).
	run func(ctx context.Context, self any, d *wire.Decoder, done func(res any, err error))
}

func (r *Registry) add(h *handler) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.funcs == nil {
		r.funcs = map[string]*handler{}
	}
	if _, ok := r.funcs[h.name]; ok {
		return fmt.Errorf("rpc: %q is already registered", h.name)
	}
	r.funcs[h.name] = h
	return nil
}

func (r *Registry) lookup(name string) *handler {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.funcs[name]
}

// fingerprints returns the wire fingerprints of A and R. A must be able
// to travel; R need not (a function called only with Remote may return a
// value that stays on its owner, an environment or a model, say), and is
// then fingerprinted by its name.
func fingerprints[A, R any](name string) (uint64, uint64, error) {
	af, err := wire.Fingerprint(reflect.TypeFor[A]())
	if err != nil {
		return 0, 0, fmt.Errorf("rpc: %s's argument type: %w", name, err)
	}
	return af, typeFP(reflect.TypeFor[R]()), nil
}

// typeFP is t's wire fingerprint, or for a type that cannot travel one of
// its name.
func typeFP(t reflect.Type) uint64 {
	if fp, err := wire.Fingerprint(t); err == nil {
		return fp
	}
	h := fnv.New64a()
	h.Write([]byte("opaque " + t.PkgPath() + "." + t.String()))
	return h.Sum64()
}

func decodeArgs[A any](d *wire.Decoder) (A, error) {
	var a A
	if err := d.Decode(&a); err != nil {
		return a, err
	}
	return a, d.Finish()
}

// Register registers fn under name and returns the typed handle that
// calls it. A and R are data: numbers, strings, slices, maps, structs of
// those, *tensor.Tensor and *RRef values (see package wire); they are
// checked here, so that a type that cannot travel fails at registration,
// not at the first call.
func Register[A, R any](r Registrar, name string, fn func(ctx context.Context, args A) (R, error)) (Fn[A, R], error) {
	handle, err := register[any, A, R](r, name, false, func(ctx context.Context, _ any, a A, done func(any, error)) {
		res, err := fn(ctx, a)
		done(res, err)
	})
	return Fn[A, R]{handle}, err
}

// RegisterAsync registers a function that returns a future instead of a
// value (PyTorch's @rpc.functions.async_execution): the reply goes out
// when the future completes, and no goroutine waits for it meanwhile.
// This is what batching needs: the function parks the request's future
// and returns; whoever completes the batch sets every future.
func RegisterAsync[A, R any](r Registrar, name string, fn func(ctx context.Context, args A) *Future[R]) (Fn[A, R], error) {
	handle, err := register[any, A, R](r, name, false, func(ctx context.Context, _ any, a A, done func(any, error)) {
		settle(name, fn(ctx, a), done)
	})
	return Fn[A, R]{handle}, err
}

// RegisterMethod registers a method of the objects of type T that RRefs
// refer to: the owner runs fn on the referenced value (PyTorch's
// rref.rpc_sync().method(...)). Call it with Method.Call and friends.
func RegisterMethod[T, A, R any](r Registrar, name string, fn func(ctx context.Context, self T, args A) (R, error)) (Method[T, A, R], error) {
	handle, err := register[T, A, R](r, name, true, func(ctx context.Context, self T, a A, done func(any, error)) {
		res, err := fn(ctx, self, a)
		done(res, err)
	})
	return Method[T, A, R]{handle}, err
}

// RegisterMethodAsync is RegisterMethod for a method that returns a
// future (see RegisterAsync).
func RegisterMethodAsync[T, A, R any](r Registrar, name string, fn func(ctx context.Context, self T, args A) *Future[R]) (Method[T, A, R], error) {
	handle, err := register[T, A, R](r, name, true, func(ctx context.Context, self T, a A, done func(any, error)) {
		settle(name, fn(ctx, self, a), done)
	})
	return Method[T, A, R]{handle}, err
}

// register adds to r the handler of name: a method of the values of type
// T that RRefs refer to, or (method false) a function, whose T is unused.
// The handler checks a method's value, decodes the arguments and passes
// both to call, which completes done. It returns the name the typed
// handle carries: "" when A cannot travel (a zero handle), name otherwise,
// even when r already has a function of that name.
func register[T, A, R any](r Registrar, name string, method bool, call func(ctx context.Context, self T, args A, done func(any, error))) (string, error) {
	af, rf, err := fingerprints[A, R](name)
	if err != nil {
		return "", err
	}
	var recv reflect.Type
	if method {
		recv = reflect.TypeFor[T]()
	}
	h := &handler{name: name, argFP: af, resFP: rf, recv: recv,
		run: func(ctx context.Context, self any, d *wire.Decoder, done func(any, error)) {
			var obj T
			if method {
				var ok bool
				if obj, ok = self.(T); !ok {
					done(nil, fmt.Errorf("rpc: method %s wants a %v, the RRef holds a %T", name, recv, self))
					return
				}
			}
			a, err := decodeArgs[A](d)
			if err != nil {
				done(nil, decodeError(err))
				return
			}
			call(ctx, obj, a, done)
		}}
	return name, r.registry().add(h)
}

// settle completes done with the result of f, the future a function
// registered with RegisterAsync or RegisterMethodAsync returned.
func settle[R any](name string, f *Future[R], done func(any, error)) {
	if f == nil {
		done(nil, fmt.Errorf("rpc: %s returned a nil future", name))
		return
	}
	f.Then(func(v R, err error) { done(v, err) })
}

// decodeErr marks an argument that did not decode.
type decodeErr struct{ err error }

func (e decodeErr) Error() string { return e.err.Error() }

func decodeError(err error) error { return decodeErr{err} }
