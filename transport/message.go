package transport

import (
	"context"
	"fmt"
)

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
		buf = e.peers.make(src).spare.get(int(h.Len))
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
