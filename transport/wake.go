package transport

import (
	"net"
	"runtime"
	"sync/atomic"
	"time"
)

// Yielding readers (TCPOptions.Yield) poll only while a receive from
// their peer waits.
//
// On a host with more ranks than CPUs, a reader that polls takes CPU from
// the ranks it shares a CPU with, and one that parks pays a wake-up for
// every frame, queued behind them. Polling through the whole of a
// training step, as a reader with a CPU of its own does, starves the
// ranks' other waits: world 4 on 2 CPUs, the same-host engine's 8 B
// all_reduce took 90-110 µs beside four processes' yielding readers,
// 19-34 µs with them parked (and 64 KiB 130-230 µs against 710 when
// they do not poll at all). So a yielding reader polls while a receive
// from its peer (or from any source) is posted, or for yieldGrace after
// its last frame, and parks otherwise; posting a receive wakes the
// parked reader it needs at once (a read deadline in the past ends a
// wait for the socket), so that it polls for the frame rather than wait
// for the kernel to wake it.

// yieldGrace is how long a yielding reader polls after a frame when no
// receive waits: a frame that the next round's receive takes often
// follows within it.
const yieldGrace = 50 * time.Microsecond

// Reader states for wakers.
const (
	readerRunning int32 = iota // polling or reading: nothing to do
	readerParked               // waiting on the socket
	readerWaking               // a poster is setting the read deadline
	readerWoken                // the deadline is set; the reader clears it
)

// waker lets a receive's poster wake a parked reader of one connection.
type waker struct {
	conn  net.Conn
	state atomic.Int32
	wakes atomic.Uint32 // parked waits a poster ended
}

// park marks the reader as about to wait on the socket.
func (w *waker) park() { w.state.CompareAndSwap(readerRunning, readerParked) }

// resume marks the reader as running again after a wait, and clears a
// read deadline a poster set: it reports whether one was.
func (w *waker) resume() bool {
	if w.state.CompareAndSwap(readerParked, readerRunning) {
		return false
	}
	if w.state.Load() == readerRunning {
		return false
	}
	for w.state.Load() != readerWoken { // the poster is between two stores
		runtime.Gosched()
	}
	w.conn.SetReadDeadline(time.Time{})
	w.state.Store(readerRunning)
	return true
}

// wake ends a parked reader's wait on the socket.
func (w *waker) wake() {
	if w == nil || !w.state.CompareAndSwap(readerParked, readerWaking) {
		return
	}
	w.conn.SetReadDeadline(time.Unix(1, 0))
	w.state.Store(readerWoken)
	w.wakes.Add(1)
}

// receiveWaits reports whether the yielding reader of peer r should
// poll: whether a receive from r, or from any source, is posted. The
// readers of other peers park. On a host with more ranks than CPUs a
// rank's slice of its CPU is the polls it makes before it yields, and a
// rank that polls every connection while it waits for one spends a read
// a connection a slice where one is wanted: on the lab's 4 hosts of one
// rank, two hosts to a CPU (three connections a rank), an 8 B all-reduce
// took 200-250 µs when every reader polled and 158-165 since (OpenMPI's
// 122), and on 2 hosts of 2 ranks a barrier 116-146 against 55-60 (82).
// A reader parked when
// its frame arrives before the receive that takes it costs little: the
// receive, when posted, wakes it (a read deadline in the past, inside
// this process), and it reads the frame the socket holds.
func (e *Endpoint) receiveWaits(r int) bool {
	return e.wantFrom[r].Load() > 0 || e.wantAny.Load() > 0
}

// wantLocked adds d to the receives posted from peer (1 for one posted,
// negative for those taken or withdrawn) and, when a count leaves zero,
// wakes the parked reader it concerns (every reader for AnySource). The
// caller holds e.mu.
func (e *Endpoint) wantLocked(peer int, d int32) {
	if e.wakers == nil {
		return
	}
	if peer == AnySource {
		if e.wantAny.Add(d) == d && d > 0 {
			for i := range e.wakers {
				if w := e.wakers[i].Load(); w != nil {
					w.wake()
				}
			}
		}
		return
	}
	if e.wantFrom[peer].Add(d) == d && d > 0 {
		if w := e.wakers[peer].Load(); w != nil {
			w.wake()
		}
	}
}
