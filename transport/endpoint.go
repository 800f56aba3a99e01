package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Endpoint is one rank's connections to the other ranks of a job and the
// matching of incoming frames to posted receives. It is safe for
// concurrent use; transfers of different calls proceed in parallel.
//
// A receive can be posted before its frame arrives: the frame's payload is
// then read straight into the receive's buffer. A frame that arrives first
// is kept until a receive takes it (one copy).
type Endpoint struct {
	rank, size int
	peers      peerTable    // the ranks used so far (peers.go)
	hosts      []string     // each rank's host label (Hosts); nil: all on one host
	log        *slog.Logger // never nil (see Logger)

	// connect makes the link to a rank that has none, on its first use
	// (linkTo): an in-process endpoint's links are made this way; a TCP
	// endpoint's are all made by NewTCP, and it has none.
	connect func(r int) error
	// od is a TCP endpoint's connecting on demand (ondemand.go), or nil.
	od *onDemand

	// When readers yield (wake.go): wakers wakes each peer's parked
	// reader, wantFrom counts the posted receives from each peer and
	// wantAny those from any source. Nil and unused otherwise.
	wakers   []atomic.Pointer[waker] // by rank
	wantFrom []atomic.Int32          // by rank
	wantAny  atomic.Int32

	// watchDone ends the watchdog (heartbeat.go).
	watchDone chan struct{}
	watchStop sync.Once

	// regionUse is held for reading while code outside the peer's reader
	// uses a peer's region (UsePeerRegions), and for writing while a
	// region is unmapped, so that no read meets unmapped memory.
	regionUse sync.RWMutex

	mu struct {
		sync.Mutex
		posted     []*pending
		unexpected []*message
		down       map[int]*PeerError
		closed     bool
		handlers   Handlers
		message    MessageHandler
		msgLimit   int64
		backlog    []*message               // messages that came before a handler
		watchers   map[int]func(*PeerError) // WatchPeers, by id
		nextWatch  int
		nextRegion int                  // regions made (region.go)
		regions    map[regionKey][]byte // peers' regions mapped here
	}
}

// notSent is a link's error for a send that gave up (its context ended)
// before any byte of the frame was written: unlike a frame cut short, it
// leaves the connection usable.
type notSent struct{ err error }

func (e notSent) Error() string { return e.err.Error() }
func (e notSent) Unwrap() error { return e.err }

// link moves whole frames to one peer.
type link interface {
	// send writes h and the payload parts as one frame. The link fills in
	// the payload checksum (where it can compute it while copying the
	// payload anyway) and encodes the header. Concurrent calls are
	// serialised by the link.
	send(ctx context.Context, h *Header, payload [][]byte) error
	// close ends the link; the peer sees the connection close.
	close() error
}

// message is a frame kept in memory: a data frame that came before a
// receive wanted it (mu.unexpected), or a message that came before its
// handler (mu.backlog).
type message struct {
	src int
	h   Header
	buf []byte
}

func newEndpoint(rank, size int) *Endpoint {
	e := &Endpoint{rank: rank, size: size, peers: newPeerTable(size), log: discard}
	e.mu.down = map[int]*PeerError{}
	return e
}

// Rank returns this endpoint's rank.
func (e *Endpoint) Rank() int { return e.rank }

// Size returns the number of ranks.
func (e *Endpoint) Size() int { return e.size }

// Hosts returns each rank's host label: equal for ranks on one host (the
// same kernel and /dev/shm, as shared memory needs), different otherwise.
// A TCP endpoint learns them at setup, whether shared memory is on or
// not; an in-process endpoint has every rank on one host unless
// Mesh.SetHosts says otherwise. The slice is the caller's.
func (e *Endpoint) Hosts() []string {
	if e.hosts == nil {
		return make([]string, e.size)
	}
	return append([]string(nil), e.hosts...)
}

// HostOf returns rank r's host label, as Hosts does without the copy.
func (e *Endpoint) HostOf(r int) string {
	if e.hosts == nil {
		return ""
	}
	return e.hosts[r]
}

// Logger returns the logger the endpoint reports its fallbacks to
// (TCPOptions.Logger), for the layers above to report theirs: never nil,
// a logger that discards when none was given.
func (e *Endpoint) Logger() *slog.Logger { return e.log }

// discard is the logger of an endpoint given none.
var discard = slog.New(slog.DiscardHandler)

