//go:build !linux

package futex

import (
	"sync/atomic"
	"time"
)

// Wait sleeps while *addr == val, for at most timeout (here: polls).
func Wait(addr *atomic.Uint32, val uint32, timeout time.Duration) {
	if addr.Load() == val {
		time.Sleep(min(timeout, 50*time.Microsecond))
	}
}

// Slept is zero here: Wait gives the runtime its P as it sleeps.
func Slept() time.Duration { return 0 }

// Wake does nothing here: waiters poll.
func Wake(addr *atomic.Uint32, n int) {}
