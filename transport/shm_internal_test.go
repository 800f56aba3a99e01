package transport

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestShmSlotReleasedWhenHeaderNeverLeaves: a send that took a slot and
// copied its payload there, then gave up (its context ended) before any
// byte of the header was written, frees the slot: otherwise every later
// send would wait for a slot the peer will never free.
func TestShmSlotReleasedWhenHeaderNeverLeaves(t *testing.T) {
	a, b := net.Pipe() // writes block until the other end reads: nobody reads b
	defer a.Close()
	defer b.Close()
	l := newTCPLink(a)
	l.shm = &shmOut{seg: &shmSeg{mem: make([]byte, shmSegment)}, down: new(atomic.Bool)}
	for range shmSlots + 1 { // more sends than slots: each must find one free
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := l.send(ctx, &Header{Kind: KindData}, [][]byte{make([]byte, 64<<10)})
		cancel()
		var ns notSent
		if !errors.As(err, &ns) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("send to a peer that never reads: %v, want notSent wrapping the context's error", err)
		}
		for i := range shmSlots {
			if s := l.shm.seg.state(i).Load(); s != 0 {
				t.Fatalf("slot %d still taken (state %d) after a send that never left", i, s)
			}
		}
	}
}
