package transport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/godist/godist/internal/cpuyield"
	"github.com/godist/godist/internal/futex"
	"golang.org/x/sys/unix"
)

// readLoop reads frames from rank r until the connection ends.
func (e *Endpoint) readLoop(r int, conn net.Conn, spin time.Duration, yield bool, shm *shmSeg) {
	defer shm.unmap()
	var w *waker
	if e.wakers != nil {
		w = e.wakers[r].Load()
	}
	// A yielding reader polls while a receive waits for this peer, and
	// while a frame is on its way in (a payload being read, or part of a
	// header here): a reader that parked inside a frame waited for the
	// runtime's network poller, which a process whose other readers poll
	// (runtime.Gosched) runs only every 10 ms: all_gather of 1 MiB across
	// 2 hosts at 1 Gbit/s took 10 ms where its bytes take 4.3.
	var br *bufio.Reader
	in := &streamPayload{}
	wanted := func() bool { return e.receiveWaits(r) || in.reading || br.Buffered() > 0 }
	br = bufio.NewReaderSize(countingReader{socketReader(conn, spin, yield, w, wanted), &e.peers.make(r).live.heard}, viewMax)
	in.br = br
	// A reader that polls on a CPU of its own steps aside after each
	// frame when nothing more is buffered: the frame may have woken its
	// receive's caller, which then runs at once rather than after the
	// reader's next read of the socket (a failed read takes the socket's
	// lock, which the sender's CPU may hold delivering). 2 namespace
	// hosts of one rank each, 1 Gbit/s, barrier: 22.7-33.3 µs (median
	// 26.0) against 26.8-34.1 (29.6), with cpuSampleAfter's later read (five
	// alternating runs; BENCHMARKS). A yielding reader does not: there the
	// caller runs at the yield that follows the read, and stepping aside
	// first cost a 4-host barrier 30-60 µs more.
	aside := spin > 0 && !yield
	var asm assembly
	h := new(Header) // each frame's, in turn
	for {
		if err := e.readFrame(r, br, in, shm, &asm, h); err != nil {
			e.endRead(r, conn, err)
			return
		}
		if aside && br.Buffered() == 0 {
			runtime.Gosched()
		}
	}
}

// endRead ends a reader on err: the connection's end, or a broken frame
// (then the connection is closed too).
func (e *Endpoint) endRead(r int, conn net.Conn, err error) {
	e.peers.make(r).spare.close()
	var fe frameErr
	if errors.As(err, &fe) {
		e.peerDown(r, fe.err)
		conn.Close()
		return
	}
	if errors.Is(err, net.ErrClosed) {
		err = ErrClosed
	}
	e.peerDown(r, err)
}

// frameErr marks a frame that breaks the protocol: the reader closes the
// connection.
type frameErr struct{ err error }

func (f frameErr) Error() string { return f.err.Error() }

// readFrame reads one frame's header from the socket and handles it.
// The header is decoded where it lies in the reader's buffer, into the
// reader's own h: a frame allocates nothing to read its header.
func (e *Endpoint) readFrame(r int, br *bufio.Reader, in payload, shm *shmSeg, asm *assembly, h *Header) error {
	hb, err := br.Peek(HeaderSize)
	if err != nil {
		if err == io.EOF && len(hb) > 0 {
			err = io.ErrUnexpectedEOF // the stream ended inside a header
		}
		return err
	}
	if *h, err = decodeHeader(hb); err != nil {
		return frameErr{err}
	}
	br.Discard(HeaderSize)
	return e.handleFrame(r, h, in, shm, asm)
}

