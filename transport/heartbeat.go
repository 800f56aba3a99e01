package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"time"
)

// Finding a silent peer.
//
// A host whose link goes down, or whose processes stop (SIGSTOP), sends
// no FIN and no RST: its connections stay open, and a rank waiting for
// its frames would wait until the collective's timeout (30 minutes by
// default). So every rank sends a heartbeat (a frame without payload) to
// each peer it has sent nothing to for a while, and a watchdog counts what
// each connection's reader reads: a peer that sends nothing at all for
// TCPOptions.PeerTimeout is declared lost. Its connection is closed, and
// every receive from it fails with a *PeerError whose cause is a
// *SilentError naming its host and the ranks there.
//
// What counts is any byte read, not only heartbeats: a reader in the
// middle of a 64 MiB payload on a saturated link reads all along, so a
// heartbeat queued behind that payload is no false alarm. The watchdog
// judges only the time it was running itself: after a pause of its own
// process (stopped, or starved of CPU) it starts its count over rather
// than blame peers whose frames wait unread in its socket buffers.

// DefaultPeerTimeout is TCPOptions.PeerTimeout when zero.
const DefaultPeerTimeout = 15 * time.Second

// heartbeatsPerTimeout is how many heartbeat intervals make a timeout: a
// quiet peer hears from this rank every PeerTimeout / heartbeatsPerTimeout.
const heartbeatsPerTimeout = 5

// SilentError is the cause of a *PeerError for a peer that sent nothing,
// not even a heartbeat, for Silence: its host is down or cut off from
// the network, or its process is stopped.
type SilentError struct {
	Rank    int
	Silence time.Duration
	// Host is the peer's address as this rank's connection to it sees it
	// ("" when unknown). HostRanks lists the ranks on that host (by the
	// host labels the ranks published), the peer among them; just the
	// peer when it shares this rank's host (SameHost), which is up.
	Host      string
	HostRanks []int
	SameHost  bool
}

func (e *SilentError) Error() string {
	const knob = "(TCPOptions.PeerTimeout, dist.Options.PeerTimeout or GODIST_PEER_TIMEOUT set how long a peer may be silent)"
	if e.SameHost {
		return fmt.Sprintf("nothing from rank %d, on this host, not even a heartbeat, for %v: its process is stopped or stuck %s",
			e.Rank, e.Silence.Round(time.Millisecond), knob)
	}
	host := "its host"
	if e.Host != "" {
		host = "host " + e.Host
	}
	ranks := make([]string, len(e.HostRanks))
	for i, r := range e.HostRanks {
		ranks[i] = fmt.Sprint(r)
	}
	return fmt.Sprintf("nothing from rank %d, not even a heartbeat, for %v: %s (ranks %s) is down, cut off from the network, or its processes are stopped %s",
		e.Rank, e.Silence.Round(time.Millisecond), host, strings.Join(ranks, ", "), knob)
}

// ErrSilent matches a *SilentError with errors.Is.
var ErrSilent = errors.New("peer silent")

func (e *SilentError) Is(target error) bool { return target == ErrSilent }

// liveness is what the heartbeats and the watchdog keep per peer.
type liveness struct {
	heard   atomic.Uint64 // reads from the peer's connection (readers add)
	sent    atomic.Uint64 // frames sent to the peer (sendKind adds)
	beating atomic.Bool   // a heartbeat to the peer is under way
}

// countingReader counts the reads that brought bytes.
type countingReader struct {
	r     io.Reader
	heard *atomic.Uint64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.heard.Add(1)
	}
	return n, err
}

// watchdog is the pure core of the watchdog: fed, at each tick, the
// time and each peer's counts, it says which peers to send a heartbeat
// and which to declare lost.
type watchdog struct {
	timeout, interval   time.Duration
	lastHeard, lastSent []uint64
	since               []time.Time // when each peer was last heard (or the count began)
	prev                time.Time   // the last tick
}

func newWatchdog(timeout time.Duration, peers int, now time.Time) *watchdog {
	w := &watchdog{timeout: timeout, interval: max(timeout/heartbeatsPerTimeout, time.Millisecond),
		lastHeard: make([]uint64, peers), lastSent: make([]uint64, peers), since: make([]time.Time, peers), prev: now}
	for i := range w.since {
		w.since[i] = now
	}
	return w
}

