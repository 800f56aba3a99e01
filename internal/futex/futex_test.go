package futex

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitWake(t *testing.T) {
	var w atomic.Uint32
	w.Store(1)
	done := make(chan time.Duration)
	go func() {
		start := time.Now()
		for w.Load() == 1 {
			Wait(&w, 1, 5*time.Second)
		}
		done <- time.Since(start)
	}()
	time.Sleep(20 * time.Millisecond)
	w.Store(0)
	Wake(&w, 1)
	select {
	case d := <-done:
		if d > 2*time.Second {
			t.Fatalf("woke after %v: Wake did not wake the waiter", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never woke")
	}
}

func TestWaitReturnsWhenValueDiffers(t *testing.T) {
	var w atomic.Uint32
	start := time.Now()
	Wait(&w, 7, 5*time.Second) // *w is 0, not 7: returns at once
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Wait on a word that differs took %v", d)
	}
}

func TestWaitTimesOut(t *testing.T) {
	var w atomic.Uint32
	w.Store(1)
	start := time.Now()
	Wait(&w, 1, 10*time.Millisecond)
	if d := time.Since(start); d < 5*time.Millisecond || d > 2*time.Second {
		t.Fatalf("Wait with a 10ms timeout took %v", d)
	}
}

// TestSlept: Slept counts the time a Wait slept.
func TestSlept(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Wait sleeps through the runtime elsewhere")
	}
	var w atomic.Uint32
	w.Store(1)
	before := Slept()
	start := time.Now()
	Wait(&w, 1, 20*time.Millisecond)
	took := time.Since(start)
	if got := Slept() - before; got < took*9/10 || got > took {
		t.Fatalf("a Wait of %v counted %v", took, got)
	}
}
