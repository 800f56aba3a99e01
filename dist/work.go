package dist

import "context"

// Work is the handle of an asynchronous call. It is done when the call
// has completed on this rank, with or without an error.
type Work struct {
	done chan struct{}
	err  error
	src  int // the sender, for a receive
}

func goWork(fn func() error) *Work {
	w := &Work{done: make(chan struct{}), src: -1}
	go func() {
		w.err = fn()
		close(w.done)
	}()
	return w
}

func doneWork(err error) *Work {
	w := &Work{done: make(chan struct{}), err: err, src: -1}
	close(w.done)
	return w
}

// Source returns the group rank a completed receive got its message from
// (-1 for other calls, or before completion).
func (w *Work) Source() int {
	select {
	case <-w.done:
		return w.src
	default:
		return -1
	}
}

// Wait blocks until the call completes and returns its error, or returns
// ctx's error if ctx ends first (the call goes on).
func (w *Work) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the call completes.
func (w *Work) Done() <-chan struct{} { return w.done }

// Err returns the call's error once Done is closed (nil before).
func (w *Work) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

// Then returns a Work that completes when w has, after running fn on
// success (a communication hook decompressing its result, say). fn runs at
// most once, on the goroutine that first observes w's completion.
func (w *Work) Then(fn func() error) *Work {
	return goWork(func() error {
		<-w.done
		if w.err != nil {
			return w.err
		}
		return fn()
	})
}

// Go runs fn on a new goroutine and returns its Work: for code that
// composes several calls into one asynchronous step (a communication
// hook). The calls fn issues are numbered when fn issues them, so fn must
// issue them in the same order on every member.
func Go(fn func() error) *Work { return goWork(fn) }
