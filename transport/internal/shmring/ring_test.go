package shmring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"unsafe"
)

// aligned returns n zero bytes starting on a 64-byte boundary, as a
// mapping would.
func aligned(n int) []byte {
	b := make([]byte, n+64)
	o := int(-uintptr(unsafe.Pointer(&b[0])) & 63)
	return b[o : o+n : o+n]
}

func testRing(t testing.TB, capacity int) (*Ring, []byte) {
	t.Helper()
	mem := aligned(Size(capacity))
	r, err := Init(mem)
	if err != nil {
		t.Fatal(err)
	}
	if r.Capacity() != capacity {
		t.Fatalf("capacity %d, want %d", r.Capacity(), capacity)
	}
	return r, mem
}

// pattern fills n bytes from seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func push(t testing.TB, r *Ring, parts ...[]byte) bool {
	t.Helper()
	wake, err := r.TryPush(parts...)
	if err != nil {
		t.Fatal(err)
	}
	return wake
}

func pop(t testing.TB, r *Ring) []byte {
	t.Helper()
	var got []byte
	ok, err := r.TryPop(func(f []byte) { got = append([]byte{}, f...) })
	if err != nil || !ok {
		t.Fatalf("pop: ok %v err %v", ok, err)
	}
	return got
}

func TestInitCapacity(t *testing.T) {
	for _, tc := range []struct{ mem, capacity int }{
		{Size(64), 64}, {Size(64) + 63, 64}, {Size(128) - 1, 64}, {Size(4096), 4096}, {Size(4096) + 4000, 4096},
	} {
		r, err := Init(aligned(tc.mem))
		if err != nil {
			t.Fatal(err)
		}
		if r.Capacity() != tc.capacity || r.MaxFrame() != tc.capacity/2-8 {
			t.Errorf("%d bytes: capacity %d max %d, want %d", tc.mem, r.Capacity(), r.MaxFrame(), tc.capacity)
		}
	}
	if _, err := Init(aligned(Size(64) - 1)); err == nil {
		t.Error("Init took too little memory")
	}
	if _, err := Init(aligned(Size(64) + 8)[8:]); err == nil {
		t.Error("Init took memory off a 64-byte boundary")
	}
	if _, err := Attach(aligned(Size(64) + 8)[8:]); err == nil {
		t.Error("Attach took memory off a 64-byte boundary")
	}
}

func TestLayout(t *testing.T) {
	r, mem := testRing(t, 256)
	push(t, r, []byte("abc"))
	le := binary.LittleEndian
	if string(mem[:8]) != "gdshring" || le.Uint32(mem[8:]) != Version || le.Uint64(mem[16:]) != 256 {
		t.Fatalf("header % x", mem[:24])
	}
	if le.Uint64(mem[64:]) != 16 || le.Uint64(mem[128:]) != 0 {
		t.Fatalf("head %d tail %d", le.Uint64(mem[64:]), le.Uint64(mem[128:]))
	}
	if le.Uint32(mem[256:]) != 3 || mem[260] != 'F' || string(mem[264:267]) != "abc" {
		t.Fatalf("record % x", mem[256:272])
	}
}

// TestEveryOffset pushes and pops every frame size starting at every
// offset of the data area, and at counters about to wrap 2^64.
func TestEveryOffset(t *testing.T) {
	const capacity = 256
	for _, base := range []uint64{0, math.MaxUint64 - 7 - 2*capacity} {
		for o := 0; o < capacity; o += 8 {
			for n := 0; n <= capacity/2-8; n++ {
				mem := aligned(Size(capacity))
				if _, err := Init(mem); err != nil {
					t.Fatal(err)
				}
				start := base + uint64(o)
				word(mem, offHead).Store(start)
				word(mem, offTail).Store(start)
				r, err := Attach(mem)
				if err != nil {
					t.Fatal(err)
				}
				want := pattern(n, byte(o+n))
				// Twice: the second frame starts wherever the first left off.
				for i := range 2 {
					push(t, r, want[:n/2], want[n/2:])
					if got := pop(t, r); !bytes.Equal(got, want) {
						t.Fatalf("base %d offset %d size %d frame %d: got % x", base, o, n, i, got)
					}
				}
				if ok, err := r.TryPop(func([]byte) { t.Fatal("frame from an empty ring") }); ok || err != nil {
					t.Fatalf("empty ring: %v %v", ok, err)
				}
				rec := uint64(8 + (n+7)&^7)
				used := word(mem, offHead).Load() - start
				if used < 2*rec || used > 2*rec+capacity {
					t.Fatalf("offset %d size %d: %d bytes used", o, n, used)
				}
			}
		}
	}
}

