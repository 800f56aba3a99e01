package shmring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// The layout (see the package doc).
const (
	// Magic is "gdshring" read as a little-endian uint64.
	Magic uint64 = 0x676e697268736467
	// Version is the layout's version; Attach refuses any other.
	Version = 1
	// HeaderSize is the bytes before the data area.
	HeaderSize = 256
	// MinCapacity and MaxCapacity bound the data area.
	MinCapacity = 64
	MaxCapacity = 1 << 30

	offMagic   = 0
	offVersion = 8
	offCap     = 16
	offHead    = 64
	offTail    = 128
	offParked  = 192

	recHeader = 8
	kindFrame = 'F'
	kindPad   = 'P'
	parkedOn  = 1
)

var (
	// ErrFull says the ring has no room for the frame now: retry when the
	// consumer has popped.
	ErrFull = errors.New("shmring: the ring is full")
	// ErrTooLarge says the frame can never fit this ring (more than
	// MaxFrame bytes): send it another way.
	ErrTooLarge = errors.New("shmring: frame larger than the ring takes")
	// ErrCorrupt says the shared memory is not a ring this side can
	// trust (refused by Attach, or a counter or record that breaks the
	// layout's rules); the side that saw it stays failed.
	ErrCorrupt = errors.New("shmring: shared memory is not a valid ring")
)

// Size returns the bytes of memory a ring with a data area of capacity
// bytes needs (capacity a power of two, MinCapacity..MaxCapacity).
func Size(capacity int) int { return HeaderSize + capacity }

// Ring is one side's view of a ring in shared memory. One goroutine may
// push (the producer) and one may pop and park (the consumer), each in
// either process; the two sides of one process may share a Ring. Its
// methods never block.
type Ring struct {
	data   []byte // the data area, len capacity
	cap    uint64
	mask   uint64
	max    int
	head   *atomic.Uint64
	tail   *atomic.Uint64
	parked *atomic.Uint64

	_ [64]byte
	p struct { // the producer's own
		head uint64 // next byte to write; what it last stored to head
		tail uint64 // tail as last loaded
		err  error  // sticky ErrCorrupt
	}
	_ [64]byte
	c struct { // the consumer's own
		tail uint64 // next byte to read; what it last stored to tail
		head uint64 // head as last loaded
		err  error
	}
	_ [64]byte
}

func word(mem []byte, off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&mem[off]))
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

func checkMem(mem []byte) error {
	if len(mem) < HeaderSize+MinCapacity {
		return fmt.Errorf("shmring: %d bytes of memory, need at least %d", len(mem), HeaderSize+MinCapacity)
	}
	if uintptr(unsafe.Pointer(&mem[0]))%64 != 0 {
		return errors.New("shmring: memory does not start on a 64-byte boundary")
	}
	return nil
}

// Init lays an empty ring over mem, which must start on a 64-byte
// boundary and hold at least Size(MinCapacity) bytes; the data area is
// the largest power of two that fits (at most MaxCapacity). Call it once,
// before the peer attaches (the peer learns of the memory afterwards, so
// through something that orders the two, such as the store or a socket).
func Init(mem []byte) (*Ring, error) {
	if err := checkMem(mem); err != nil {
		return nil, err
	}
	c := uint64(1) << (bits.Len64(uint64(min(len(mem)-HeaderSize, MaxCapacity))) - 1)
	clear(mem[:HeaderSize])
	binary.LittleEndian.PutUint32(mem[offVersion:], Version)
	binary.LittleEndian.PutUint64(mem[offCap:], c)
	word(mem, offHead).Store(0)
	word(mem, offTail).Store(0)
	word(mem, offParked).Store(0)
	word(mem, offMagic).Store(Magic)
	return newRing(mem, c, 0, 0), nil
}

// Attach opens the ring that Init laid over the same memory (mapped in
// another process, say). It refuses memory that is not one: a wrong
// magic or version, a capacity that is not a power of two in range or
// does not fit mem, counters that are not 8-byte multiples or more than
// the capacity apart; the error wraps ErrCorrupt.
func Attach(mem []byte) (*Ring, error) {
	if err := checkMem(mem); err != nil {
		return nil, err
	}
	if m := word(mem, offMagic).Load(); m != Magic {
		return nil, corrupt("magic %#x", m)
	}
	if v := binary.LittleEndian.Uint32(mem[offVersion:]); v != Version {
		return nil, corrupt("version %d, this side speaks %d", v, Version)
	}
	c := binary.LittleEndian.Uint64(mem[offCap:])
	if c < MinCapacity || c > MaxCapacity || c&(c-1) != 0 || c > uint64(len(mem)-HeaderSize) {
		return nil, corrupt("capacity %d in %d bytes of memory", c, len(mem))
	}
	h, t := word(mem, offHead).Load(), word(mem, offTail).Load()
	if h%8 != 0 || t%8 != 0 || h-t > c {
		return nil, corrupt("head %d, tail %d, capacity %d", h, t, c)
	}
	return newRing(mem, c, h, t), nil
}

func newRing(mem []byte, c, head, tail uint64) *Ring {
	r := &Ring{
		data:   mem[HeaderSize : HeaderSize+int(c) : HeaderSize+int(c)],
		cap:    c,
		mask:   c - 1,
		max:    int(c/2) - recHeader,
		head:   word(mem, offHead),
		tail:   word(mem, offTail),
		parked: word(mem, offParked),
	}
	r.p.head, r.p.tail = head, tail
	r.c.tail, r.c.head = tail, head
	return r
}

