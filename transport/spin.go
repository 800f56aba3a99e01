package transport

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/godist/godist/internal/cgobusy"
	"github.com/godist/godist/internal/cpuyield"
)

// spinReader reads a socket by polling it for up to spin before parking
// the goroutine in the runtime's network poller.
//
// Why: on a virtual machine an idle vCPU halts, and the wake-up that
// follows a frame's arrival (interrupt, VM entry, the poller's thread, the
// scheduler) costs more than the frame's whole trip through loopback TCP.
// Polling keeps the reader on its CPU through the short gaps of a
// collective, the way MPI's progress engines do. Between polls the
// goroutine yields (runtime.Gosched), so other goroutines of the process
// (backward, the optimizer) lose nothing; only an otherwise idle P spins.
type spinReader struct {
	rc    syscall.RawConn
	spin  time.Duration
	yield bool
	// With yield, w wakes the reader when a receive is posted, and the
	// reader polls only while wanted (wake.go).
	w      *waker
	wanted func() bool
	// poll is s.pollOnce as a value, made once: a closure made at each
	// read escaped to the runtime's RawConn and cost an allocation a read
	// (two to four a collective). p is the buffer of the read under way,
	// n and err its results; only the connection's one reader reads.
	poll func(fd uintptr) bool
	p    []byte
	n    int
	err  error
}

func (s *spinReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := s.read(p)
		if s.w != nil && s.w.resume() && errors.Is(err, os.ErrDeadlineExceeded) {
			continue // a receive was posted: poll for its frame
		}
		return n, err
	}
}

