package cgobusy

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestWaitReturnsWhenCallsLeave(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if Saturated() {
		t.Fatal("saturated with nobody in C")
	}
	Wait() // nobody in C: returns at once
	Enter()
	if !Saturated() {
		t.Fatal("one goroutine in C with GOMAXPROCS=1 is not saturated")
	}
	done := make(chan struct{})
	go func() { Wait(); close(done) }()
	select {
	case <-done:
		t.Fatal("Wait returned while a goroutine was in C")
	case <-time.After(20 * time.Millisecond):
	}
	Exit()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after Exit")
	}
	if Saturated() {
		t.Fatal("saturated after Exit")
	}
}

func TestNotSaturatedBelowProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	Enter()
	defer Exit()
	if Saturated() {
		t.Fatal("one goroutine in C with GOMAXPROCS=2 counts as saturated")
	}
}

// TestNoLostWakeup races Enter/Exit against Wait many times: every Wait
// returns (a lost wake-up would leave one blocked until the test's limit).
func TestNoLostWakeup(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const rounds = 20000
	var wg sync.WaitGroup
	wg.Add(2)
	stop := make(chan struct{})
	go func() {
		defer wg.Done()
		for range rounds {
			Enter()
			runtime.Gosched()
			Exit()
		}
		close(stop)
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if Saturated() {
				Wait()
			}
			runtime.Gosched()
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a Wait was never woken")
	}
}
