package transport

import (
	"fmt"
	"io"

	"github.com/godist/godist/internal/crc32c"
)

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
		more = e.rematchLocked(src)
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
	buf := earlyBuf(int(h.Len))
	sum, err := readSum(in, buf)
	if err != nil {
		return err
	}
	if sum != h.CRC {
		return fmt.Errorf("%w: payload checksum mismatch on %v from rank %d", ErrFrame, h.Key, src)
	}
	e.mu.Lock()
	if p := e.claimLocked(src, h); p != nil {
		more := e.rematchLocked(src)
		e.mu.Unlock()
		complete(more)
		if err := p.check(src, h); err != nil {
			putEarly(buf)
			p.finish(src, err)
			return nil
		}
		p.take(buf)
		putEarly(buf)
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
