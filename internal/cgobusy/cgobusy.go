// Package cgobusy counts the goroutines that are running long, CPU-bound C
// code (the OpenBLAS kernels), so that Go code that polls can step aside
// while the process's whole CPU share is in C.
//
// Why: a goroutine in a cgo call keeps its OS thread but, after about 20
// µs, the runtime hands its P to another thread so other goroutines can
// run. With GOMAXPROCS=1, as `godist run` gives a rank per CPU, a polling
// goroutine (transport's socket readers poll for their next frame) then
// runs on a second thread beside the kernel, on the one CPU the rank has,
// and the kernel loses that time. Such pollers call Wait while Saturated
// reports true, and the goroutine that leaves C last wakes them.
package cgobusy

import (
	"runtime"
	"sync"
	"sync/atomic"
)

var (
	inC     atomic.Int32 // goroutines between Enter and Exit
	waiting atomic.Bool  // a goroutine is (or is about to be) in Wait
	mu      sync.Mutex
	idle    = make(chan struct{}) // closed when inC next falls below procs
	procs   atomic.Int32          // GOMAXPROCS when last read
)

// Enter marks the calling goroutine as about to run CPU-bound C code.
func Enter() { inC.Add(1) }

// Exit marks the end of the C code Enter announced.
func Exit() {
	if inC.Add(-1) < procs.Load() && waiting.Load() {
		mu.Lock()
		if waiting.Load() {
			waiting.Store(false)
			close(idle)
			idle = make(chan struct{})
		}
		mu.Unlock()
	}
}

// Saturated reports whether as many goroutines are in C as the process
// has Ps, so that any Go code run now competes with them for CPU.
func Saturated() bool {
	n := inC.Load()
	if n == 0 {
		return false
	}
	return n >= readProcs()
}

func readProcs() int32 {
	p := int32(runtime.GOMAXPROCS(0))
	procs.Store(p)
	return p
}

// Wait blocks until fewer goroutines are in C than the process has Ps. It
// returns at once when that is already so.
func Wait() {
	mu.Lock()
	ch := idle
	// Announce the wait before looking at the count: Exit decrements
	// first and looks at waiting second, so one of the two sees the other.
	waiting.Store(true)
	if inC.Load() < readProcs() {
		mu.Unlock()
		return
	}
	mu.Unlock()
	<-ch
}
