package transport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"
)

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
	l, err := e.linkTo(peer)
	if err != nil {
		return err
	}
	if kind != KindHeartbeat {
		defer e.peers.get(peer).live.sent.Add(1)
	}
	if err := sendOn(ctx, l, h, parts); err != nil {
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
	for !e.peers.isGone(peer) && time.Now().Before(end) {
		time.Sleep(100 * time.Microsecond)
	}
}

// sendOn sends one frame on l. A TCP link is called directly, so that the
// frame's header and its list of parts stay on the caller's stack (a call
// through the interface would move them to the heap: two allocations of
// every send).
func sendOn(ctx context.Context, l link, h Header, parts [][]byte) error {
	if tl, ok := l.(*tcpLink); ok {
		return tl.send(ctx, &h, parts)
	}
	hc := h
	return l.send(ctx, &hc, slices.Clone(parts))
}
