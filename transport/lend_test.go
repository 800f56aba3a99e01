package transport_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/godist/godist/transport"
)

// lendMesh is a two-rank TCP mesh with shared memory, and a region of
// rank 0's, mapped by rank 1 and lent to it, filled with a pattern.
func lendMesh(t *testing.T, n int) ([]*transport.Endpoint, *transport.Region, func()) {
	t.Helper()
	m := newTCPMesh(t, 2, 0, true)
	eps := m.Endpoints
	if !eps[0].SharesMemoryWith(1) || !eps[1].SharesMemoryWith(0) {
		m.Close()
		t.Skip("this host gives the two ranks no shared memory (/dev/shm)")
	}
	r, err := eps[0].NewRegion(n)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	if err := eps[1].MapRegion(0, r.ID(), r.Name(), n); err != nil {
		t.Fatal(err)
	}
	if err := r.LendTo(1); err != nil {
		t.Fatal(err)
	}
	r.Unlink()
	for i := range r.Bytes() {
		r.Bytes()[i] = byte(i*7 + i>>8)
	}
	return eps, r, func() { m.Close(); r.Close() }
}

// TestLentSendWaitsForConsumer: a send from a lent region goes by
// reference and returns only once the receiver has consumed the bytes, so
// the sender may overwrite them afterwards, as after any Send.
func TestLentSendWaitsForConsumer(t *testing.T) {
	const n = 256 << 10
	eps, r, done := lendMesh(t, n)
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want := bytes.Clone(r.Bytes()[1000 : 1000+n/2])
	key := transport.Key{Group: 1, Seq: 1}
	got := make([]byte, n/2)
	gate := make(chan struct{})
	first := true
	rcv := eps[1].PostSink(0, transport.ExactMatch(0, key), 7, n/2, func(off int, b []byte) {
		if first {
			first = false
			<-gate // hold the receiver's reader on the first piece
		}
		copy(got[off:], b)
	})
	sent := make(chan error, 1)
	go func() { sent <- eps[0].Send(ctx, 1, key, 7, r.Bytes()[1000:1000+n/2]) }()
	select {
	case err := <-sent:
		t.Fatalf("Send returned (%v) while the receiver was still reading the lent bytes", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	clear(r.Bytes()) // the sender may write again: the receiver is done
	if _, err := rcv.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("received bytes differ from the lent ones")
	}
	if eps[0].LentSends() != 1 {
		t.Fatalf("LentSends = %d, want 1", eps[0].LentSends())
	}

	// A lent frame that arrives before its receive is posted is kept (a
	// copy) and acknowledged at once.
	copy(r.Bytes(), want)
	key.Seq = 2
	if err := eps[0].Send(ctx, 1, key, 7, r.Bytes()[:n/2]); err != nil {
		t.Fatal(err)
	}
	clear(r.Bytes())
	got2 := make([]byte, n/2)
	if _, err := eps[1].Post(0, transport.ExactMatch(0, key), 7, got2).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got2, want) {
		t.Fatal("kept lent frame differs from the lent bytes")
	}
	// Small payloads and ones outside the region are copied as before.
	key.Seq = 3
	small := r.Bytes()[:1024]
	outside := make([]byte, 64<<10)
	if err := eps[0].Send(ctx, 1, key, 7, small); err != nil {
		t.Fatal(err)
	}
	key.Seq = 4
	if err := eps[0].Send(ctx, 1, key, 7, outside); err != nil {
		t.Fatal(err)
	}
	if eps[0].LentSends() != 2 {
		t.Fatalf("LentSends = %d, want 2 (small and outside payloads are not lent)", eps[0].LentSends())
	}
}

// TestLentSendPeerDies: a sender waiting for a receiver that dies while
// reading its lent bytes gets an error, not a hang.
func TestLentSendPeerDies(t *testing.T) {
	const n = 128 << 10
	eps, r, done := lendMesh(t, n)
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := transport.Key{Group: 1, Seq: 1}
	gate := make(chan struct{})
	defer close(gate)
	eps[1].PostSink(0, transport.ExactMatch(0, key), 7, n, func(off int, b []byte) { <-gate })
	sent := make(chan error, 1)
	go func() { sent <- eps[0].Send(ctx, 1, key, 7, r.Bytes()) }()
	time.Sleep(20 * time.Millisecond)
	eps[1].Crash()
	select {
	case err := <-sent:
		if err == nil {
			t.Fatal("Send to a receiver that died before consuming the lent bytes succeeded")
		}
		t.Logf("Send: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Send still waiting 5s after its receiver died")
	}
}

// TestLentSendCancelled: a sender whose context ends while it waits for
// the receiver returns the context's error and gives the peer up (its
// bytes may still be read).
func TestLentSendCancelled(t *testing.T) {
	const n = 128 << 10
	eps, r, done := lendMesh(t, n)
	defer done()
	key := transport.Key{Group: 1, Seq: 1}
	gate := make(chan struct{})
	defer close(gate)
	eps[1].PostSink(0, transport.ExactMatch(0, key), 7, n, func(off int, b []byte) { <-gate })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := eps[0].Send(ctx, 1, key, 7, r.Bytes())
	if err == nil || ctx.Err() == nil {
		t.Fatalf("Send = %v after %v, want the context's error", err, time.Since(start))
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("Send took %v to notice its context ended", time.Since(start))
	}
	if err := eps[0].Send(context.Background(), 1, transport.Key{Group: 1, Seq: 2}, 7, []byte("x")); err == nil {
		t.Fatal("the peer is still up after a lent send was cancelled mid-frame")
	}
}
