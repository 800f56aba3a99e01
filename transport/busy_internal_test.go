package transport

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/godist/godist/internal/cpuyield"
	"github.com/godist/godist/internal/futex"
)

// TestHostBusyHold: one starved spell does not mark the host busy, nor
// one more within confirmGap of it (a job starting up); a second one
// from confirmGap to confirmWithin after the first does, and the readers
// then sleep at once for busyHold and poll again after it; within
// confirmWithin of the hold's end one starved spell marks it busy again;
// a spell long after the last starts over.
func TestHostBusyHold(t *testing.T) {
	reset := func() { busyUntil.Store(0); starvedSince.Store(0) }
	reset()
	defer reset()
	now := time.Now()
	if hostBusy(now) {
		t.Fatal("busy before anything marked it")
	}
	markBusy(now)
	markBusy(now.Add(confirmGap / 2))
	if hostBusy(now.Add(confirmGap / 2)) {
		t.Fatal("busy after one starved spell (and another within confirmGap)")
	}
	second := now.Add(confirmGap)
	markBusy(second)
	if !hostBusy(second.Add(busyHold - time.Millisecond)) {
		t.Error("not busy within busyHold of the confirming spell")
	}
	if hostBusy(second.Add(busyHold + time.Millisecond)) {
		t.Error("still busy after busyHold")
	}
	again := second.Add(busyHold + confirmWithin/2)
	markBusy(again)
	if !hostBusy(again.Add(time.Millisecond)) {
		t.Error("one starved spell soon after a hold did not mark the host busy again")
	}
	late := again.Add(busyHold + 2*confirmWithin)
	markBusy(late)
	if hostBusy(late.Add(time.Millisecond)) {
		t.Error("one starved spell long after the last hold marked the host busy")
	}
	markBusy(late.Add(2 * confirmWithin))
	if hostBusy(late.Add(2*confirmWithin + time.Millisecond)) {
		t.Error("two starved spells more than confirmWithin apart marked the host busy")
	}
}

// TestCPUStarved: a process that did not run for most of a spell (here
// asleep; a CPU hog's turn looks the same) was starved; one that ran
// throughout, or slept in a futex wait of its own, was not. The second half is skipped when the machine itself
// kept this test off its CPU.
func TestCPUStarved(t *testing.T) {
	since, cpu := time.Now(), processCPU()
	time.Sleep(30 * time.Millisecond)
	if !cpuStarved(since, cpu, time.Now()) {
		t.Errorf("30 ms asleep: CPU %v of 30 ms, not starved", processCPU()-cpu)
	}
	// Asleep in a futex wait of its own (a sender waiting for a
	// shared-memory slot holds its P so): not starved.
	since, cpu = time.Now(), processCPU()
	var word atomic.Uint32
	word.Store(1)
	for time.Since(since) < 30*time.Millisecond {
		futex.Wait(&word, 1, 30*time.Millisecond)
	}
	if cpuStarved(since, cpu, time.Now()) {
		t.Errorf("30 ms in a futex wait: starved")
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

// TestHostBusyHeld: the readers also sleep at once while yielding
// readers hold them (readersHold), as long as the hold lasts. The hold
// is the test's own: the process's (readersHold) may hold a real time's
// hold from an earlier test, which go test -count 3 made this one see.
func TestHostBusyHeld(t *testing.T) {
	busyUntil.Store(0)
	var h cpuyield.Hold
	then := time.Now().Add(-time.Hour)
	h.Lost(then)
	h.Lost(then.Add(time.Millisecond))
	if !busyWith(then.Add(2*time.Millisecond), &h) {
		t.Error("not busy while yielding readers hold them")
	}
	if busyWith(then.Add(time.Millisecond+cpuyield.HoldFor+time.Millisecond), &h) {
		t.Error("still busy after the hold")
	}
}