// Handlers receive the events that are not answers to a receive.
type Handlers struct {
	// Control is called when a peer sends a control frame: the upper
	// layer's message about the group key.Group (a probe, or the news
	// that it failed). msg is the receiver's to keep.
	Control func(src int, key Key, msg []byte)
	// PeerDown is called once per peer when its connection fails or closes.
	PeerDown func(err *PeerError)
	// PeerUp is called once per peer when the link to it comes up: on
	// its first use, for an endpoint that connects on demand (see
	// Connected).
	PeerUp func(rank int)
	// Unexpected is called for each data frame that arrives before a
	// receive wants it (it is kept until one does). h is the reader's
	// and valid only during the call.
	Unexpected func(src int, h *Header)
}

// SetHandlers installs the event handlers (replacing earlier ones).
func (e *Endpoint) SetHandlers(h Handlers) {
	e.mu.Lock()
	e.mu.handlers = h
	e.mu.Unlock()
}

// WatchPeers adds fn to the listeners that hear, once per peer, that its
// connection failed or closed (as Handlers.PeerDown does, for a second
// layer over the same endpoint); stop removes it. Peers already down are
// not replayed: ask PeerErr.
func (e *Endpoint) WatchPeers(fn func(*PeerError)) (stop func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.watchers == nil {
		e.mu.watchers = map[int]func(*PeerError){}
	}
	id := e.mu.nextWatch
	e.mu.nextWatch++
	e.mu.watchers[id] = fn
	return func() {
		e.mu.Lock()
		delete(e.mu.watchers, id)
		e.mu.Unlock()
	}
}

// PeerErr returns the error that ended the connection to rank, or nil.
func (e *Endpoint) PeerErr(rank int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err, ok := e.mu.down[rank]; ok {
		return err
	}
	return nil
}

func (e *Endpoint) checkPeer(peer int, op string) error {
	if peer < 0 || peer >= e.size || peer == e.rank {
		return fmt.Errorf("transport: %s with rank %d: want another rank in [0, %d), this is rank %d", op, peer, e.size, e.rank)
	}
	return nil
}

// peerDown records that the connection to rank failed, fails every receive
// waiting on it (and every receive from any source), and tells the handler.
func (e *Endpoint) peerDown(rank int, cause error) {
	if rank >= 0 && rank < e.size && rank != e.rank {
		e.peers.make(rank).gone.Store(true)
	}
	e.mu.Lock()
	if _, ok := e.mu.down[rank]; ok || e.mu.closed {
		e.mu.Unlock()
		return
	}
	if cause == nil || errors.Is(cause, io.ErrUnexpectedEOF) {
		cause = io.EOF
	}
	perr := &PeerError{Rank: rank, Err: cause}
	e.mu.down[rank] = perr
	var failed []*pending
	kept := e.mu.posted[:0]
	for _, p := range e.mu.posted {
		if p.peer == rank || p.peer == AnySource {
			p.claimed = true
			e.wantLocked(p.peer, -1)
			failed = append(failed, p)
		} else {
			kept = append(kept, p)
		}
	}
	e.mu.posted = kept
	fn := e.mu.handlers.PeerDown
	watchers := make([]func(*PeerError), 0, len(e.mu.watchers))
	for _, w := range e.mu.watchers {
		watchers = append(watchers, w)
	}
	e.mu.Unlock()
	for _, p := range failed {
		p.finish(rank, perr)
	}
	if fn != nil {
		fn(perr)
	}
	for _, w := range watchers {
		w(perr)
	}
}

// isClosed reports whether Close has been called.
func (e *Endpoint) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mu.closed
}

// closeTimeout bounds the goodbye frames Close sends.
const closeTimeout = 2 * time.Second

// Close says goodbye to every peer, closes the connections and fails every
// pending receive with ErrClosed.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		return nil
	}
	down := map[int]bool{}
	for r := range e.mu.down {
		down[r] = true
	}
	e.mu.Unlock()
	e.stopWatching()
	if e.od != nil {
		e.od.close(true)
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	e.peers.each(func(r int, p *peer) {
		if l := p.linkOf(); l != nil && !down[r] {
			_ = l.send(ctx, &Header{Kind: KindBye}, nil)
		}
	})
	e.mu.Lock()
	e.mu.closed = true
	posted := e.mu.posted
	for _, p := range posted {
		e.wantLocked(p.peer, -1)
	}
	e.mu.posted = nil
	e.mu.unexpected = nil
	e.mu.Unlock()
	for _, p := range posted {
		p.finish(-1, ErrClosed)
	}
	var first error
	e.peers.each(func(_ int, p *peer) {
		if l := p.linkOf(); l != nil {
			if err := l.close(); err != nil && first == nil {
				first = err
			}
		}
	})
	e.unmapPeerRegions()
	return first
}
