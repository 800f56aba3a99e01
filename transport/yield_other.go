//go:build !linux

package transport

import "runtime"

// osYield yields to this process's goroutines (the frame ring, which
// wants the host's sched_yield, is Linux's).
func osYield() { runtime.Gosched() }