// peerCounts is one peer's state at a tick: skip for a peer not watched
// (this rank, a peer already gone), and its liveness counts.
type peerCounts struct {
	skip        bool
	heard, sent uint64
}

// tick returns the peers to send a heartbeat to (nothing sent to them
// since the last tick) and those silent for the timeout, with how long.
func (w *watchdog) tick(now time.Time, peers []peerCounts) (beat []int, lost []int, silence []time.Duration) {
	if now.Sub(w.prev) > 2*w.interval {
		// This process did not run for a while: what its peers sent
		// meanwhile waits unread. Start the count over.
		for i := range w.since {
			w.since[i] = now
		}
	}
	w.prev = now
	for p, c := range peers {
		if c.skip {
			// Not watched (yet: a peer connected later starts its
			// count when it is).
			w.lastHeard[p], w.since[p] = c.heard, now
			continue
		}
		if c.heard != w.lastHeard[p] {
			w.lastHeard[p], w.since[p] = c.heard, now
		} else if d := now.Sub(w.since[p]); d >= w.timeout {
			lost, silence = append(lost, p), append(silence, d)
			continue
		}
		if c.sent != w.lastSent[p] {
			w.lastSent[p] = c.sent
		} else {
			beat = append(beat, p)
		}
	}
	return beat, lost, silence
}

// watch runs the heartbeats and the watchdog until done closes.
func (e *Endpoint) watch(timeout time.Duration, done <-chan struct{}) {
	w := newWatchdog(timeout, e.size, time.Now())
	t := time.NewTicker(w.interval)
	defer t.Stop()
	counts := make([]peerCounts, e.size)
	conns := make([]net.Conn, e.size)
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		for p := range counts {
			conns[p] = e.connOf(p)
			if conns[p] == nil {
				counts[p] = peerCounts{skip: true}
				continue
			}
			pp := e.peers.make(p)
			counts[p] = peerCounts{skip: pp.gone.Load(), heard: pp.live.heard.Load(), sent: pp.live.sent.Load()}
		}
		beat, lost, silence := w.tick(time.Now(), counts)
		for i, p := range lost {
			e.lose(p, silence[i], conns[p])
		}
		for _, p := range beat {
			lv := &e.peers.make(p).live
			if !lv.beating.CompareAndSwap(false, true) {
				continue
			}
			go func() {
				// It waits behind a frame being written (whose bytes tell
				// the peer this rank lives), and ends when the
				// connection does.
				_ = e.sendKind(context.Background(), KindHeartbeat, p, Key{}, 0, nil)
				lv.beating.Store(false)
			}()
		}
	}
}

// connOf returns the connection to peer p, or nil: none made (yet), or
// an in-process link.
func (e *Endpoint) connOf(p int) net.Conn {
	if l := e.tcpLinkOf(p); l != nil {
		return l.conn
	}
	return nil
}

// lose declares peer p lost after silence: its connection closes, which
// fails what waits on it, with a SilentError for cause.
func (e *Endpoint) lose(p int, silence time.Duration, conn net.Conn) {
	se := &SilentError{Rank: p, Silence: silence, HostRanks: []int{p}}
	if a, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		se.Host = a.IP.String()
	}
	if e.hosts != nil {
		se.SameHost = e.hosts[p] == e.hosts[e.rank]
		if !se.SameHost {
			se.HostRanks = se.HostRanks[:0]
			for r, h := range e.hosts {
				if h == e.hosts[p] {
					se.HostRanks = append(se.HostRanks, r)
				}
			}
		}
	}
	e.log.Warn("transport: peer lost", "rank", p, "silence", silence, "host", se.Host, "host_ranks", se.HostRanks)
	e.peerDown(p, se)
	conn.Close()
}

// stopWatching ends the watchdog, if it runs.
func (e *Endpoint) stopWatching() {
	e.watchStop.Do(func() {
		if e.watchDone != nil {
			close(e.watchDone)
		}
	})
}
