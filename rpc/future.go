package rpc

import (
	"context"
	"sync"
)

// Future is the result of an asynchronous call, or of any work that
// completes later (torch.futures.Future): a value or an error, set once.
type Future[T any] struct {
	done chan struct{}
	mu   sync.Mutex
	set  bool
	val  T
	err  error
	then []func(T, error)
}

// NewFuture returns a future that is not yet complete; complete it with
// Set. A function registered with RegisterAsync returns one.
func NewFuture[T any]() *Future[T] {
	return &Future[T]{done: make(chan struct{})}
}

// Done returns a future already complete.
func Done[T any](v T, err error) *Future[T] {
	f := NewFuture[T]()
	f.Set(v, err)
	return f
}

// Set completes the future with v or err and runs its callbacks on the
// calling goroutine. Only the first Set counts; it reports whether this
// one did.
func (f *Future[T]) Set(v T, err error) bool {
	f.mu.Lock()
	if f.set {
		f.mu.Unlock()
		return false
	}
	f.set, f.val, f.err = true, v, err
	then := f.then
	f.then = nil
	close(f.done)
	f.mu.Unlock()
	for _, fn := range then {
		fn(v, err)
	}
	return true
}

// Wait blocks until the future completes or ctx ends. When ctx ends
// first it returns ctx's error as it is, and the future stays pending (a
// call's own deadline fails the future of Go with a *CallError; Fn.Call
// and Method.Call wrap ctx's error in one).
func (f *Future[T]) Wait(ctx context.Context) (T, error) {
	select {
	case <-f.done:
		return f.val, f.err
	default:
	}
	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// Done is closed when the future completes.
func (f *Future[T]) Done() <-chan struct{} { return f.done }

// Then runs fn with the result when the future completes: at once, on
// this goroutine, if it has; else on the goroutine that completes it.
// fn must not block.
func (f *Future[T]) Then(fn func(T, error)) {
	f.mu.Lock()
	if !f.set {
		f.then = append(f.then, fn)
		f.mu.Unlock()
		return
	}
	v, err := f.val, f.err
	f.mu.Unlock()
	fn(v, err)
}

// Result returns the value and error and whether the future is complete.
func (f *Future[T]) Result() (T, error, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.val, f.err, f.set
}

// WaitAll waits for every future, returning the first error.
func WaitAll[T any](ctx context.Context, fs []*Future[T]) ([]T, error) {
	out := make([]T, len(fs))
	var first error
	for i, f := range fs {
		v, err := f.Wait(ctx)
		out[i] = v
		if err != nil && first == nil {
			first = err
		}
	}
	return out, first
}
