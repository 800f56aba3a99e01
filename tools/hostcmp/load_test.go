package main

import (
	"syscall"
	"testing"
	"time"
)

// TestStartLoad: the hogs run until stopped, and are gone after.
func TestStartLoad(t *testing.T) {
	pids, stop, err := startLoad(2)
	if err != nil {
		t.Skipf("no sha256sum here: %v", err)
	}
	if len(pids) != 2 {
		t.Fatalf("%d hogs, want 2", len(pids))
	}
	time.Sleep(20 * time.Millisecond)
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err != nil {
			t.Errorf("hog %d not running: %v", pid, err)
		}
	}
	stop()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("hog %d still there after stop", pid)
		}
	}
}
