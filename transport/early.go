package transport

import (
	"math/bits"
	"unsafe"
)

// A frame that arrives before the receive that takes it is read into a
// buffer of its own and copied into the receive's when one is posted
// (deliver, Post). Collectives post their receives round by round, so on
// ranks that share a CPU most large frames come early: a peer runs its
// round while this rank is off the CPU. Buffers of earlyMin bytes and up
// (power-of-two sizes) come from the recycled message buffers (spare.go)
// and go back to them as soon as the frame is copied out, without waiting
// for a collection: two ranks on one CPU exchanging 1 MiB over TCP
// allocated and cleared 512 KiB a frame, and the allocations and the
// collector's marking they drove took a quarter of the CPU.

// earlyMin is the smallest early buffer reused; earlyMax the largest.
const (
	earlyMin = 64 << 10
	earlyMax = spareMax
)

// earlyBuf returns n bytes, 8-byte aligned, for a frame that came early.
func earlyBuf(n int) []byte {
	if n < earlyMin || n > earlyMax {
		return alloc8(n)
	}
	size := 1 << bits.Len(uint(n-1))
	if b := fromRecycled(size); b != nil {
		return b[:n]
	}
	return alloc8(size)[:n]
}

// putEarly gives back a buffer of earlyBuf once its frame is copied out.
func putEarly(b []byte) {
	c := cap(b)
	if c < earlyMin || c > earlyMax || c&(c-1) != 0 {
		return
	}
	putRecycled((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), c)
}
