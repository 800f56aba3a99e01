package transport

import (
	"testing"
	"time"
)

// TestHostBusyHold: a reader that marks the host busy makes the others
// sleep at once for busyHold, and poll again after it.
func TestHostBusyHold(t *testing.T) {
	defer busyUntil.Store(0)
	now := time.Now()
	if hostBusy(now) {
		t.Fatal("busy before anything marked it")
	}
	markBusy(now)
	if !hostBusy(now.Add(busyHold - time.Millisecond)) {
		t.Error("not busy within busyHold of the mark")
	}
	if hostBusy(now.Add(busyHold + time.Millisecond)) {
		t.Error("still busy after busyHold")
	}
}

// TestCPUStarved: a process that did not run for most of a spell (here
// asleep; a CPU hog's turn looks the same) was starved; one that ran
// throughout was not. The second half is skipped when the machine itself
// kept this test off its CPU.
func TestCPUStarved(t *testing.T) {
	since, cpu := time.Now(), processCPU()
	time.Sleep(30 * time.Millisecond)
	if !cpuStarved(since, cpu, time.Now()) {
		t.Errorf("30 ms asleep: CPU %v of 30 ms, not starved", processCPU()-cpu)
	}
	since, cpu = time.Now(), processCPU()
	for time.Since(since) < 30*time.Millisecond {
	}
	now := time.Now()
	if used := processCPU() - cpu; used < now.Sub(since)*4/5 {
		t.Skipf("the machine gave this test %v of CPU in %v: too busy to check the other half", used, now.Sub(since))
	}
	if cpuStarved(since, cpu, now) {
		t.Errorf("30 ms of polling: starved")
	}
}
