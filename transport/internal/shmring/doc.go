// Package shmring is a single-producer single-consumer ring of
// variable-length frames laid over memory that two processes share (a
// MAP_SHARED mapping of a file in /dev/shm): the same-host control path
// of package transport, where small frames and barrier arrivals go
// through memory that the receiver polls instead of through loopback TCP.
//
// The package is a pure core. It maps nothing, sends nothing and starts
// no goroutine: the caller owns the memory, the polling loop and the
// wakeup channel (one byte over the pair's TCP connection, in the
// transport). Use:
//
//	// creator (the producer, say), on a fresh mapping of shmring.Size(c) bytes:
//	r, err := shmring.Init(mem)
//	// peer, on its own mapping of the same file, whose name it was told:
//	r, err := shmring.Attach(mem)
//
//	// producer
//	wake, err := r.TryPush(hdr, payload) // one frame, copied in
//	switch {
//	case errors.Is(err, shmring.ErrTooLarge): // send it another way (slots)
//	case err == shmring.ErrFull: // retry later; the consumer is behind
//	case err != nil: // ErrCorrupt: the peer's memory is not a ring; fail the link
//	case wake: // the consumer sleeps: send it one wakeup byte
//	}
//
//	// consumer
//	ok, err := r.TryPop(func(frame []byte) { ... }) // frame is valid until fn returns
//	// nothing there after a bounded spin:
//	if r.Park() {
//		// sleep until a wakeup byte (or a timeout, or the connection's end)
//		r.Unpark()
//	}
//
// # Layout
//
// All integers are little-endian; the memory must start on a 64-byte
// boundary (a mapping starts on a page).
//
//	off  size  field
//	  0     8  magic "gdshring" (written last by Init)
//	  8     4  version (1)
//	 12     4  zero
//	 16     8  capacity C: a power of two, MinCapacity..MaxCapacity
//	 24    40  zero
//	 64     8  head: bytes ever pushed (producer writes, consumer reads); own cache line
//	128     8  tail: bytes ever popped (consumer writes, producer reads); own cache line
//	192     8  parked: 1 while the consumer sleeps or is about to (both write); own cache line
//	256     C  data
//
// head and tail are free-running 64-bit byte counters (they wrap at 2^64
// by unsigned arithmetic, never in practice); a counter's offset in data
// is counter & (C-1), and head-tail is the bytes in use, at most C. Each
// record starts on 8 bytes and is an 8-byte record header, uint32 length
// and uint32 kind ('F' a frame, 'P' padding), then the frame's bytes
// padded to 8. A record never straddles the end of data: when the next
// frame does not fit before the end, the producer writes a padding record
// there (length 0), which the consumer skips to offset 0, and the pad and
// the frame are published by one store of head. A frame is at most C/2-8
// bytes (MaxFrame), so that an empty ring always fits one whatever its
// offset (pad < record <= C/2); a larger one is refused with ErrTooLarge.
//
// # Ordering
//
// Every access to head, tail and parked is a sync/atomic operation, and
// Go's atomics are sequentially consistent: on amd64 a load is a MOV and
// a store or swap an XCHG (a full barrier), on arm64 LDAR and STLR or
// SWPAL (but see below for the race detector). Those are
// instructions on physical memory, so they order two processes mapping
// the same page exactly as they order two goroutines (the Go memory
// model speaks of one program; this is the same argument C11 shared
// memory code makes with memory_order_seq_cst). The frame bytes are
// plain memory.
//
// No frame is lost or read torn. The producer writes a record's bytes and
// then stores head; the consumer loads head and only then reads the bytes
// below it. The consumer reads a record (fn returns) and then stores
// tail; the producer loads tail and only then overwrites bytes below it.
// Only the producer writes head and only the consumer writes tail, each
// from its own private copy, so neither store can undo the other side's.
//
// No wakeup is missed (Dekker's argument). The consumer parks by storing
// parked=1 and then loading head; the producer publishes by storing head
// and then loading parked. In the single total order of these four
// sequentially consistent operations, one of the two stores comes first,
// so at least one side sees the other's store: either Park sees the new
// head and returns false (the consumer must not sleep), or TryPush sees
// parked=1, takes it with a compare-and-swap 1->0 and reports wake, so
// the caller sends a wakeup. The swap makes one wakeup per park: further
// pushes see 0 and report nothing. A consumer that wakes for another
// reason (a timeout, other input) calls Unpark, which swaps parked to 0;
// a producer's CAS that loses that race sends nothing, and one that won
// it has sent, or will send, a wakeup the consumer no longer needs.
// Wakeups are therefore hints: a consumer must tolerate a stray one and
// always look at the ring after waking.
//
// The two stores of that argument are Swaps, read-modify-writes, and not
// Stores. The language makes both sequentially consistent, but the race
// detector does not keep Store so for memory outside the Go heap, which a
// mapping is: built with -race (Go 1.26, amd64), Store there is a plain
// MOV, a release store that a later load of another word may overtake,
// so Park and TryPush could both miss each other. Under -race that hung
// a two-process test: the consumer slept beside a frame that had left too
// little room for the next one, and the producer, meeting only ErrFull,
// never looked at parked again. A Swap is a locked XCHG with or without
// the race detector, and without it costs what Store's XCHG did
// (TestParkRacesPush).
//
// # Measured
//
// BenchmarkPingPong8B, 8-byte round trips on the 2-vCPU AMD EPYC machine
// of issue 17 (shared with other work, load about 1.5; three runs each,
// same run): two goroutines, rings with spinning consumers 189-191 ns,
// both consumers parked and woken through a pipe 5.6-5.8 µs, loopback
// TCP read by the poller 16.3 µs, by a spinning read 12.3-13.7 µs; two
// processes, rings 208-261 ns, spinning TCP 22-30 µs.
//
// # Distrust
//
// The peer is another process, and its memory may be stale, foreign or
// hostile. Attach refuses memory without the magic, version, a valid
// capacity that fits the mapping, and counters that make sense. After
// that, every value read from shared memory is read once into a local and
// checked before use: a head that moves backwards or more than C ahead,
// a tail that moves backwards or past head, a record whose kind is
// neither, whose length exceeds MaxFrame, the bytes published or the end
// of data: all make TryPop or TryPush return an error wrapping ErrCorrupt,
// and the ring stays failed on that side. No index into memory is ever
// formed from an unchecked value, so nothing panics. What a frame
// contains is the caller's to check (the transport's frames carry CRCs);
// a hostile peer can also change a frame's bytes while fn reads them.
package shmring
