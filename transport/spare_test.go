package transport

import (
	"runtime"
	"testing"
	"time"
	"unsafe"
)

// A large message buffer comes back for reuse once nothing points into
// it, and not before.
func TestMessageBufferRecycled(t *testing.T) {
	var s spare
	defer s.close()
	const n = 1<<20 + 3
	b := s.get(n)
	if len(b) != n || cap(b) != n || uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		t.Fatalf("get(%d): len %d cap %d, aligned %v", n, len(b), cap(b), uintptr(unsafe.Pointer(&b[0]))%8 == 0)
	}
	addr := uintptr(unsafe.Pointer(&b[0]))
	tail := b[n-1:] // a view of its last byte keeps all of it
	b = nil
	for range 3 {
		runtime.GC()
		time.Sleep(2 * time.Millisecond)
	}
	if p := fromRecycled(roundUp(n, spareRound)); p != nil {
		t.Fatalf("a buffer was recycled while a slice of it (%p) was alive", &tail[0])
	}
	runtime.KeepAlive(tail)
	tail = nil
	var again []byte
	for i := 0; i < 200 && again == nil; i++ {
		runtime.GC()
		time.Sleep(time.Millisecond)
		again = fromRecycled(roundUp(n, spareRound))
	}
	if again == nil {
		t.Fatal("the buffer never came back after its last user dropped it")
	}
	if got := uintptr(unsafe.Pointer(&again[0])); got != addr {
		t.Fatalf("recycled %#x, want the buffer at %#x", got, addr)
	}
}

// Small and huge messages are allocated on the spot; a closed
// connection keeps no spare.
func TestSpareBounds(t *testing.T) {
	var s spare
	if b := s.get(100); len(b) != 100 {
		t.Fatalf("get(100) gave %d bytes", len(b))
	}
	s.mu.Lock()
	filling := s.filling
	s.mu.Unlock()
	if filling {
		t.Fatal("a small message started a spare")
	}
	s.close()
	b := s.get(spareMin)
	if len(b) != spareMin {
		t.Fatalf("get(%d) gave %d bytes", spareMin, len(b))
	}
	time.Sleep(10 * time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buf != nil || s.filling {
		t.Fatal("a closed connection made a spare")
	}
}

// hugePages advises only the whole 2 MiB pages inside a buffer, whatever
// its size and alignment, and leaves its bytes as they were.
func TestHugePagesKeepsBytes(t *testing.T) {
	for _, n := range []int{0, 1, 4096, 2<<20 - 1, 2<<20 + 1, 5<<20 + 7, 17 << 20} {
		for _, off := range []int{0, 1, 4095} {
			b := alloc8(n + off)[off:]
			for i := range b {
				b[i] = byte(i * 7)
			}
			hugePages(b)
			for i := range b {
				if b[i] != byte(i*7) {
					t.Fatalf("n %d off %d: byte %d changed to %d", n, off, i, b[i])
				}
			}
		}
	}
}
