package transport

import (
	"context"
	"fmt"

	"github.com/godist/godist/internal/crc32c"
)

// AnySource, as a receive's peer, accepts a matching frame from any rank.
const AnySource = -1

// Match is a posted receive's test for a frame. It is called with the
// endpoint's lock held and must not block or call back into the endpoint;
// returning true takes the frame (the function may record that, since a
// frame is offered to a receive at most once). A Match with state may
// refuse a frame now and take it later; the kept frames of a source are
// offered again only after a frame of that source was taken, so its state
// must change only per source. h is valid only during the call.
type Match func(src int, h *Header) bool

// ExactMatch matches the frame with key k from peer (or AnySource).
func ExactMatch(peer int, k Key) Match {
	return func(src int, h *Header) bool {
		return (peer == AnySource || src == peer) && h.Key == k
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
	src int   // when completed at posting time
	err error // when completed (or failed) at posting time
	now bool
	// pend is the receive in the endpoint's posted list (unless now):
	// a receive and its entry are one allocation.
	pend pending
}

// Post registers a receive without blocking: a frame that match accepts,
// arriving from now on, is read straight into buf; one that already
// arrived is copied into it. The caller must not touch buf until Wait
// returns, and must call Wait.
func (e *Endpoint) Post(peer int, match Match, fp uint64, buf []byte) *Receive {
	r := &Receive{e: e, pend: pending{peer: peer, match: match, fp: fp, buf: buf, n: len(buf)}}
	return e.post(r)
}

// PostKey is Post for the frame of key k from peer (ExactMatch(peer, k),
// without a function to call).
func (e *Endpoint) PostKey(peer int, k Key, fp uint64, buf []byte) *Receive {
	r := &Receive{e: e, pend: pending{peer: peer, exact: true, key: k, fp: fp, buf: buf, n: len(buf)}}
	return e.post(r)
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
	r := &Receive{e: e, pend: pending{peer: peer, match: match, fp: fp, sink: sink, n: n}}
	return e.post(r)
}

// PostSinkKey is PostSink for the frame of key k from peer.
func (e *Endpoint) PostSinkKey(peer int, k Key, fp uint64, n int, sink Sink) *Receive {
	r := &Receive{e: e, pend: pending{peer: peer, exact: true, key: k, fp: fp, sink: sink, n: n}}
	return e.post(r)
}

// pending is a posted receive, in mu.posted until a frame claims it.
type pending struct {
	peer  int
	match Match
	exact bool // the frame of key, not match (PostKey)
	key   Key
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

func (e *Endpoint) post(r *Receive) *Receive {
	p := &r.pend
	peer := p.peer
	if peer != AnySource {
		if err := e.checkPeer(peer, "receive"); err != nil {
			r.now, r.src, r.err = true, -1, err
			return r
		}
		if e.connect != nil && !e.Connected(peer) {
			// A rank waited on is connected to, so that its loss is
			// seen here (and a failure it knows of is told here): over
			// TCP in the background, a receive does not wait for a dial.
			if e.od != nil {
				go e.linkTo(peer)
			} else {
				_, _ = e.linkTo(peer)
			}
		}
	}
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		r.now, r.src, r.err = true, -1, ErrClosed
		return r
	}
	// A frame that arrived before the receive was posted.
	for i, m := range e.mu.unexpected {
		if (peer == AnySource || m.src == peer) && p.matches(m.src, &m.h) {
			e.mu.unexpected = append(e.mu.unexpected[:i], e.mu.unexpected[i+1:]...)
			more := e.rematchLocked(m.src)
			e.mu.Unlock()
			complete(more)
			r.now, r.src = true, m.src
			if r.err = p.check(m.src, &m.h); r.err == nil {
				p.take(m.buf)
			}
			putEarly(m.buf)
			return r
		}
	}
	if err := e.downFor(peer); err != nil {
		e.mu.Unlock()
		r.now, r.src, r.err = true, -1, err
		return r
	}
	// Only a receive that waits needs its channel (one that found its
	// frame, above, completes now without one).
	p.done = make(chan struct{})
	e.mu.posted = append(e.mu.posted, p)
	e.wantLocked(peer, 1)
	e.mu.Unlock()
	return r
}

// Done reports whether the receive has completed (Wait would not block).
func (r *Receive) Done() bool {
	if r.now {
		return true
	}
	select {
	case <-r.pend.done:
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
	p := &r.pend
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
			e.wantLocked(p.peer, -1)
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

// match pairs a posted receive with a kept frame.
type match struct {
	p *pending
	m *message
}

// rematchLocked offers the kept frames from src to the posted receives
// again, after a frame from src was taken. A Match with state
// (point-to-point order counters) may accept a kept frame only after
// another frame was taken, e.g. when frames arrived out of order; its
// state must be per source, as dist's streams are, for only src's frames
// are offered again. (All of them, each against every posted receive,
// made a member that posts W-1 receives while their frames come W³: 89 s
// for a monitored barrier of 16,384 goroutine ranks.)
func (e *Endpoint) rematchLocked(src int) []match {
	var out []match
	for progress := true; progress && len(e.mu.unexpected) > 0 && len(e.mu.posted) > 0; {
		progress = false
		for i, m := range e.mu.unexpected {
			if m.src != src {
				continue
			}
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
			putEarly(x.m.buf)
			x.p.finish(x.m.src, err)
			continue
		}
		x.p.take(x.m.buf)
		putEarly(x.m.buf)
		x.p.finish(x.m.src, nil)
	}
}

// claimLocked finds and removes the first posted receive that takes the
// frame.
func (e *Endpoint) claimLocked(src int, h *Header) *pending {
	for i, p := range e.mu.posted {
		if (p.peer == AnySource || p.peer == src) && p.matches(src, h) {
			p.claimed = true
			e.mu.posted = append(e.mu.posted[:i], e.mu.posted[i+1:]...)
			e.wantLocked(p.peer, -1)
			return p
		}
	}
	return nil
}

// matches reports whether the receive takes a frame from src with header
// h (whose source its peer allows).
func (p *pending) matches(src int, h *Header) bool {
	if p.exact {
		return h.Key == p.key
	}
	return p.match(src, h)
}

func (p *pending) finish(src int, err error) {
	p.src, p.err = src, err
	close(p.done)
}
