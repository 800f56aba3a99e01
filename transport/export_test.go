package transport

// Crash closes every connection of e without the goodbye frame, as a
// killed process's kernel would.
func (e *Endpoint) Crash() {
	e.mu.Lock()
	e.mu.closed = true
	posted := e.mu.posted
	e.mu.posted = nil
	e.mu.Unlock()
	for _, p := range posted {
		p.finish(-1, ErrClosed)
	}
	for _, l := range e.links {
		if l != nil {
			l.close()
		}
	}
}

// UsesSharedMemory reports whether e sends large payloads to peer through
// a shared-memory segment.
func UsesSharedMemory(e *Endpoint, peer int) bool { return e.SharesMemoryWith(peer) }

// ShmPrefix is how this process's /dev/shm file names begin.
var ShmPrefix = shmPrefix
