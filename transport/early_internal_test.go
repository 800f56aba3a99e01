package transport

import (
	"testing"
	"unsafe"
)

// TestEarlyBuffers: an early frame's buffer has the frame's length and a
// class's capacity from earlyMin up, is 8-byte aligned, comes back from
// the pool for the next frame of its class, and buffers outside the
// classes are neither reused nor handed out twice.
func TestEarlyBuffers(t *testing.T) {
	for _, n := range []int{0, 1, earlyMin - 1, earlyMin, earlyMin + 1, 3 << 20, earlyMax, earlyMax + 1} {
		b := earlyBuf(n)
		if len(b) != n {
			t.Fatalf("earlyBuf(%d): %d bytes", n, len(b))
		}
		pooled := n >= earlyMin && n <= earlyMax
		if c := cap(b); pooled && (c&(c-1) != 0 || c < n || c >= 2*n) {
			t.Errorf("earlyBuf(%d): capacity %d, want the power of two that holds it", n, c)
		}
		if n > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
			t.Errorf("earlyBuf(%d) is not 8-byte aligned", n)
		}
	}
	b := earlyBuf(600 << 10)
	b[0] = 42
	putEarly(b)
	again := earlyBuf(700 << 10) // the same class: 1 MiB
	if cap(again) != 1<<20 {
		t.Fatalf("capacity %d, want 1 MiB", cap(again))
	}
	// The recycled buffers are dropped after two collections; when it was
	// kept, the buffer is the one put.
	if &again[0] == &b[0] && again[0] != 42 {
		t.Errorf("the pooled buffer changed")
	}
	putEarly(make([]byte, 100<<10)) // not a class's capacity: dropped
	if c := earlyBuf(100 << 10); cap(c) != 128<<10 {
		t.Errorf("a buffer of 100 KiB capacity was pooled (got capacity %d)", cap(c))
	}
}