func (s *spinReader) read(p []byte) (int, error) {
	s.p = p
	rerr := s.rc.Read(s.poll)
	n, err := s.n, s.err
	s.p, s.err = nil, nil
	switch {
	case rerr != nil:
		return 0, rerr
	case err != nil:
		return 0, os.NewSyscallError("read", err)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// pollOnce reads s.p from fd, polling while nothing is there until the
// spell ends (RawConn.Read's callback: true when done, false to wait for
// the socket to be readable and be called again).
func (s *spinReader) pollOnce(fd uintptr) bool {
	var start, last time.Time
	// The process's CPU time (processCPU) at cpuAt, early in the
	// spell, for judging a poll that lost its CPU (cpuStarved). It is
	// read only once the spell has lasted cpuSampleAfter: it is a
	// system call that sums the process's threads, and a spell of
	// a collective's gap ends sooner (see cpuSampleAfter).
	var cpuAt time.Time
	var startCPU time.Duration
	for {
		s.n, s.err = syscall.Read(int(fd), s.p)
		switch {
		case s.err == syscall.EINTR:
			continue
		case s.err != syscall.EAGAIN:
			return true
		case s.spin <= 0:
			return false
		}
		now := time.Now()
		if start.IsZero() {
			start = now
			if hostBusy(now) {
				// A reader lost its CPU polling lately: sleep at
				// once, parked (so that a receive posted for this
				// peer wakes it, as any parked reader).
				s.park(true)
				return false
			}
		} else if now.Sub(start) > s.spin || !s.yield && now.Sub(last) > preempted {
			// Park until the poller says it is readable: the time is
			// up, or the thread lost its CPU since the last poll
			// (other work wants it; see readRing and hostBusy).
			lost := !s.yield && now.Sub(last) > preempted
			if lost && !cpuAt.IsZero() && cpuStarved(cpuAt, startCPU, now) {
				markBusy(now)
			}
			s.park(lost)
			return false
		} else if s.w != nil && now.Sub(start) > yieldGrace && !s.wanted() {
			// A yielding reader with no receive to poll for parks,
			// unless one was posted as it parked.
			s.w.park()
			if !s.wanted() || !s.w.state.CompareAndSwap(readerParked, readerRunning) {
				return false
			}
			start = now
		}
		last = now
		if !s.yield && cpuAt.IsZero() && now.Sub(start) >= cpuSampleAfter {
			startCPU, cpuAt = processCPU(), now
		}
		if cgobusy.Saturated() {
			// The rank's CPU is in a C kernel, and this goroutine
			// would poll on a second thread beside it.
			cgobusy.Wait()
		} else {
			runtime.Gosched()
			if s.yield && cpuyield.YieldLost() {
				readersHold.Lost(time.Now())
				s.park(true)
				return false
			}
		}
	}
}

// cpuSampleAfter is how long a reader that polls without yielding polls
// before it reads the process's CPU time, against which a later gap in
// its polls is judged (cpuStarved): a gap before then parks the reader
// without marking the host busy. Read at each spell's start, it cost a
// system call a message: 3% of a barrier's CPU between 2 namespace hosts
// of one rank each.
const cpuSampleAfter = 20 * time.Microsecond

// park marks the reader as about to wait on its socket (when a waker
// wakes it), counting the park in loadParks when the machine's load
// caused it.
func (s *spinReader) park(byLoad bool) {
	if byLoad {
		loadParks.Add(1)
	}
	if s.w != nil {
		s.w.park()
	}
}

// A yielding socket reader (more ranks on the host than CPUs) that loses
// a yield to work that runs whole slices (cpuyield.YieldLost: a CPU hog,
// a rank computing) finds each frame a slice late, where a reader asleep
// is woken by it: so it stops polling, and tells readersHold, which after
// a second such yield holds the process's readers asleep at once for a
// while (hostBusy). 4 hosts of one rank on this machine's two CPUs
// with a hog on each: a barrier, broadcast or all-reduce of 8 B took
// 6.1-8.3 ms polling on, 0.3-2.6 ms so.
//
// The readers of shared-memory rings tell the same hold of their lost
// yields, but do not stop polling at one (readRing): their frames come
// microseconds apart, and the job's own ranks there hold the CPU for
// milliseconds now and then (a copy or a reduction of 1 MiB), so a reader
// that slept after each such yield paid a wake-up for frames it would
// have found polling (`godist bench --nproc 4`, quiet, five alternating
// runs: all-reduce of 1 MiB 1.10 ms against 0.88). Those yields come
// 150-250 ms apart in a quiet process, and never start a hold.
var readersHold cpuyield.Hold

// loadParks counts the socket readers' parks that the machine's load
// caused, not the polling policy: a lost yield, a poll that lost its
// CPU, a host held busy. Tests tell the two apart with it.
var loadParks atomic.Uint64

// socketReader returns what readLoop reads conn through: a spinReader when
// spin is positive and conn is a socket, else conn itself.
func socketReader(conn net.Conn, spin time.Duration, yield bool, w *waker, wanted func() bool) io.Reader {
	sc, ok := conn.(syscall.Conn)
	if !ok || spin <= 0 {
		return conn
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return conn
	}
	s := &spinReader{rc: rc, spin: spin, yield: yield, w: w, wanted: wanted}
	s.poll = s.pollOnce
	return s
}

// DefaultSpin is how long a reader polls its socket before parking, for a
// process that is one rank of a job (dist.Init uses it when its Options
// name no Spin), from localWorldSize (the ranks on this host, as
// LOCAL_WORLD_SIZE says under `godist run` and torchrun; 0 when unknown),
// gomaxprocs (each rank's, runtime.GOMAXPROCS) and numCPU (the host's,
// runtime.NumCPU). It reads nothing else:
//
//   - 100 ms, yielding between polls (DefaultPolling), when this host
//     runs more ranks than it has CPUs: a rank that polls without
//     yielding takes the CPU another rank needs (`godist bench` measured
//     world 4 on 2 CPUs 1.3x slower with 20 µs of polling, 2x with 50),
//     and one that parks pays a wake-up for each message;
//   - 100 ms when every rank's Ps fit in the CPUs (localWorldSize x
//     gomaxprocs <= numCPU, as `godist run` arranges), so that a rank with
//     CPUs of its own polls through the compute between one collective and
//     the next, as MPI's progress engines do, and parks only when its peers
//     have been quiet that long;
//   - 50 µs otherwise, and when localWorldSize is unknown: a poller there
//     would run on a P of its own, a thread that takes CPU from a rank's
//     compute, so it polls only through the short gaps of one collective
//     (world 2 on 2 CPUs: all_reduce of 8 B 30.5 -> 14.2 µs median).
//
// Why 100 ms: the reader's poll starts when its last frame ended, so it
// must outlast a training step for the rank to be polling, not halted,
// when the next collective waits. Measured, DDP's MLP world 2 on 2 vCPUs
// (1.1 ms of compute a step; 5 interleaved rounds): synchronisation
// overhead 40% polling 50 µs, 29% 1 ms, 22% 5 ms, 22% 20 ms, 22% 200 ms;
// again after the shared-memory all-reduce (2026-11-24, rounds with the
// vCPUs near each other): 1.09-1.14 ms a step polling 100 ms, 1.21-1.37
// polling 50 µs.
func DefaultSpin(localWorldSize, gomaxprocs, numCPU int) time.Duration {
	spin, _ := DefaultPolling(localWorldSize, gomaxprocs, numCPU)
	return spin
}

// DefaultPolling is DefaultSpin with the yield of TCPOptions.Yield: on a
// host that runs more ranks than it has CPUs a reader polls for
// YieldSpin, yielding its CPU between polls, as MPI's progress engines do
// there (mpi_yield_when_idle), rather than park: a parked rank pays a
// wake-up for every message, queued behind the ranks that share its CPU.
// A yielding reader polls only while a receive waits (wake.go), so that
// between collectives it leaves the CPU to the other ranks.
// Measured on 2 namespace hosts × 2 ranks, one CPU a host, 1 Gbit/s
// (issue 28): see the README's benchmarks. On a host with more than
// four ranks a CPU a reader parks at once: a rank that yields waits
// behind every other rank of its CPU at each poll, and 16 ranks on 2 CPUs
// took 0.15 s for three small all-reduces yielding, 0.03 s parking (64
// ranks: 1.0-1.3 s against 0.2 s; tools/initscale, issue 30).
func DefaultPolling(localWorldSize, gomaxprocs, numCPU int) (spin time.Duration, yield bool) {
	const short, long = 50 * time.Microsecond, 100 * time.Millisecond
	switch {
	case localWorldSize < 1:
		return short, false
	case localWorldSize > 4*numCPU:
		return 0, false
	case localWorldSize > numCPU:
		return YieldSpin, true
	case localWorldSize*gomaxprocs > numCPU:
		return short, false
	}
	return long, false
}

// YieldSpin is the longest a yielding reader polls before it parks while
// a receive waits: through a slow peer's compute, as the long spin of a
// rank with CPUs of its own.
const YieldSpin = 100 * time.Millisecond