func TestFullEmpty(t *testing.T) {
	r, _ := testRing(t, 256)
	if ok, err := r.TryPop(func([]byte) {}); ok || err != nil {
		t.Fatalf("empty: %v %v", ok, err)
	}
	// 24-byte records: 10 fit in 256 (240 bytes), the 11th does not.
	for i := range 10 {
		push(t, r, pattern(16, byte(i)))
	}
	if _, err := r.TryPush(pattern(16, 10)); err != ErrFull {
		t.Fatalf("11th frame: %v, want ErrFull", err)
	}
	if _, err := r.TryPush(pattern(8, 10)); err != nil { // a 16-byte record fits the last 16
		t.Fatalf("a frame that fits: %v", err)
	}
	if _, err := r.TryPush(); err != ErrFull {
		t.Fatalf("zero-length frame into a full ring: %v", err)
	}
	if got := pop(t, r); !bytes.Equal(got, pattern(16, 0)) {
		t.Fatal("first frame wrong")
	}
	// 24 bytes free at offset 0... but the next record would go at the
	// end: 0 bytes there, so it goes at 0 with no pad.
	push(t, r, pattern(16, 11))
	for i := 1; i < 10; i++ {
		if got := pop(t, r); !bytes.Equal(got, pattern(16, byte(i))) {
			t.Fatalf("frame %d wrong", i)
		}
	}
	if got := pop(t, r); !bytes.Equal(got, pattern(8, 10)) {
		t.Fatal("small frame wrong")
	}
	if got := pop(t, r); !bytes.Equal(got, pattern(16, 11)) {
		t.Fatal("frame after wrap wrong")
	}
	if ok, _ := r.TryPop(func([]byte) {}); ok {
		t.Fatal("frame from an empty ring")
	}
}

// TestPadNeedsRoom: a frame that must wrap needs the pad and itself.
func TestPadNeedsRoom(t *testing.T) {
	r, _ := testRing(t, 512)
	push(t, r, pattern(232, 1)) // record of 240 at 0
	pop(t, r)
	push(t, r, pattern(232, 2)) // 240 at 240, held
	// A record of 128 does not fit the 32 before the end: pad 32 and the
	// record at 0 need 160 of the 272 free.
	push(t, r, pattern(120, 3))
	// Another 128 from 128 up to 256, but only 112 are free until the
	// frame at 240 is popped.
	if _, err := r.TryPush(pattern(120, 4)); err != ErrFull {
		t.Fatalf("got %v, want ErrFull", err)
	}
	if got := pop(t, r); !bytes.Equal(got, pattern(232, 2)) {
		t.Fatal("frame before the pad wrong")
	}
	push(t, r, pattern(120, 4))
	for _, s := range []byte{3, 4} {
		if got := pop(t, r); !bytes.Equal(got, pattern(120, s)) {
			t.Fatalf("frame %d wrong", s)
		}
	}
}

func TestTooLarge(t *testing.T) {
	r, _ := testRing(t, 1024)
	max := r.MaxFrame()
	if max != 504 {
		t.Fatalf("MaxFrame %d", max)
	}
	for i := range 3 { // the largest fits at any offset of an empty ring
		push(t, r, pattern(max-1, 0), pattern(1, 1))
		if got := pop(t, r); len(got) != max {
			t.Fatalf("round %d: %d bytes", i, len(got))
		}
	}
	_, err := r.TryPush(pattern(max, 0), pattern(1, 0))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	push(t, r, pattern(3, 3)) // the ring still works
	if got := pop(t, r); !bytes.Equal(got, pattern(3, 3)) {
		t.Fatal("frame after a refusal wrong")
	}
}

