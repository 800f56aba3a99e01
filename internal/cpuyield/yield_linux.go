package cpuyield

import "syscall"

// Yield calls sched_yield as a raw system call, which the Go runtime does
// not see.
//
// Why raw: while this thread is off the CPU in sched_yield, another rank
// on the CPU runs, for tens to hundreds of µs. Made through
// syscall.Syscall, the runtime counts that time as a system call, and its
// monitor (sysmon) hands the P of a thread that stays in one past two of
// its 20 µs ticks to another thread; the rank's goroutines then hop
// between threads (a futex wake and a context switch each), and the
// monitor, finding work, keeps ticking every 20 µs. It settles either way
// for a whole run: two ranks on one CPU over TCP took 41-57 µs or 99-101
// for an 8 B all-reduce, 139-147 or 333-336 for 256 KiB, from run to run
// of one binary; through RawSyscall 41-42 and 136-174 in every run. A raw
// call holds the P, which is what a rank that gives its CPU away wants;
// a stop of the world waits for the yield to return.
func Yield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