// handleFrame delivers one frame whose payload is in (or in a slot of
// shm). An error is a frameErr.
func (e *Endpoint) handleFrame(r int, h *Header, in payload, shm *shmSeg, asm *assembly) error {
	if h.Frag != 0 || asm.active {
		if err := e.fragment(r, h, shm, asm); err != nil {
			return frameErr{err}
		}
		return nil
	}
	if h.Kind == KindShmData || h.Kind == KindShmMessage {
		if shm == nil || int(h.Slot) >= shmSlots || h.Len > shmSlotSize {
			return frameErr{fmt.Errorf("%w: shared-memory frame (slot %d, %d bytes) on a connection without a segment for it", ErrFrame, h.Slot, h.Len)}
		}
		if h.Kind == KindShmData {
			h.Kind = KindData
		} else {
			h.Kind = KindMessage
		}
		err := e.deliver(r, h, &memPayload{b: shm.slot(int(h.Slot))[:h.Len], slot: true})
		shm.free(int(h.Slot)) // the sender may reuse it
		if err != nil {
			return frameErr{err}
		}
		return nil
	}
	if err := e.deliver(r, h, in); err != nil {
		return frameErr{err}
	}
	return nil
}

// readRing reads rank r's frames from the ring in its segment
// (TCPOptions.ShmRing): it polls the ring for up to spin, then parks on
// the socket, which brings a wakeup byte (0) when the sender has pushed
// a frame since, or the connection's end. A frame too large for the ring
// comes on the socket after an empty frame in the ring that says so.
func (e *Endpoint) readRing(r int, conn net.Conn, spin time.Duration, yield bool, shm *shmSeg) {
	defer shm.unmap()
	var w *waker // yielding: poll only while a receive waits (wake.go)
	if e.wakers != nil {
		w = e.wakers[r].Load()
	}
	br := bufio.NewReaderSize(countingReader{conn, &e.peers.make(r).live.heard}, viewMax)
	in := &streamPayload{br: br}
	var asm assembly
	h := new(Header) // each frame's, in turn
	var ferr error
	bulk := false // the last frame's payload was in a slot
	handle := func(f []byte) {
		if len(f) == 0 {
			// The next frame is on the socket, after any wakeups.
			for {
				b, err := br.Peek(1)
				if err != nil {
					ferr = err
					return
				}
				if b[0] != 0 {
					break
				}
				br.Discard(1)
			}
			ferr = e.readFrame(r, br, in, shm, &asm, h)
			return
		}
		if len(f) < HeaderSize {
			ferr = frameErr{fmt.Errorf("%w: a ring frame of %d bytes", ErrFrame, len(f))}
			return
		}
		var err error
		if *h, err = decodeHeader(f[:HeaderSize]); err != nil {
			ferr = frameErr{err}
			return
		}
		body := f[HeaderSize:]
		if h.Kind != KindShmData && h.Kind != KindShmMessage && int64(len(body)) != h.Len {
			ferr = frameErr{fmt.Errorf("%w: a ring frame of %d payload bytes for a header of %d", ErrFrame, len(body), h.Len)}
			return
		}
		bulk = h.Kind == KindShmData || h.Kind == KindShmMessage
		ferr = e.handleFrame(r, h, &memPayload{b: body}, shm, &asm)
	}
	ring := shm.ring
	var idle, checked time.Time
	var spinWait time.Duration // this idle spell's polling: spin, or 0 on a busy host
	var idleCPU time.Duration  // the process's CPU time when the spell began
	polls, handled := 0, 0
	for {
		got, err := ring.TryPop(handle)
		if err != nil {
			e.endRead(r, conn, frameErr{fmt.Errorf("%w: %w", ErrFrame, err)})
			return
		}
		if ferr != nil {
			e.endRead(r, conn, ferr)
			return
		}
		if got {
			e.peers.make(r).live.heard.Add(1)
			idle, polls = time.Time{}, 0
			// While frames keep coming this loop never waits, and the
			// goroutines its frames wake (the handler of a request, the
			// caller of a reply) would wait for the runtime to preempt
			// it, 10 ms later. Step aside after each frame whose payload
			// was in a slot (a copy long enough to make a yield cheap)
			// and every 16 others.
			if handled++; bulk || handled%16 == 0 {
				bulk = false
				runtime.Gosched()
			}
			continue
		}
		if idle.IsZero() {
			idle = time.Now()
			checked = idle
			if hostBusy(idle) {
				// A reader lost its CPU polling lately: sleep at once.
				// Where a socket reader of the process did, this one
				// polling on would also keep the runtime from the
				// network poller that reader sleeps in (2 hosts of 2
				// ranks, a CPU each, a hog on each: a barrier took 19.6
				// ms, against 4.7-4.9 sleeping and 7.7-7.8 before
				// either).
				spinWait = 0
			} else {
				spinWait = spin
				idleCPU = processCPU()
			}
		}
		// The clock is read every 32 polls: a poll is cheaper than it.
		// While a fragmented message is under way its next fragment is
		// due as soon as the sender has copied it in (tens of µs), so the
		// reader polls longer (fragSpin) rather than make the sender wake
		// it for each fragment.
		wait := spinWait
		unwanted := w != nil && !e.receiveWaits(r)
		if unwanted {
			wait = min(spinWait, yieldGrace)
		}
		if asm.active && spinWait > 0 {
			wait = max(spinWait, fragSpin)
		}
		if polls++; wait > 0 && polls%32 == 0 {
			now := time.Now()
			if !yield && now.Sub(checked) > preempted {
				// The thread was off its CPU between two looks at the
				// clock: other work wants this CPU, and a poller that
				// holds it only delays the peer's answer (a busy host
				// turned 10 µs calls into 16 ms ones). Sleep instead,
				// and so do the process's readers for a while (hostBusy).
				wait = 0
				if cpuStarved(idle, idleCPU, now) {
					markBusy(now)
				}
			}
			checked = now
			if now.Sub(idle) >= wait {
				wait = 0
			}
		}
		if wait > 0 {
			runtime.Gosched() // polling must not keep the senders off the cores
			if !yield || !cpuyield.YieldLost() {
				continue
			}
			// A yield lost to other work's slice. One alone says
			// nothing here: the job's own ranks hold the CPU so now
			// and then (readersHold, spin.go). Two close together hold the
			// readers asleep: four ranks of one host on two CPUs
			// beside two CPU hogs, all-reduce of 64 KiB took 0.8-1.6
			// ms against 8.0 polling through every yield, of 1 MiB
			// 6.4-6.6 against 12.0-12.1, broadcast of 64 KiB 0.19-0.30
			// against 3.8; quiet, eight alternating runs, within the
			// runs' spread (1 MiB: 0.80-1.31 ms against 0.67-1.35).
			now := time.Now()
			readersHold.Lost(now)
			if !readersHold.Held(now) {
				continue
			}
		}
		if !ring.Park() {
			continue
		}
		if w != nil {
			w.park()
			if unwanted && e.receiveWaits(r) && w.state.CompareAndSwap(readerParked, readerRunning) {
				// A receive was posted as it parked. (One that waits
				// longer than spin does not keep it polling: parked, it
				// reads the socket, which brings the peer's end.)
				ring.Unpark()
				idle = time.Time{}
				continue
			}
		}
		// Asleep on the socket: a wakeup, the connection's end, or a
		// receive posted (the waker's deadline).
		b, err := br.ReadByte()
		woke := w != nil && w.resume()
		ring.Unpark()
		if err != nil {
			if woke && errors.Is(err, os.ErrDeadlineExceeded) {
				idle = time.Time{}
				continue
			}
			e.endRead(r, conn, err)
			return
		}
		if b != 0 {
			br.UnreadByte() // a frame the ring's marker announces
		}
		idle = time.Time{}
	}
}