func TestZeroLength(t *testing.T) {
	r, _ := testRing(t, 64)
	for i := range 20 {
		push(t, r)
		push(t, r, nil, []byte{})
		for range 2 {
			if got := pop(t, r); len(got) != 0 {
				t.Fatalf("round %d: %d bytes", i, len(got))
			}
		}
	}
}

func TestManySmall(t *testing.T) {
	r, _ := testRing(t, 4096)
	var seqIn, seqOut uint32
	var buf [16]byte
	for round := range 2000 {
		for range round % 97 {
			n := 4 + int(seqIn%13)
			binary.LittleEndian.PutUint32(buf[:], seqIn)
			if _, err := r.TryPush(buf[:n]); err == ErrFull {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			seqIn++
		}
		for range round % 89 {
			ok, err := r.TryPop(func(f []byte) {
				if len(f) != 4+int(seqOut%13) || binary.LittleEndian.Uint32(f) != seqOut {
					t.Fatalf("frame %d: % x", seqOut, f)
				}
				seqOut++
			})
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
		}
	}
	for {
		ok, err := r.TryPop(func(f []byte) {
			if binary.LittleEndian.Uint32(f) != seqOut {
				t.Fatalf("frame %d: % x", seqOut, f)
			}
			seqOut++
		})
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
	}
	if seqIn != seqOut || seqIn < 10000 {
		t.Fatalf("pushed %d popped %d", seqIn, seqOut)
	}
}

func TestParkWake(t *testing.T) {
	r, _ := testRing(t, 256)
	if !r.Park() {
		t.Fatal("Park on an empty ring refused")
	}
	if !push(t, r, []byte{1}) {
		t.Fatal("push to a parked consumer did not report wake")
	}
	if push(t, r, []byte{2}) {
		t.Fatal("second push reported wake again")
	}
	if r.Unpark() {
		t.Fatal("Unpark after a wake says no wakeup was sent")
	}
	if r.Park() {
		t.Fatal("Park with frames waiting")
	}
	if push(t, r, []byte{3}) {
		t.Fatal("wake after a refused Park")
	}
	for range 3 {
		pop(t, r)
	}
	if !r.Park() {
		t.Fatal("Park on an emptied ring refused")
	}
	if !r.Unpark() {
		t.Fatal("Unpark without a push says a wakeup was sent")
	}
	if push(t, r, []byte{4}) {
		t.Fatal("wake after Unpark")
	}
}

// TestAttachRefuses corrupts each header field in turn.
func TestAttachRefuses(t *testing.T) {
	le := binary.LittleEndian
	for _, tc := range []struct {
		name string
		mess func(mem []byte)
	}{
		{"zero", func(mem []byte) { clear(mem) }},
		{"magic", func(mem []byte) { mem[3] ^= 1 }},
		{"version", func(mem []byte) { le.PutUint32(mem[8:], 2) }},
		{"capacity not a power of two", func(mem []byte) { le.PutUint64(mem[16:], 192) }},
		{"capacity small", func(mem []byte) { le.PutUint64(mem[16:], 32) }},
		{"capacity beyond memory", func(mem []byte) { le.PutUint64(mem[16:], 512) }},
		{"capacity huge", func(mem []byte) { le.PutUint64(mem[16:], 1<<62) }},
		{"head unaligned", func(mem []byte) { le.PutUint64(mem[64:], 4) }},
		{"tail unaligned", func(mem []byte) { le.PutUint64(mem[64:], 16); le.PutUint64(mem[128:], 12) }},
		{"head far ahead", func(mem []byte) { le.PutUint64(mem[64:], 264) }},
		{"tail ahead", func(mem []byte) { le.PutUint64(mem[128:], 8) }},
	} {
		mem := aligned(Size(256))
		if _, err := Init(mem); err != nil {
			t.Fatal(err)
		}
		tc.mess(mem)
		if _, err := Attach(mem); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Attach gave %v", tc.name, err)
		}
	}
}

