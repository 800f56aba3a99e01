package transport

import (
	"time"

	"github.com/godist/godist/internal/cpuyield"
)

// Crash closes every connection of e without the goodbye frame, as a
// killed process's kernel would.
func (e *Endpoint) Crash() {
	e.stopWatching()
	if e.od != nil {
		e.od.close(false) // the listener goes with the process
	}
	e.mu.Lock()
	e.mu.closed = true
	posted := e.mu.posted
	for _, p := range posted {
		e.wantLocked(p.peer, -1)
	}
	e.mu.posted = nil
	e.mu.Unlock()
	for _, p := range posted {
		p.finish(-1, ErrClosed)
	}
	e.peers.each(func(_ int, p *peer) {
		if l := p.linkOf(); l != nil {
			l.close()
		}
	})
}

// UsesSharedMemory reports whether e sends large payloads to peer through
// a shared-memory segment.
func UsesSharedMemory(e *Endpoint, peer int) bool { return e.SharesMemoryWith(peer) }

// ShmPrefix is how this process's /dev/shm file names begin.
var ShmPrefix = shmPrefix

// ParkedReaders reports how many of e's yielding readers are parked on
// their sockets (wake.go); -1 when its readers do not yield.
func ParkedReaders(e *Endpoint) int {
	if e.wakers == nil {
		return -1
	}
	n := 0
	for i := range e.wakers {
		if w := e.wakers[i].Load(); w != nil && w.state.Load() == readerParked {
			n++
		}
	}
	return n
}

// ReaderParked reports whether e's yielding reader of peer r is parked on
// its socket.
func ReaderParked(e *Endpoint, r int) bool {
	w := e.wakers[r].Load()
	return w != nil && w.state.Load() == readerParked
}

// HoldReaders holds the process's polling readers asleep (as after two
// lost yields to a CPU hog, cpuyield.Hold) until the returned function
// has ended the hold.
func HoldReaders() (release func()) {
	lose := func() {
		readersHold.Lost(time.Now())
		readersHold.Lost(time.Now())
	}
	lose()
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				lose()
			}
		}
	}()
	return func() {
		close(done)
		time.Sleep(cpuyield.HoldFor) // the last hold ends
	}
}

// ReaderWakes is how many times a posted receive woke e's parked reader
// of rank r.
func ReaderWakes(e *Endpoint, r int) uint32 {
	if w := e.wakers[r].Load(); w != nil {
		return w.wakes.Load()
	}
	return 0
}

// StopHeartbeats ends e's heartbeats and watchdog, as if its process
// stopped sending (SIGSTOP) while its connections stay open.
func StopHeartbeats(e *Endpoint) { e.stopWatching() }

// HoldConnect makes e's next dials wait, before the pair is looked up,
// until hold(r) returns (for a test of the race between a dial and an
// accepted connection).
func HoldConnect(e *Endpoint, hold func(r int)) { e.od.testHookConnect = hold }

// PairsUnderWay reports how many connections e is making.
func PairsUnderWay(e *Endpoint) int {
	e.od.mu.Lock()
	defer e.od.mu.Unlock()
	return len(e.od.pairs)
}

// SetCrowdedHost sets the most ranks a host may hold for its pairs to set
// up shared memory on demand (crowdedHost), until the returned function
// puts it back.
func SetCrowdedHost(n int) (restore func()) {
	old := crowdedHost
	crowdedHost = func() int { return n }
	return func() { crowdedHost = old }
}
