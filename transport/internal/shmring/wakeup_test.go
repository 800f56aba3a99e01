package shmring

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestParkRacesPush races Park against a TryPush onto an empty ring, on
// two threads, round after round. In every round at least one side must
// see the other: Park returns false, or TryPush reports wake. Both
// missing leaves a consumer asleep beside a frame with no wakeup coming,
// and for good if that frame fills the ring (the producer then only
// meets ErrFull and never looks at parked again).
//
// The memory comes from mmap, outside the Go heap, as a transport ring's
// does: there the race detector's sync/atomic Store is a plain store that
// a later load may overtake (see Ordering in the package doc). The CPU's
// reordering cannot be forced, so this is a litmus test: each side waits
// a different, varying number of steps before its operation so that the
// two windows often overlap (the consumer's longer, as the producer only
// starts once it sees turn). With Store in Park and TryPush it failed
// every run under -race, with 100 to 1,700 of the 200,000 rounds lost.
func TestParkRacesPush(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 || runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs for the two sides to race")
	}
	mem, err := syscall.Mmap(-1, 0, Size(MinCapacity), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANON)
	if err != nil {
		t.Fatalf("mapping %d bytes of shared memory: %v", Size(MinCapacity), err)
	}
	cons, err := Init(mem)
	if err != nil {
		t.Fatal(err)
	}
	prod, err := Attach(mem)
	if err != nil {
		t.Fatal(err)
	}
	rounds := int64(200_000)
	if testing.Short() {
		rounds = 50_000
	}
	// On a loaded machine the two threads rarely run at once and each
	// round costs time slices; the budget keeps the test short there,
	// where it also finds little.
	budget := 5 * time.Second
	start := time.Now()

	var (
		turn   atomic.Int64 // the round the consumer has started
		pushed atomic.Int64 // the round the producer has finished
		stop   atomic.Bool
		wake   bool  // the producer's, for round pushed
		perr   error // the producer's, for round pushed
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		frame := []byte("8 bytes!")
		for i := int64(1); i <= rounds; i++ {
			for turn.Load() < i {
				if stop.Load() {
					return
				}
			}
			delay(int(i * 7919 % 199))
			wake, perr = prod.TryPush(frame)
			pushed.Store(i)
		}
	}()
	// The producer touches the mapping until done: unmap only after.
	defer func() {
		stop.Store(true)
		<-done
		syscall.Munmap(mem)
	}()

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lost, first := 0, int64(0)
	i := int64(1)
	for ; i <= rounds; i++ {
		if i%1024 == 0 && time.Since(start) > budget {
			break
		}
		turn.Store(i)
		delay(int(i * 104729 % 1499))
		parked := cons.Park()
		for pushed.Load() < i {
		}
		if perr != nil {
			t.Fatalf("round %d: TryPush: %v", i, perr)
		}
		if parked && !wake {
			if lost++; lost == 1 {
				first = i
			}
		}
		cons.Unpark()
		if ok, err := cons.TryPop(func([]byte) {}); !ok || err != nil {
			t.Fatalf("round %d: TryPop after the push: %v, %v", i, ok, err)
		}
	}
	t.Logf("%d rounds in %v", i-1, time.Since(start).Round(time.Millisecond))
	if lost > 0 {
		t.Fatalf("in %d of %d rounds (first %d) Park slept and TryPush reported no wake: a lost wakeup", lost, i-1, first)
	}
}

// delay spins for about n steps; the result keeps the loop from being
// optimized away.
//
//go:noinline
func delay(n int) int {
	s := 0
	for i := range n {
		s += i
	}
	return s
}
