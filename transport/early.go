package transport

import (
	"math/bits"
	"sync"
)

// A frame that arrives before the receive that takes it is read into a
// buffer of its own and copied into the receive's when one is posted
// (deliver, Post). Collectives post their receives round by round, so on
// ranks that share a CPU most large frames come early: a peer runs its
// round while this rank is off the CPU. Buffers of at least earlyMin
// bytes are pooled by power-of-two size class: two ranks on one CPU
// exchanging 1 MiB over TCP allocated and cleared 512 KiB a frame, and the
// allocations and the collector's marking they drove took a quarter of
// the CPU.

// earlyMin is the smallest early buffer pooled; earlyMax the largest.
const (
	earlyMin = 64 << 10
	earlyMax = 64 << 20 // 1<<26: earlyPools has its class
)

var earlyPools [27]sync.Pool // by class: 1<<class bytes

// earlyBuf returns n bytes, 8-byte aligned, for a frame that came early.
func earlyBuf(n int) []byte {
	if n < earlyMin || n > earlyMax {
		return alloc8(n)
	}
	class := bits.Len(uint(n - 1))
	if p, _ := earlyPools[class].Get().(*[]byte); p != nil {
		return (*p)[:n]
	}
	return alloc8(1 << class)[:n]
}

// putEarly returns a buffer of earlyBuf once its frame is copied out.
func putEarly(b []byte) {
	c := cap(b)
	if c < earlyMin || c > earlyMax || c&(c-1) != 0 {
		return
	}
	b = b[:c]
	earlyPools[bits.Len(uint(c-1))].Put(&b)
}
