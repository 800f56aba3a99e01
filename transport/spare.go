package transport

import (
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A received message is handed over in a buffer its handler keeps (rpc
// decodes tensors in place), so every message needs a buffer nobody else
// holds. A large fresh buffer is costly: the runtime zeroes it or the
// kernel faults it in page by page (measured here, 74 µs to allocate and
// touch 1 MiB against 45 µs to copy it; 4.2 ms for 16 MiB against 1.2
// ms), and it brings the next collection closer. So large message buffers
// come, in this order:
//
//   - from the recycled ones: a buffer given out here carries a finalizer,
//     which runs once the collector has proved that nothing points into it
//     any more (a slice or a tensor viewing any part of it keeps all of it
//     alive), and puts it back for reuse instead of freeing it; what
//     nobody takes within two collections is freed;
//   - from the connection's spare: a fresh buffer of the size of the last
//     message, allocated and faulted in by a goroutine of its own while the
//     reader waited, so those costs are off the message's path;
//   - from the allocator.
//
// Reused or spare, a buffer is handed out once, and its bytes are
// overwritten by the message before anyone sees them.
const (
	spareMin   = 256 << 10 // smaller messages allocate on the spot: cheap
	spareMax   = 64 << 20  // larger ones too: rare, and not worth holding
	spareRound = 64 << 10  // buffers are sized up to this, so that requests and replies of one size share them
	pageSize   = 4 << 10
)

// recycled holds message buffers whose users are gone, by size. Like a
// sync.Pool, it lets a buffer go when two collections pass without
// anyone taking it, so a process that stops receiving large messages
// keeps none (and the heap the collector paces itself on does not grow
// with buffers nobody uses); unlike one, it hands a buffer to whichever
// P asks (the finalizer that puts a buffer back runs on one P and the
// reader that takes it on another, and a Pool keeps an item in its
// putter's private slot, out of the other's reach).
var recycled struct {
	sync.Mutex
	free map[int][]recycledBuf
	gen  uint64 // collections seen (gcTick)
}

type recycledBuf struct {
	w   *uint64 // the buffer's first word
	gen uint64  // recycled.gen when it was put back
}

// fromRecycled returns a recycled buffer of size bytes, or nil.
func fromRecycled(size int) []byte {
	recycled.Lock()
	defer recycled.Unlock()
	l := recycled.free[size]
	if len(l) == 0 {
		return nil
	}
	b := l[len(l)-1]
	l[len(l)-1] = recycledBuf{}
	recycled.free[size] = l[:len(l)-1]
	return unsafe.Slice((*byte)(unsafe.Pointer(b.w)), size)
}

// track makes b (a whole allocation of alloc8, spareRound-sized) come back
// to recycled when it becomes unreachable.
func track(b []byte) {
	size := len(b)
	runtime.SetFinalizer((*uint64)(unsafe.Pointer(&b[0])), func(w *uint64) { putRecycled(w, size) })
}

// putRecycled puts the buffer of size bytes whose first word is w back
// among the recycled ones: from its finalizer (track), or at once by
// code that knows nothing holds it any more (putEarly).
func putRecycled(w *uint64, size int) {
	recycled.Lock()
	defer recycled.Unlock()
	if recycled.free == nil {
		recycled.free = map[int][]recycledBuf{}
	}
	recycled.free[size] = append(recycled.free[size], recycledBuf{w, recycled.gen})
}

// gcSentinel's finalizer runs once per collection (gcTick makes a new one
// each time): it drops the buffers put back before the previous one.
type gcSentinel struct{ _ [16]byte }

func gcTick() {
	runtime.SetFinalizer(new(gcSentinel), func(*gcSentinel) {
		recycled.Lock()
		recycled.gen++
		for size, l := range recycled.free {
			k := 0
			for k < len(l) && l[k].gen+2 <= recycled.gen {
				k++
			}
			clear(l[:k])
			if l = l[k:]; len(l) == 0 {
				delete(recycled.free, size)
			} else {
				recycled.free[size] = l
			}
		}
		recycled.Unlock()
		gcTick()
	})
}

func init() { gcTick() }

// spare is one connection's spare message buffer. The connection's reader
// takes it; a goroutine refills it.
type spare struct {
	mu      sync.Mutex
	buf     []byte // ready, or nil
	filling bool
	closed  bool // the connection ended: keep nothing
}

// get returns n bytes, 8-byte aligned, for the caller to overwrite.
func (s *spare) get(n int) []byte {
	if n < spareMin {
		return alloc8(n)
	}
	if n > spareMax {
		b := alloc8(n)
		hugePages(b)
		return b
	}
	size := roundUp(n, spareRound)
	b := fromRecycled(size)
	if b == nil {
		b = s.take(size)
	}
	if b == nil {
		b = alloc8(size)
		hugePages(b)
	}
	track(b)
	return b[:n:n]
}

// take returns the spare if it has size bytes (else nil), and starts
// making the next one.
func (s *spare) take(size int) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buf
	s.buf = nil // used now, or of another size: its replacement comes
	if !s.filling && !s.closed {
		s.filling = true
		go s.fill(size)
	}
	if len(b) != size {
		return nil
	}
	return b
}

// fill makes a spare of size bytes and touches every page of it.
func (s *spare) fill(size int) {
	b := alloc8(size)
	hugePages(b)
	for i := 0; i < len(b); i += pageSize {
		b[i] = 0
	}
	s.mu.Lock()
	if !s.closed {
		s.buf = b
	}
	s.filling = false
	s.mu.Unlock()
}

// close drops the spare; later gets allocate on the spot.
func (s *spare) close() {
	s.mu.Lock()
	s.buf, s.closed = nil, true
	s.mu.Unlock()
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// hugePages asks the kernel to back b's whole 2 MiB pages with huge pages
// (transparent huge pages in madvise mode): a 16 MiB buffer then faults
// in 8 times instead of 4,096, in a third of the time, and copies into it
// miss the TLB less.
func hugePages(b []byte) {
	const huge = 2 << 20
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (p + huge - 1) &^ (huge - 1)
	hi := (p + uintptr(len(b))) &^ (huge - 1)
	if hi > lo {
		unix.Madvise(b[lo-p:hi-p], unix.MADV_HUGEPAGE)
	}
}

// alloc8 returns n bytes whose start is 8-byte aligned, so that the
// elements of tensors inside them can be used in place.
func alloc8(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}
