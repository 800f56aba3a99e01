package transport

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestYieldingReaderStaysInFrame: a yielding reader with no receive to
// poll for parks, but not inside a frame. A frame whose payload comes in
// two parts, with no receive posted for it (an early frame), keeps the
// reader polling in between; parked there, it would wait for the
// runtime's network poller, which a process whose other goroutines poll
// runs only every 10 ms (all_gather across hosts took twice its time).
// Once the frame is in, the reader parks again.
func TestYieldingReaderStaysInFrame(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	e := newEndpoint(0, 2)
	e.wakers = make([]atomic.Pointer[waker], 2)
	e.wantFrom = make([]atomic.Int32, 2)
	w := &waker{conn: conn}
	e.wakers[1].Store(w)
	go e.readLoop(1, conn, YieldSpin, true, nil)

	waitState := func(what string, parked bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for (w.state.Load() == readerParked) != parked {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 5 s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitState("the reader parks with nothing to read and no receive posted", true)

	payload := bytes.Repeat([]byte("godist"), 20000)
	k := Key{Group: 3, Seq: 1, Tag: 9}
	h := Header{Kind: KindData, Key: k, Len: int64(len(payload)), CRC: Checksum(payload)}
	var hdr [HeaderSize]byte
	h.encode(hdr[:])
	half := len(payload) / 2
	// The reader wakes after this: a park sooner than YieldSpin after it
	// (when any polling reader parks) is one inside the frame, however
	// late this goroutine notices the wake.
	written := time.Now()
	if _, err := peer.Write(append(hdr[:], payload[:half]...)); err != nil {
		t.Fatal(err)
	}
	waitState("the reader wakes for the frame", false)
	// Hundreds of times yieldGrace with half the payload in: still
	// polling (until YieldSpin, 100 ms).
	woke := time.Now()
	for time.Since(woke) < 20*time.Millisecond {
		time.Sleep(time.Millisecond)
		if w.state.Load() == readerParked && time.Since(written) < YieldSpin/2 {
			t.Fatalf("the reader parked inside a frame %v after the frame's first half was written", time.Since(written))
		}
	}
	if _, err := peer.Write(payload[half:]); err != nil {
		t.Fatal(err)
	}
	waitState("the reader parks again once the frame is in", true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make([]byte, len(payload))
	if _, err := e.Recv(ctx, 1, ExactMatch(1, k), 0, got); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("the early frame's receive: %v (equal %v)", err, bytes.Equal(got, payload))
	}
}