// streamPayload is the payload of the frame being read from a connection.
type streamPayload struct {
	br      *bufio.Reader
	reading bool // a read of the payload waits for its bytes (the reader's goroutine's alone)
}

func (s *streamPayload) read(p []byte) error {
	s.reading = true
	_, err := io.ReadFull(s.br, p)
	s.reading = false
	return err
}

// view hands out the bytes in the connection's read buffer (n is at most
// its size).
func (s *streamPayload) view(n int, fn func([]byte)) error {
	s.reading = true
	b, err := s.br.Peek(n)
	s.reading = false
	if err != nil {
		return err
	}
	fn(b)
	_, err = s.br.Discard(n)
	return err
}

// preempted is a gap between two looks at the clock of a polling reader
// (32 polls, a few µs) that says its thread lost its CPU meanwhile.
const preempted = 500 * time.Microsecond

// A reader that sees its thread lose the CPU while it polls (preempted)
// marks the host busy for busyHold: until then the process's readers
// sleep as soon as they have nothing to read, instead of polling. On a
// host whose CPUs other processes want (issue 33's CPU hogs) a poller
// shares its CPU with them and finds a frame only on its next turn,
// milliseconds later, while a reader asleep in the kernel is woken by the
// frame and preempts them: DDP's MLP at world 2 beside two hogs ran at
// 23-36k samples/s polling and 43-44k without. The first idle spell after
// busyHold polls again, and measures again.
//
// One starved spell does not mark the host busy: a second one must come
// at least confirmGap after it and within confirmWithin. The processes
// of a job starting up, or two ranks the scheduler put on one CPU for a
// moment, starve a poller once; a reader that parked on that one spell
// kept the job's ranks asleep on each other, and sleeping ranks the
// scheduler packs onto one CPU (each wakes the other where it runs), so
// the next spell starved too: in about a third of the short runs of a
// quiet benchmark every 64 KiB broadcast took 25-60 µs instead of 9.
// CPU hogs starve every spell, and are confirmed in the next; once the
// host was busy, within confirmWithin of the hold's end one starved
// spell marks it busy again.
const (
	busyHold      = 500 * time.Millisecond
	confirmGap    = 50 * time.Millisecond
	confirmWithin = time.Second
)