// Capacity is the bytes of the data area.
func (r *Ring) Capacity() int { return int(r.cap) }

// MaxFrame is the largest frame the ring takes: Capacity/2 - 8 bytes.
func (r *Ring) MaxFrame() int { return r.max }

// TryPush copies parts, back to back, into the ring as one frame. It
// does not keep the slices. The error is ErrFull when there is no room
// now (nothing was written), one wrapping ErrTooLarge when the frame is
// more than MaxFrame bytes, and one wrapping ErrCorrupt when the
// consumer's counter breaks the rules (then for ever). On success, wake
// reports that the consumer had parked: the caller must send it a wakeup.
// Only the producer may call it.
func (r *Ring) TryPush(parts ...[]byte) (wake bool, err error) {
	if r.p.err != nil {
		return false, r.p.err
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > r.max {
		return false, fmt.Errorf("%w: %d bytes, this ring takes at most %d", ErrTooLarge, n, r.max)
	}
	rec := uint64(recHeader + (n+7)&^7)
	head := r.p.head
	off := head & r.mask
	need := rec
	if end := r.cap - off; end < rec {
		need += end // a pad to the end, then the frame at 0
	}
	if r.cap-(head-r.p.tail) < need {
		t := r.tail.Load()
		if head-t > head-r.p.tail { // backwards, or past head
			r.p.err = corrupt("tail went from %d to %d with head at %d", r.p.tail, t, head)
			return false, r.p.err
		}
		r.p.tail = t
		if r.cap-(head-t) < need {
			return false, ErrFull
		}
	}
	if need != rec {
		putRecord(r.data[off:], 0, kindPad)
		head += need - rec
		off = 0
	}
	putRecord(r.data[off:], uint32(n), kindFrame)
	w := r.data[off+recHeader : off+rec]
	for _, p := range parts {
		w = w[copy(w, p):]
	}
	head += rec
	r.p.head = head
	// Dekker: this store of head, then the load of parked below. A Swap,
	// not a Store, because under the race detector only a
	// read-modify-write keeps the two in order (see Ordering in the
	// package doc).
	r.head.Swap(head)
	if r.parked.Load() == parkedOn && r.parked.CompareAndSwap(parkedOn, 0) {
		wake = true
	}
	return wake, nil
}

// TryPop hands the oldest frame to fn, which sees it in place, and frees
// its space when fn returns. fn must not keep the slice, and must treat
// its bytes as untrusted (the peer could be writing them). It reports
// false when the ring is empty; the error wraps ErrCorrupt when the
// producer's counter or a record breaks the rules (then for ever, fn not
// called). Only the consumer may call it.
func (r *Ring) TryPop(fn func(frame []byte)) (bool, error) {
	if r.c.err != nil {
		return false, r.c.err
	}
	tail := r.c.tail
	avail := r.c.head - tail
	if avail == 0 {
		h := r.head.Load()
		if avail = h - tail; avail == 0 {
			return false, nil
		}
		if avail > r.cap || h%8 != 0 {
			return false, r.failPop("head at %d with tail at %d", h, tail)
		}
		r.c.head = h
	}
	off := tail & r.mask
	n, kind := record(r.data[off:])
	if kind == kindPad {
		skip := r.cap - off
		if n != 0 || skip+recHeader > avail {
			return false, r.failPop("padding of %d at offset %d with %d bytes published", n, off, avail)
		}
		tail += skip
		avail -= skip
		off = 0
		n, kind = record(r.data)
	}
	if kind != kindFrame || n > uint32(r.max) {
		return false, r.failPop("record kind %#x length %d at offset %d", kind, n, off)
	}
	rec := uint64(recHeader + (n+7)&^7)
	if rec > avail || rec > r.cap-off {
		return false, r.failPop("frame of %d at offset %d with %d bytes published", n, off, avail)
	}
	fn(r.data[off+recHeader : off+recHeader+uint64(n) : off+recHeader+uint64(n)])
	tail += rec
	r.c.tail = tail
	r.tail.Store(tail)
	return true, nil
}

func (r *Ring) failPop(format string, args ...any) error {
	r.c.err = corrupt(format, args...)
	return r.c.err
}

// Park announces that the consumer is about to sleep until a wakeup. It
// returns false when a frame (or a corrupt head) has been published
// meanwhile: the consumer must not sleep but pop. After true, the next
// TryPush reports wake, unless Unpark comes first; after waking, for
// whatever reason, the consumer calls Unpark. Only the consumer may call
// it.
func (r *Ring) Park() bool {
	if r.c.err != nil {
		return false
	}
	// Dekker: this store of parked, then the load of head below; a Swap
	// for the reason given in TryPush.
	r.parked.Swap(parkedOn)
	if r.head.Load() != r.c.tail {
		r.Unpark()
		return false
	}
	return true
}

// Unpark ends a Park. It reports whether the park was still on, so that
// no wakeup was sent for it; false means the producer took it and a
// wakeup is on its way (or came), which the consumer may get later as a
// stray one. Only the consumer may call it.
func (r *Ring) Unpark() bool { return r.parked.Swap(0) == parkedOn }

func putRecord(b []byte, n uint32, kind uint32) {
	binary.LittleEndian.PutUint64(b, uint64(n)|uint64(kind)<<32)
}

func record(b []byte) (n, kind uint32) {
	v := binary.LittleEndian.Uint64(b)
	return uint32(v), uint32(v >> 32)
}