// TestCorruptRecords: a peer that breaks the rules after Attach fails
// the ring on this side, for good, and nothing panics.
func TestCorruptRecords(t *testing.T) {
	le := binary.LittleEndian
	for _, tc := range []struct {
		name string
		mess func(mem []byte)
	}{
		{"length beyond max", func(mem []byte) { le.PutUint32(mem[256:], 121) }},
		{"length beyond published", func(mem []byte) { le.PutUint32(mem[256:], 16) }},
		{"length huge", func(mem []byte) { le.PutUint32(mem[256:], math.MaxUint32) }},
		{"kind", func(mem []byte) { mem[260] = 'X' }},
		{"pad with a length", func(mem []byte) { le.PutUint64(mem[256:], 8|'P'<<32) }},
		{"pad beyond published", func(mem []byte) { le.PutUint64(mem[256:], 'P'<<32) }},
		{"head backwards", func(mem []byte) { le.PutUint64(mem[64:], math.MaxUint64-7) }},
		{"head far ahead", func(mem []byte) { le.PutUint64(mem[64:], 512) }},
		{"head unaligned", func(mem []byte) { le.PutUint64(mem[64:], 12) }},
	} {
		mem := aligned(Size(256))
		r, err := Init(mem)
		if err != nil {
			t.Fatal(err)
		}
		push(t, r, pattern(8, 1)) // 16 bytes
		tc.mess(mem)
		for range 2 {
			if ok, err := r.TryPop(func([]byte) { t.Errorf("%s: frame delivered", tc.name) }); ok || !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s: TryPop gave %v %v", tc.name, ok, err)
			}
		}
		if r.Park() {
			t.Errorf("%s: Park on a failed ring", tc.name)
		}
	}
	// The producer's side: a tail that goes backwards or past head.
	for _, tail := range []uint64{24, 104, math.MaxUint64 - 7} {
		mem := aligned(Size(64))
		r, err := Init(mem)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			push(t, r, pattern(8, 1)) // records of 16
		}
		pop(t, r)
		pop(t, r)
		push(t, r, pattern(24, 1)) // loads tail 32; pad 16, head 96
		word(mem, offTail).Store(tail)
		for range 2 {
			if _, err := r.TryPush(pattern(24, 0)); !errors.Is(err, ErrCorrupt) {
				t.Errorf("tail %d: TryPush gave %v", tail, err)
			}
		}
	}
}

// FuzzAttachPop: arbitrary memory never makes Attach, TryPop, Park or
// TryPush panic, and a frame TryPop hands over lies inside the data area.
func FuzzAttachPop(f *testing.F) {
	mem := aligned(Size(128))
	r, _ := Init(mem)
	r.TryPush([]byte("hello"))
	r.TryPush(pattern(40, 1))
	r.TryPop(func([]byte) {})
	r.TryPush(pattern(30, 2)) // wraps with a pad
	f.Add(append([]byte{}, mem...))
	mem2 := aligned(Size(64))
	Init(mem2)
	f.Add(append([]byte{}, mem2...))
	f.Fuzz(func(t *testing.T, b []byte) {
		mem := aligned(len(b))
		copy(mem, b)
		r, err := Attach(mem)
		if err != nil {
			return
		}
		lo, hi := uintptr(unsafe.Pointer(&mem[0]))+HeaderSize, uintptr(unsafe.Pointer(&mem[0]))+HeaderSize+uintptr(r.Capacity())
		for range 64 {
			ok, err := r.TryPop(func(fr []byte) {
				if len(fr) > r.MaxFrame() {
					t.Fatalf("frame of %d bytes", len(fr))
				}
				if len(fr) > 0 {
					p := uintptr(unsafe.Pointer(&fr[0]))
					if p < lo || p+uintptr(len(fr)) > hi {
						t.Fatal("frame outside the data area")
					}
				}
			})
			if !ok || err != nil {
				break
			}
		}
		r.Park()
		r.TryPush(pattern(r.MaxFrame()/3, 0))
		r.TryPush()
	})
}
