// Package futex waits on and wakes a 32-bit word of memory shared between
// processes (a mapped file, such as a shared-memory segment), with Linux's
// futex(2). Elsewhere Wait sleeps briefly instead.
package futex

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// futex(2) operations (linux/futex.h); x/sys/unix does not name them.
const (
	futexWait = 0
	futexWake = 1
)

// Wait sleeps while *addr == val, until Wake, a timeout or a spurious
// wakeup: callers re-check the word in a loop. It blocks the calling
// thread, and its P with it until the runtime's monitor hands the P to
// another thread (20 µs to 10 ms later). Its time counts in Slept.
func Wait(addr *atomic.Uint32, val uint32, timeout time.Duration) {
	ts := unix.NsecToTimespec(int64(timeout))
	t := time.Now()
	// FUTEX_WAIT without FUTEX_PRIVATE_FLAG: the word may be shared with
	// other processes. Errors (EAGAIN: the word changed; EINTR; ETIMEDOUT)
	// all mean "look again".
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
	slept.Add(int64(time.Since(t)))
}

// slept is the time this process's threads have spent in Wait.
var slept atomic.Int64

// Slept returns the time this process's threads have spent in Wait, all
// together. A process whose CPU time falls behind the clock was kept off
// its CPUs only for the part of the gap that its own waits do not
// explain.
func Slept() time.Duration { return time.Duration(slept.Load()) }

// Wake wakes up to n threads waiting on addr, in any process.
func Wake(addr *atomic.Uint32, n int) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(n), 0, 0, 0)
}
