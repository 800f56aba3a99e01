package samehost

import "syscall"

// osYield gives this thread's CPU to any other runnable thread of the
// host (sched_yield).
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
