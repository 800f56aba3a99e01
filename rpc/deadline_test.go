package rpc

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The lazy deadline behaves as context.WithDeadline: its Deadline, Err
// before and after the deadline, Done closing at the deadline once asked
// for, values and cancellation from the parent, and Done and Err after
// stop (the call is over), whether or not anyone asked before.
func TestLazyDeadline(t *testing.T) {
	type key struct{}
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	defer cancelParent()

	// Long enough that a stall of the machine cannot pass it before the
	// fresh checks below.
	c := withLazyDeadline(parent, 300*time.Millisecond)
	if d, ok := c.Deadline(); !ok || time.Until(d) > 300*time.Millisecond {
		t.Fatalf("Deadline() = %v, %v", d, ok)
	}
	if c.Err() != nil || c.Value(key{}) != "v" {
		t.Fatalf("fresh: Err %v, Value %v", c.Err(), c.Value(key{}))
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close at the deadline")
	}
	if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
		t.Fatalf("after the deadline: Err %v, Cause %v", c.Err(), context.Cause(c))
	}
	c.stop()

	unasked := withLazyDeadline(parent, time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	if !errors.Is(unasked.Err(), context.DeadlineExceeded) {
		t.Fatalf("past the deadline, never armed: Err %v", unasked.Err())
	}
	unasked.stop()

	stopped := withLazyDeadline(parent, time.Hour)
	stopped.stop()
	select {
	case <-stopped.Done():
	default:
		t.Fatal("Done of a stopped context is open")
	}
	if !errors.Is(stopped.Err(), context.Canceled) {
		t.Fatalf("stopped: Err %v", stopped.Err())
	}

	child := withLazyDeadline(parent, time.Hour)
	done := child.Done()
	cancelParent()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the parent's cancellation did not reach Done")
	}
	if !errors.Is(child.Err(), context.Canceled) {
		t.Fatalf("parent cancelled: Err %v", child.Err())
	}
	child.stop()
}
