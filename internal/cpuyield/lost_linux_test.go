package cpuyield

import (
	"runtime"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestYieldLost: a yield to a thread that spins on the same CPU comes back
// only after the scheduler's slice, and YieldLost says so; it tries at
// most a few hundred yields, each bounded by that slice.
func TestYieldLost(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Skipf("affinity: %v", err)
	}
	cpu := -1
	for c := range 1024 {
		if set.IsSet(c) {
			cpu = c
			break
		}
	}
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Skipf("affinity: %v", err)
	}
	defer unix.SchedSetaffinity(0, &set)
	var stop atomic.Bool
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ready <- unix.SchedSetaffinity(0, &one)
		for !stop.Load() {
		}
	}()
	defer stop.Store(true)
	if err := <-ready; err != nil {
		t.Skipf("affinity: %v", err)
	}
	for range 300 {
		if YieldLost() {
			return
		}
	}
	t.Errorf("300 yields to a thread spinning on CPU %d all came back within %v", cpu, LostYield)
}
