package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/godist/godist/internal/crc32c"
)

// AnySource, as a receive's peer, accepts a matching frame from any rank.
const AnySource = -1

// PeerError reports that the connection to a rank failed or was closed:
// every pending and later transfer with that rank fails with it.
type PeerError struct {
	Rank int   // the peer
	Err  error // what happened (io.EOF: the peer's process ended)
}

func (e *PeerError) Error() string {
	if errors.Is(e.Err, ErrPeerClosed) {
		return fmt.Sprintf("transport: rank %d closed its connections (it called Destroy or exited cleanly)", e.Rank)
	}
	if errors.Is(e.Err, ErrSilent) {
		return fmt.Sprintf("transport: rank %d lost: %v", e.Rank, e.Err)
	}
	if errors.Is(e.Err, ErrFrame) {
		return fmt.Sprintf("transport: connection to rank %d dropped: it sent a malformed frame: %v (the stream was corrupted, or the ranks run different godist builds; the process may well be alive)", e.Rank, e.Err)
	}
	return fmt.Sprintf("transport: connection to rank %d lost: %v (the process probably died; check its log)", e.Rank, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// ErrPeerClosed is a PeerError's cause when the peer said goodbye first.
var ErrPeerClosed = errors.New("peer closed")

// ErrClosed is returned by an Endpoint that has been closed.
var ErrClosed = errors.New("transport: endpoint closed")

// FingerprintError reports a receive that found a frame from a different
// call than the one it expected: the ranks have issued collectives in
// different orders (a desync).
//
// The transport does not interpret fingerprints; dist decodes them into
// the two calls' descriptions.
type FingerprintError struct {
	Src  int
	Key  Key
	Got  uint64 // the sender's fingerprint
	Want uint64 // the receiver's
}

func (e *FingerprintError) Error() string {
	return fmt.Sprintf("transport: %v from rank %d has fingerprint %#x, the receive expects %#x", e.Key, e.Src, e.Got, e.Want)
}

// LengthError reports a frame whose payload length differs from the
// receive buffer's.
type LengthError struct {
	Src       int
	Key       Key
	Got, Want int64
}

func (e *LengthError) Error() string {
	return fmt.Sprintf("transport: %v from rank %d carries %d bytes, the receive expects %d", e.Key, e.Src, e.Got, e.Want)
}

// Match is a posted receive's test for a frame. It is called with the
// endpoint's lock held and must not block or call back into the endpoint;
// returning true takes the frame (the function may record that, since a
// frame is offered to a receive at most once).
type Match func(src int, h *Header) bool

// ExactMatch matches the frame with key k from peer (or AnySource).
func ExactMatch(peer int, k Key) Match {
	return func(src int, h *Header) bool {
		return (peer == AnySource || src == peer) && h.Key == k
	}
}

// Handlers receive the events that are not answers to a receive.
type Handlers struct {
	// Control is called when a peer sends a control frame: the upper
	// layer's message about the group key.Group (a probe, or the news
	// that it failed). msg is the receiver's to keep.
	Control func(src int, key Key, msg []byte)
	// PeerDown is called once per peer when its connection fails or closes.
	PeerDown func(err *PeerError)
	// Unexpected is called for each data frame that arrives before a
	// receive wants it (it is kept until one does).
	Unexpected func(src int, h *Header)
}

// closeTimeout bounds the goodbye frames Close sends.
const closeTimeout = 2 * time.Second

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

// Endpoint is one rank's connections to the other ranks of a job and the
// matching of incoming frames to posted receives. It is safe for
// concurrent use; transfers of different calls proceed in parallel.
//
// A receive can be posted before its frame arrives: the frame's payload is
// then read straight into the receive's buffer. A frame that arrives first
// is kept until a receive takes it (one copy).
type Endpoint struct {
	rank, size int
	links      []link
	gone       []atomic.Bool // set when the peer's connection fails
	spares     []spare       // each peer's spare message buffer (spare.go)
	hosts      []string      // each rank's host label (Hosts); nil: all on one host
	log        *slog.Logger  // never nil (see Logger)

	// wanted counts the posted receives; wakers wakes each peer's parked
	// reader, when readers yield (wake.go).
	wanted atomic.Int32
	wakers []*waker

	// live is each peer's heartbeat and watchdog state (heartbeat.go);
	// watchDone ends the watchdog.
	live      []liveness
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

type pending struct {
	peer  int
	match Match
	fp    uint64
	buf   []byte // the payload's destination, or nil with sink
	sink  Sink
	n     int // the payload's length
	done  chan struct{}
	// set once matched (under the endpoint lock), then filled by the reader
	claimed bool
	src     int
	err     error
}

type message struct {
	src int
	h   Header
	buf []byte
}

func newEndpoint(rank, size int) *Endpoint {
	e := &Endpoint{rank: rank, size: size, links: make([]link, size), gone: make([]atomic.Bool, size), spares: make([]spare, size), live: make([]liveness, size), log: discard}
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

// Logger returns the logger the endpoint reports its fallbacks to
// (TCPOptions.Logger), for the layers above to report theirs: never nil,
// a logger that discards when none was given.
func (e *Endpoint) Logger() *slog.Logger { return e.log }

// discard is the logger of an endpoint given none.
var discard = slog.New(slog.DiscardHandler)

// SetHandlers installs the event handlers (replacing earlier ones).
func (e *Endpoint) SetHandlers(h Handlers) {
	e.mu.Lock()
	e.mu.handlers = h
	e.mu.Unlock()
}

// MessageHandler receives a KindMessage frame from src: its key,
// fingerprint and payload, which is the handler's to keep (8-byte
// aligned). A payload longer than the handler's limit is not read whole:
// msg holds its first MessagePrefix bytes (unchecked) and size says how
// long it was, so that the handler can refuse it by name. The handler
// runs on the connection's reader and must not block.
type MessageHandler func(src int, key Key, fp uint64, msg []byte, size int64)

// MessagePrefix is how much of an over-limit message its handler sees.
const MessagePrefix = 4 << 10

// SetMessageHandler installs the handler of KindMessage frames and the
// most bytes one may carry (a larger one is skipped, its prefix handed
// over). Messages that arrive while no handler is installed are kept,
// up to MessageBacklog of them (a peer may be ready before this rank
// is), and handed to the handler when it is installed; later ones are
// dropped.
func (e *Endpoint) SetMessageHandler(limit int64, fn MessageHandler) {
	e.mu.Lock()
	e.mu.message, e.mu.msgLimit = fn, limit
	backlog := e.mu.backlog
	e.mu.backlog = nil
	e.mu.Unlock()
	if fn == nil {
		return
	}
	for _, m := range backlog {
		b := m.buf
		if m.h.Len > limit && len(b) > MessagePrefix {
			b = b[:MessagePrefix]
		}
		fn(m.src, m.h.Key, m.h.FP, b, m.h.Len)
	}
}

func (e *Endpoint) msgLimit() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mu.msgLimit
}

// MessageBacklog bounds the messages kept while no handler is installed.
const MessageBacklog = 1024

// SendMessage sends the parts as one KindMessage frame to peer: the
// message handler there receives it whole.
func (e *Endpoint) SendMessage(ctx context.Context, peer int, key Key, fp uint64, parts ...[]byte) error {
	return e.sendKind(ctx, KindMessage, peer, key, fp, parts)
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

// Send writes one frame to peer with the call's key and fingerprint; its
// payload is the concatenation of parts, written with one vectored write
// after the header (the parts are not copied). It returns when the bytes
// have been handed to the operating system, not when the peer has read
// them. The caller must not modify parts until Send returns.
func (e *Endpoint) Send(ctx context.Context, peer int, key Key, fp uint64, parts ...[]byte) error {
	return e.sendKind(ctx, KindData, peer, key, fp, parts)
}

// Control sends a control frame for key to peer carrying msg (at most
// 64 KiB); the peer's Handlers.Control receives it.
func (e *Endpoint) Control(ctx context.Context, peer int, key Key, msg []byte) error {
	return e.sendKind(ctx, KindControl, peer, key, 0, [][]byte{msg})
}

func (e *Endpoint) sendKind(ctx context.Context, kind Kind, peer int, key Key, fp uint64, parts [][]byte) error {
	if err := e.checkPeer(peer, "send"); err != nil {
		return err
	}
	e.mu.Lock()
	closed, down := e.mu.closed, e.mu.down[peer]
	e.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if down != nil {
		return down
	}
	var n int64
	for _, p := range parts {
		n += int64(len(p))
	}
	h := Header{Kind: kind, Key: key, FP: fp, Len: n}
	if kind != KindHeartbeat {
		defer e.live[peer].sent.Add(1)
	}
	if err := e.links[peer].send(ctx, &h, parts); err != nil {
		var ns notSent
		if errors.As(err, &ns) {
			// Given up before any of the frame left: the stream is intact.
			return fmt.Errorf("transport: send of %v to rank %d: %w", key, peer, ns.err)
		}
		if ctx.Err() != nil {
			// A frame cut short leaves the stream unusable.
			e.peerDown(peer, fmt.Errorf("send cancelled mid-frame: %w", ctx.Err()))
			return fmt.Errorf("transport: send of %v to rank %d: %w", key, peer, ctx.Err())
		}
		if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
			// The peer closed with our bytes unread, and its kernel
			// answered with a reset. What it sent before closing (a
			// goodbye, its group's notice of which rank failed) may still
			// wait in our receive queue and says more than the reset:
			// give the reader a moment to get to it.
			e.awaitPeerDown(peer, resetGrace)
		}
		e.peerDown(peer, err)
		return e.PeerErr(peer)
	}
	return nil
}

// resetGrace is how long a send that met a reset waits for the reader's
// account of the peer's end.
const resetGrace = 200 * time.Millisecond

// awaitPeerDown waits until peer's connection is marked down, or d.
func (e *Endpoint) awaitPeerDown(peer int, d time.Duration) {
	end := time.Now().Add(d)
	for !e.gone[peer].Load() && time.Now().Before(end) {
		time.Sleep(100 * time.Microsecond)
	}
}

// Recv waits for a frame from peer (or AnySource) that match accepts, and
// reads its payload into buf, whose length must equal the payload's. fp is
// the receiver's fingerprint of the call: a frame whose fingerprint differs
// fails the receive with a *FingerprintError. It returns the sender's rank.
// Recv is Post followed by Wait.
func (e *Endpoint) Recv(ctx context.Context, peer int, match Match, fp uint64, buf []byte) (int, error) {
	return e.Post(peer, match, fp, buf).Wait(ctx)
}

// Receive is a posted receive.
type Receive struct {
	e   *Endpoint
	p   *pending
	src int   // when completed at posting time
	err error // when completed (or failed) at posting time
	now bool
}

// Post registers a receive without blocking: a frame that match accepts,
// arriving from now on, is read straight into buf; one that already
// arrived is copied into it. The caller must not touch buf until Wait
// returns, and must call Wait.
func (e *Endpoint) Post(peer int, match Match, fp uint64, buf []byte) *Receive {
	return e.post(&pending{peer: peer, match: match, fp: fp, buf: buf, n: len(buf)})
}

// Sink consumes a payload piece by piece, in order, as it is read: b is
// the part at byte offset off, valid only during the call. A sink runs on
// the goroutine that reads the frame (or the one that posts the receive,
// when the frame arrived first); it must not block.
type Sink func(off int, b []byte)

// SinkBlock is the most a Sink is handed at once.
const SinkBlock = viewMax

// PostSink is Post for a payload of n bytes that sink consumes instead of
// a buffer: e.g. a reduction that adds each piece to a tensor while the
// piece is in cache, straight from the socket's buffer or the
// shared-memory slot. Pieces hold whole multiples of 16 bytes, except the
// last. The sink runs before Wait returns; on a checksum or connection
// error it may have seen part or all of a corrupt payload.
func (e *Endpoint) PostSink(peer int, match Match, fp uint64, n int, sink Sink) *Receive {
	return e.post(&pending{peer: peer, match: match, fp: fp, sink: sink, n: n})
}

func (e *Endpoint) post(p *pending) *Receive {
	peer, match := p.peer, p.match
	r := &Receive{e: e}
	if peer != AnySource {
		if err := e.checkPeer(peer, "receive"); err != nil {
			r.now, r.src, r.err = true, -1, err
			return r
		}
	}
	p.done = make(chan struct{})
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		r.now, r.src, r.err = true, -1, ErrClosed
		return r
	}
	// A frame that arrived before the receive was posted.
	for i, m := range e.mu.unexpected {
		if (peer == AnySource || m.src == peer) && match(m.src, &m.h) {
			e.mu.unexpected = append(e.mu.unexpected[:i], e.mu.unexpected[i+1:]...)
			more := e.rematchLocked()
			e.mu.Unlock()
			complete(more)
			r.now, r.src = true, m.src
			if r.err = p.check(m.src, &m.h); r.err == nil {
				p.take(m.buf)
			}
			return r
		}
	}
	if err := e.downFor(peer); err != nil {
		e.mu.Unlock()
		r.now, r.src, r.err = true, -1, err
		return r
	}
	e.mu.posted = append(e.mu.posted, p)
	e.wantLocked(1)
	e.mu.Unlock()
	r.p = p
	return r
}

// Done reports whether the receive has completed (Wait would not block).
func (r *Receive) Done() bool {
	if r.now {
		return true
	}
	select {
	case <-r.p.done:
		return true
	default:
		return false
	}
}

// Wait blocks until the posted receive completes and returns the sender's
// rank. If ctx ends first, Wait withdraws the receive and returns ctx's
// error (unless the frame is already being read into the buffer, in which
// case it waits for that to finish).
func (r *Receive) Wait(ctx context.Context) (int, error) {
	if r.now {
		return r.src, r.err
	}
	p := r.p
	select {
	case <-p.done:
		return p.src, p.err
	case <-ctx.Done():
	}
	e := r.e
	e.mu.Lock()
	if !p.claimed {
		e.removePostedLocked(p)
		e.mu.Unlock()
		return -1, fmt.Errorf("transport: receive from %s: %w", peerName(p.peer), ctx.Err())
	}
	e.mu.Unlock()
	<-p.done // the reader is filling buf; it finishes or fails soon
	return p.src, p.err
}

func peerName(peer int) string {
	if peer == AnySource {
		return "any rank"
	}
	return fmt.Sprintf("rank %d", peer)
}

// downFor returns the error that makes a receive from peer impossible.
func (e *Endpoint) downFor(peer int) error {
	if peer != AnySource {
		if err := e.mu.down[peer]; err != nil {
			return err
		}
		return nil
	}
	for _, err := range e.mu.down {
		return err
	}
	return nil
}

func (e *Endpoint) removePostedLocked(p *pending) {
	for i, q := range e.mu.posted {
		if q == p {
			e.mu.posted = append(e.mu.posted[:i], e.mu.posted[i+1:]...)
			e.wantLocked(-1)
			return
		}
	}
}

// check validates a matched frame against the receive.
func (p *pending) check(src int, h *Header) error {
	if h.FP != p.fp {
		return &FingerprintError{Src: src, Key: h.Key, Got: h.FP, Want: p.fp}
	}
	if h.Len != int64(p.n) {
		return &LengthError{Src: src, Key: h.Key, Got: h.Len, Want: int64(p.n)}
	}
	return nil
}

// take hands a payload kept in memory to the receive.
func (p *pending) take(b []byte) {
	if p.sink == nil {
		copy(p.buf, b)
		return
	}
	for off := 0; off < len(b); off += SinkBlock {
		p.sink(off, b[off:min(off+SinkBlock, len(b))])
	}
}

// fill reads the payload into the receive's buffer or sink and returns its
// CRC32C, computed block by block as it is read, while the block is in
// cache (one pass over memory instead of two).
func (p *pending) fill(in payload) (uint32, error) {
	if p.sink == nil {
		return readSum(in, p.buf)
	}
	var c uint32
	sum := !unchecked(in)
	for off := 0; off < p.n; off += SinkBlock {
		n := min(SinkBlock, p.n-off)
		err := in.view(n, func(b []byte) {
			if sum {
				c = crc32c.Update(c, b)
			}
			p.sink(off, b)
		})
		if err != nil {
			return 0, err
		}
	}
	return c, nil
}

// payload is an incoming frame's payload, read front to back.
type payload interface {
	// read fills b with the next len(b) bytes.
	read(b []byte) error
	// view hands the next n (at most viewMax) bytes to fn where they lie,
	// without copying them out; b is valid only during fn.
	view(n int, fn func(b []byte)) error
}

// viewMax is the most a payload's view hands out at once (the size of a
// connection's read buffer).
const viewMax = 64 << 10

// deliver hands an incoming frame from src to a posted receive or keeps it.
// in holds the payload (exactly h.Len bytes); it is read exactly once
// unless deliver returns an error, which means the connection is unusable.
func (e *Endpoint) deliver(src int, h *Header, in payload) error {
	switch h.Kind {
	case KindControl:
		msg := make([]byte, min(h.Len, MaxControl))
		if h.Len > int64(len(msg)) {
			return fmt.Errorf("%w: control message of %d bytes", ErrFrame, h.Len)
		}
		if err := in.read(msg); err != nil {
			return err
		}
		if Checksum(msg) != h.CRC {
			return fmt.Errorf("%w: payload checksum mismatch", ErrFrame)
		}
		e.mu.Lock()
		fn := e.mu.handlers.Control
		e.mu.Unlock()
		if fn != nil {
			fn(src, h.Key, msg)
		}
		return nil
	case KindMessage:
		return e.deliverMessage(src, h, in)
	case KindHeartbeat:
		return nil // no payload; its reader counted it (heartbeat.go)
	case KindBye:
		if err := in.read(make([]byte, min(h.Len, 1<<10))); err != nil {
			return err
		}
		e.peerDown(src, ErrPeerClosed)
		return nil
	}

	e.mu.Lock()
	p := e.claimLocked(src, h)
	var more []match
	if p != nil {
		more = e.rematchLocked()
	}
	e.mu.Unlock()
	complete(more)
	if p != nil {
		if err := p.check(src, h); err != nil {
			// Drain the payload and fail the receive; the stream is fine.
			if derr := in.read(make([]byte, h.Len)); derr != nil {
				p.finish(src, err)
				return derr
			}
			p.finish(src, err)
			return nil
		}
		sum, err := p.fill(in)
		if err != nil {
			p.finish(src, &PeerError{Rank: src, Err: err})
			return err
		}
		if sum != h.CRC {
			err := fmt.Errorf("%w: payload checksum mismatch on %v from rank %d", ErrFrame, h.Key, src)
			p.finish(src, err)
			return err
		}
		p.finish(src, nil)
		return nil
	}
	// Nobody is waiting yet: keep a copy.
	buf := make([]byte, h.Len)
	sum, err := readSum(in, buf)
	if err != nil {
		return err
	}
	if sum != h.CRC {
		return fmt.Errorf("%w: payload checksum mismatch on %v from rank %d", ErrFrame, h.Key, src)
	}
	e.mu.Lock()
	if p := e.claimLocked(src, h); p != nil {
		more := e.rematchLocked()
		e.mu.Unlock()
		complete(more)
		if err := p.check(src, h); err != nil {
			p.finish(src, err)
			return nil
		}
		p.take(buf)
		p.finish(src, nil)
		return nil
	}
	e.mu.unexpected = append(e.mu.unexpected, &message{src: src, h: *h, buf: buf})
	fn := e.mu.handlers.Unexpected
	e.mu.Unlock()
	if fn != nil {
		fn(src, h)
	}
	return nil
}

// match pairs a posted receive with a kept frame.
type match struct {
	p *pending
	m *message
}

// rematchLocked offers the kept frames to the posted receives again. A
// Match with state (point-to-point order counters) may accept a kept frame
// only after another frame was taken, e.g. when frames arrived out of
// order.
func (e *Endpoint) rematchLocked() []match {
	var out []match
	for progress := true; progress && len(e.mu.unexpected) > 0 && len(e.mu.posted) > 0; {
		progress = false
		for i, m := range e.mu.unexpected {
			if p := e.claimLocked(m.src, &m.h); p != nil {
				e.mu.unexpected = append(e.mu.unexpected[:i], e.mu.unexpected[i+1:]...)
				out = append(out, match{p, m})
				progress = true
				break
			}
		}
	}
	return out
}

// complete finishes receives paired with kept frames.
func complete(ms []match) {
	for _, x := range ms {
		if err := x.p.check(x.m.src, &x.m.h); err != nil {
			x.p.finish(x.m.src, err)
			continue
		}
		x.p.take(x.m.buf)
		x.p.finish(x.m.src, nil)
	}
}

// claimLocked finds and removes the first posted receive that takes the
// frame.
func (e *Endpoint) claimLocked(src int, h *Header) *pending {
	for i, p := range e.mu.posted {
		if (p.peer == AnySource || p.peer == src) && p.match(src, h) {
			p.claimed = true
			e.mu.posted = append(e.mu.posted[:i], e.mu.posted[i+1:]...)
			e.wantLocked(-1)
			return p
		}
	}
	return nil
}

func (p *pending) finish(src int, err error) {
	p.src, p.err = src, err
	close(p.done)
}

// peerDown records that the connection to rank failed, fails every receive
// waiting on it (and every receive from any source), and tells the handler.
func (e *Endpoint) peerDown(rank int, cause error) {
	if rank >= 0 && rank < len(e.gone) {
		e.gone[rank].Store(true)
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
			e.wantLocked(-1)
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

// deliverMessage reads a KindMessage frame's payload and hands it to the
// message handler.
func (e *Endpoint) deliverMessage(src int, h *Header, in payload) error {
	e.mu.Lock()
	fn, limit := e.mu.message, e.mu.msgLimit
	e.mu.Unlock()
	var buf []byte
	if fn != nil && h.Len > limit || fn == nil && h.Len > MessagePrefix {
		// Too long for the handler (or for the backlog): only its prefix
		// is kept.
		buf = make([]byte, min(h.Len, MessagePrefix))
		if err := in.read(buf); err != nil {
			return err
		}
		if err := skip(in, h.Len-int64(len(buf))); err != nil {
			return err
		}
	} else {
		buf = e.spares[src].get(int(h.Len))
		sum, err := readSum(in, buf)
		if err != nil {
			return err
		}
		if sum != h.CRC {
			return fmt.Errorf("%w: payload checksum mismatch on message %v from rank %d", ErrFrame, h.Key, src)
		}
	}
	e.handMessage(src, h.Key, h.FP, buf, h.Len)
	return nil
}

// handMessage gives a received message (whole, or its prefix when
// len(buf) < size) to the handler, or keeps it until there is one.
func (e *Endpoint) handMessage(src int, key Key, fp uint64, buf []byte, size int64) {
	e.mu.Lock()
	fn, limit := e.mu.message, e.mu.msgLimit
	if fn == nil {
		if len(e.mu.backlog) < MessageBacklog {
			e.mu.backlog = append(e.mu.backlog, &message{src: src, h: Header{Kind: KindMessage, Key: key, FP: fp, Len: size}, buf: buf})
		} else {
			e.log.Warn("transport: message dropped: no handler and the backlog is full", "from", src, "bytes", size)
		}
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	if size > limit && int64(len(buf)) > MessagePrefix {
		buf = buf[:MessagePrefix]
	}
	fn(src, key, fp, buf, size)
}

// skip reads and drops n bytes of in.
func skip(in payload, n int64) error {
	for n > 0 {
		k := min(n, viewMax)
		if err := in.view(int(k), func([]byte) {}); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// alloc8 returns n bytes whose start is 8-byte aligned, so that the
// elements of tensors inside them can be used in place.
func alloc8(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

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
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	for r, l := range e.links {
		if l != nil && !down[r] {
			_ = l.send(ctx, &Header{Kind: KindBye}, nil)
		}
	}
	e.mu.Lock()
	e.mu.closed = true
	posted := e.mu.posted
	e.wantLocked(-int32(len(posted)))
	e.mu.posted = nil
	e.mu.unexpected = nil
	e.mu.Unlock()
	for _, p := range posted {
		p.finish(-1, ErrClosed)
	}
	var first error
	for _, l := range e.links {
		if l != nil {
			if err := l.close(); err != nil && first == nil {
				first = err
			}
		}
	}
	e.unmapPeerRegions()
	return first
}

// sumBlock is how much of a payload readSum reads before it checksums
// that part: small enough to be still in cache when the checksum reads it
// (one pass over memory instead of two).
const sumBlock = 128 << 10

// readSum reads len(buf) bytes into buf and returns their CRC32C, or
// zero for a shared-memory slot's payload (see unchecked).
func readSum(in payload, buf []byte) (uint32, error) {
	if unchecked(in) {
		return 0, in.read(buf)
	}
	var c uint32
	for len(buf) > 0 {
		n := min(len(buf), sumBlock)
		if err := in.read(buf[:n]); err != nil {
			return 0, err
		}
		c = crc32c.Update(c, buf[:n])
		buf = buf[n:]
	}
	return c, nil
}

// memPayload is a payload already in memory (the in-process mesh's frames,
// shared-memory slots): like a stream, each read takes the next bytes.
type memPayload struct {
	b []byte
	// slot: the bytes are in a shared-memory slot. They carry no checksum:
	// they crossed no wire (the header naming the slot, which did, is
	// checked), and a checksum that the sender computes and the receiver
	// verifies would only catch the sender's own writes, at the cost of a
	// pass over the payload on each side, a fifth of a large transfer.
	slot bool
}

// unchecked reports whether in's bytes carry no checksum (memPayload.slot).
func unchecked(in payload) bool {
	m, ok := in.(*memPayload)
	return ok && m.slot
}

func (m *memPayload) read(p []byte) error {
	n := copy(p, m.b)
	m.b = m.b[n:]
	if n < len(p) {
		return io.ErrUnexpectedEOF
	}
	return nil
}

func (m *memPayload) view(n int, fn func([]byte)) error {
	if n > len(m.b) {
		return io.ErrUnexpectedEOF
	}
	fn(m.b[:n])
	m.b = m.b[n:]
	return nil
}
