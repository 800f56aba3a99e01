package rpc

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlineCtx is context.WithDeadline(parent, deadline) that makes its
// timer only when someone asks for Done: most handlers never wait on
// their context, and a timer per call was a tenth of a small call's cost
// on the serving side. Err and Deadline answer without one.
type deadlineCtx struct {
	parent   context.Context
	deadline time.Time
	once     sync.Once
	armed    atomic.Bool
	stopped  atomic.Bool
	inner    context.Context // WithDeadline(parent, deadline), once armed
	cancel   context.CancelFunc
}

// closedChan is the Done of a context stopped before anyone asked.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func withLazyDeadline(parent context.Context, d time.Duration) *deadlineCtx {
	return &deadlineCtx{parent: parent, deadline: time.Now().Add(d)}
}

func (c *deadlineCtx) arm() {
	c.once.Do(func() {
		c.inner, c.cancel = context.WithDeadline(c.parent, c.deadline)
		c.armed.Store(true)
	})
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *deadlineCtx) Done() <-chan struct{} {
	c.arm()
	if c.inner == nil {
		return closedChan // stopped before anyone asked
	}
	return c.inner.Done()
}

func (c *deadlineCtx) Err() error {
	if c.armed.Load() {
		return c.inner.Err()
	}
	if c.stopped.Load() {
		return context.Canceled
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *deadlineCtx) Value(key any) any {
	if c.armed.Load() {
		return c.inner.Value(key)
	}
	return c.parent.Value(key)
}

// stop cancels the context (the call is over) and releases the timer, if
// one was made.
func (c *deadlineCtx) stop() {
	c.stopped.Store(true)
	c.once.Do(func() {}) // no arming after this
	if c.armed.Load() {
		c.cancel()
	}
}