var (
	busyUntil    atomic.Int64 // UnixNano
	starvedSince atomic.Int64 // UnixNano of the first starved spell not yet confirmed
)

// markBusy records a starved spell at now, and marks the host busy when
// it confirms an earlier one.
func markBusy(now time.Time) {
	t := now.UnixNano()
	first := starvedSince.Load()
	switch {
	case t-busyUntil.Load() <= int64(confirmWithin):
		busyUntil.Store(now.Add(busyHold).UnixNano()) // busy lately: still
	case first == 0 || t-first > int64(confirmWithin):
		starvedSince.Store(t)
	case t-first >= int64(confirmGap):
		starvedSince.Store(0)
		busyUntil.Store(now.Add(busyHold).UnixNano())
	}
}

// cpuStarved reports whether the process ran for less than three
// quarters of the time since since (when processCPU was cpu): its
// threads waited for a CPU, other processes having it. A gap in a
// reader's polling alone does not say so: the rank's own goroutines may
// have had its P meanwhile, running or asleep in a futex wait that holds
// it (a sender waiting for a shared-memory slot: RPC's 64 echoes of 1 MiB
// in flight marked the host busy that way, and then 970 times a reader
// of the ring slept at once, for the runtime's network poller).
func cpuStarved(since time.Time, cpu time.Duration, now time.Time) bool {
	wall := now.Sub(since)
	return wall > 0 && processCPU()-cpu < wall*3/4
}

// processCPU is the CPU time the process's threads have used, and the
// time they have spent asleep in futex waits of their own.
func processCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano()) + futex.Slept()
}

// hostBusy reports whether the process's readers should sleep at once
// at now: a reader polling without yielding found its CPU taken
// (markBusy), or yielding readers lost their yields (readersHold).
func hostBusy(now time.Time) bool { return busyWith(now, &readersHold) }

// busyWith is hostBusy with the yielding readers' hold h.
func busyWith(now time.Time, h *cpuyield.Hold) bool {
	return now.UnixNano() < busyUntil.Load() || h.Held(now)
}

// fragSpin is how long a ring's reader polls for the next fragment of a
// message under way before it parks.
const fragSpin = 2 * time.Millisecond
