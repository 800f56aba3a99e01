// Package transporttest is the conformance suite every transport runs
// (STYLE.md: one suite per interface).
package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/godist/godist/transport"
)

// Mesh is what a transport under test provides: size connected endpoints
// and a way to kill one rank as a crashed process would die.
type Mesh struct {
	Endpoints []*transport.Endpoint
	Kill      func(rank int)
	Close     func()
}

// NewMesh builds a mesh of size ranks for one test.
type NewMesh func(t *testing.T, size int) Mesh

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func payload(src, dst, i, n int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(src*31 + dst*7 + i*3 + k)
	}
	return b
}

// Run runs the suite.
func Run(t *testing.T, newMesh NewMesh) {
	t.Run("PointToPoint", func(t *testing.T) { testPointToPoint(t, newMesh) })
	t.Run("AllPairsConcurrent", func(t *testing.T) { testAllPairs(t, newMesh) })
	t.Run("PostedBeforeAndAfter", func(t *testing.T) { testPostedOrder(t, newMesh) })
	t.Run("AnySource", func(t *testing.T) { testAnySource(t, newMesh) })
	t.Run("Sink", func(t *testing.T) { testSink(t, newMesh) })
	t.Run("Mismatch", func(t *testing.T) { testMismatch(t, newMesh) })
	t.Run("RecvCancel", func(t *testing.T) { testCancel(t, newMesh) })
	t.Run("SendCancelledBeforeStart", func(t *testing.T) { testSendCancelled(t, newMesh) })
	t.Run("Control", func(t *testing.T) { testControl(t, newMesh) })
	t.Run("PeerDeath", func(t *testing.T) { testPeerDeath(t, newMesh) })
	t.Run("Messages", func(t *testing.T) { testMessages(t, newMesh) })
	t.Run("MessagesKept", func(t *testing.T) { testMessagesKept(t, newMesh) })
	t.Run("BadPeer", func(t *testing.T) {
		m := newMesh(t, 2)
		defer m.Close()
		if err := m.Endpoints[0].Send(ctxT(t, time.Second), 0, transport.Key{}, 0, nil); err == nil {
			t.Fatal("send to self accepted")
		}
		if _, err := m.Endpoints[0].Recv(ctxT(t, time.Second), 5, transport.ExactMatch(5, transport.Key{}), 0, nil); err == nil {
			t.Fatal("receive from rank 5 of 2 accepted")
		}
	})
}

func testPointToPoint(t *testing.T, newMesh NewMesh) {
	m := newMesh(t, 2)
	defer m.Close()
	ctx := ctxT(t, 10*time.Second)
	for _, n := range []int{0, 1, 1000, 3 << 20} {
		k := transport.Key{Group: 1, Seq: uint64(n), Tag: 2}
		want := payload(0, 1, n, n)
		errc := make(chan error, 1)
		go func() { errc <- m.Endpoints[0].Send(ctx, 1, k, 42, want[:n/2], want[n/2:]) }()
		got := make([]byte, n)
		src, err := m.Endpoints[1].Recv(ctx, 0, transport.ExactMatch(0, k), 42, got)
		if err != nil || src != 0 {
			t.Fatalf("recv %d bytes: src %d err %v", n, src, err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d bytes arrived changed", n)
		}
	}
}

// testAllPairs sends several frames between every ordered pair at once and
// receives them in a different order than they were sent.
func testAllPairs(t *testing.T, newMesh NewMesh) {
	const size, frames = 4, 8
	m := newMesh(t, size)
	defer m.Close()
	ctx := ctxT(t, 20*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 2*size*size*frames)
	for src := range size {
		for dst := range size {
			if src == dst {
				continue
			}
			for i := range frames {
				wg.Add(2)
				go func() {
					defer wg.Done()
					k := transport.Key{Group: 3, Seq: uint64(i), Tag: uint32(src)}
					errs <- m.Endpoints[src].Send(ctx, dst, k, uint64(i), payload(src, dst, i, 100+i))
				}()
				go func() {
					defer wg.Done()
					j := frames - 1 - i // receive in reverse order
					k := transport.Key{Group: 3, Seq: uint64(j), Tag: uint32(src)}
					buf := make([]byte, 100+j)
					if _, err := m.Endpoints[dst].Recv(ctx, src, transport.ExactMatch(src, k), uint64(j), buf); err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(buf, payload(src, dst, j, 100+j)) {
						errs <- fmt.Errorf("frame %d from %d to %d changed", j, src, dst)
					}
				}()
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func testPostedOrder(t *testing.T, newMesh NewMesh) {
	m := newMesh(t, 2)
	defer m.Close()
	ctx := ctxT(t, 10*time.Second)
	early := transport.Key{Group: 1, Seq: 1}
	late := transport.Key{Group: 1, Seq: 2}
	// Frame before the receive.
	if err := m.Endpoints[0].Send(ctx, 1, early, 0, []byte("early")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	// Receive before the frame.
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 4)
		_, err := m.Endpoints[1].Recv(ctx, 0, transport.ExactMatch(0, late), 0, buf)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(buf)
	}()
	time.Sleep(20 * time.Millisecond)
	if err := m.Endpoints[0].Send(ctx, 1, late, 0, []byte("late")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := m.Endpoints[1].Recv(ctx, 0, transport.ExactMatch(0, early), 0, buf); err != nil || string(buf) != "early" {
		t.Fatalf("early frame: %q %v", buf, err)
	}
	if s := <-got; s != "late" {
		t.Fatalf("late frame: %s", s)
	}
}

// testSink receives payloads of several sizes (below, within and above the
// shared-memory range; posted before and after the frame) through sinks
// and checks the pieces: in order, contiguous, at most SinkBlock, whole.
func testSink(t *testing.T, newMesh NewMesh) {
	m := newMesh(t, 2)
	defer m.Close()
	ctx := ctxT(t, 10*time.Second)
	for i, n := range []int{0, 5, 40 << 10, 1<<20 + 48, 6 << 20} {
		for _, early := range []bool{false, true} {
			k := transport.Key{Group: 3, Seq: uint64(i), Tag: map[bool]uint32{false: 0, true: 1}[early]}
			want := payload(0, 1, i, n)
			if early {
				if err := m.Endpoints[0].Send(ctx, 1, k, 7, want); err != nil {
					t.Fatal(err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			var got []byte
			var bad error
			r := m.Endpoints[1].PostSink(0, transport.ExactMatch(0, k), 7, n, func(off int, b []byte) {
				if off != len(got) || len(b) > transport.SinkBlock || len(b) == 0 {
					bad = fmt.Errorf("piece of %d bytes at %d after %d bytes", len(b), off, len(got))
				}
				got = append(got, b...)
			})
			if !early {
				if err := m.Endpoints[0].Send(ctx, 1, k, 7, want[:n/3], want[n/3:]); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := r.Wait(ctx); err != nil {
				t.Fatalf("%d bytes, early %v: %v", n, early, err)
			}
			if bad != nil {
				t.Fatalf("%d bytes, early %v: %v", n, early, bad)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%d bytes, early %v: sink saw %d bytes, changed", n, early, len(got))
			}
		}
	}
	// A length mismatch fails the receive without calling the sink, and the
	// stream stays usable.
	k := transport.Key{Group: 3, Seq: 100}
	go m.Endpoints[0].Send(ctx, 1, k, 0, make([]byte, 64<<10))
	called := false
	_, err := m.Endpoints[1].PostSink(0, transport.ExactMatch(0, k), 0, 32<<10, func(int, []byte) { called = true }).Wait(ctx)
	var le *transport.LengthError
	if !errors.As(err, &le) || called {
		t.Fatalf("length mismatch: %v (sink called: %v)", err, called)
	}
	k2 := transport.Key{Group: 3, Seq: 101}
	go m.Endpoints[0].Send(ctx, 1, k2, 0, []byte("ok"))
	buf := make([]byte, 2)
	if _, err := m.Endpoints[1].Recv(ctx, 0, transport.ExactMatch(0, k2), 0, buf); err != nil || string(buf) != "ok" {
		t.Fatalf("after the mismatch: %q %v", buf, err)
	}
}

func testAnySource(t *testing.T, newMesh NewMesh) {
	m := newMesh(t, 3)
	defer m.Close()
	ctx := ctxT(t, 10*time.Second)
	k := transport.Key{Group: 9, Tag: 5}
	if err := m.Endpoints[2].Send(ctx, 0, k, 0, []byte{2}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	src, err := m.Endpoints[0].Recv(ctx, transport.AnySource, transport.ExactMatch(transport.AnySource, k), 0, buf)
	if err != nil || src != 2 || buf[0] != 2 {
		t.Fatalf("any-source receive: src %d buf %v err %v", src, buf, err)
	}
}

func testMismatch(t *testing.T, newMesh NewMesh) {
	m := newMesh(t, 2)
	defer m.Close()
	ctx := ctxT(t, 10*time.Second)
	k := transport.Key{Group: 1, Seq: 1}
	go m.Endpoints[0].Send(ctx, 1, k, 111, []byte("abc"))
	_, err := m.Endpoints[1].Recv(ctx, 0, transport.ExactMatch(0, k), 222, make([]byte, 3))
	var fe *transport.FingerprintError
	if !errors.As(err, &fe) || fe.Got != 111 || fe.Want != 222 || fe.Src != 0 {
		t.Fatalf("fingerprint mismatch gave %v", err)
	}
	k2 := transport.Key{Group: 1, Seq: 2}
	go m.Endpoints[0].Send(ctx, 1, k2, 0, []byte("abc"))
	_, err = m.Endpoints[1].Recv(ctx, 0, transport.ExactMatch(0, k2), 0, make([]byte, 4))
	var le *transport.LengthError
	if !errors.As(err, &le) || le.Got != 3 || le.Want != 4 {
		t.Fatalf("length mismatch gave %v", err)
	}
	// The stream is still usable.
	k3 := transport.Key{Group: 1, Seq: 3}
	go m.Endpoints[0].Send(ctx, 1, k3, 0, []byte("ok"))
	buf := make([]byte, 2)
	if _, err := m.Endpoints[1].Recv(ctx, 0, transport.ExactMatch(0, k3), 0, buf); err != nil || string(buf) != "ok" {
		t.Fatalf("after mismatches: %q %v", buf, err)
	}
}

// testSendCancelled: a send whose context has ended before it began
// writes nothing and leaves the connection usable (a group failing while
// a rank is about to send must still be able to tell that peer why).
func testSendCancelled(t *testing.T, newMesh NewMesh) {
	m := newMesh(t, 2)
	defer m.Close()
	ctx := ctxT(t, 10*time.Second)
	dead, cancel := context.WithCancel(ctx)
	cancel()
	for _, n := range []int{0, 100, 64 << 10} { // header only, small, a shared-memory slot's size
		err := m.Endpoints[0].Send(dead, 1, transport.Key{Group: 4, Seq: 1}, 0, make([]byte, n))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("send of %d bytes with a cancelled context: %v", n, err)
		}
	}
	if err := m.Endpoints[0].PeerErr(1); err != nil {
		t.Fatalf("the cancelled sends marked the peer down: %v", err)
	}
	k := transport.Key{Group: 4, Seq: 2}
	for i := range 6 { // more frames than shared-memory slots: none was lost
		want := payload(0, 1, i, 64<<10)
		go m.Endpoints[0].Send(ctx, 1, k, 0, want)
		got := make([]byte, len(want))
		if _, err := m.Endpoints[1].Recv(ctx, 0, transport.ExactMatch(0, k), 0, got); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("frame %d after the cancelled sends: %v", i, err)
		}
		k.Seq++
	}
}

func testCancel(t *testing.T, newMesh NewMesh) {
	m := newMesh(t, 2)
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := m.Endpoints[1].Recv(ctx, 0, transport.ExactMatch(0, transport.Key{Seq: 1}), 0, make([]byte, 1))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("cancelled receive: %v after %v", err, time.Since(start))
	}
	// A frame for the abandoned receive is kept, not lost.
	ctx2 := ctxT(t, 5*time.Second)
	if err := m.Endpoints[0].Send(ctx2, 1, transport.Key{Seq: 1}, 0, []byte{7}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := m.Endpoints[1].Recv(ctx2, 0, transport.ExactMatch(0, transport.Key{Seq: 1}), 0, buf); err != nil || buf[0] != 7 {
		t.Fatalf("receive after cancel: %v %v", buf, err)
	}
}

func testControl(t *testing.T, newMesh NewMesh) {
	m := newMesh(t, 2)
	defer m.Close()
	got := make(chan string, 1)
	m.Endpoints[1].SetHandlers(transport.Handlers{Control: func(src int, k transport.Key, msg []byte) {
		got <- fmt.Sprintf("%d %v %s", src, k.Seq, msg)
	}})
	if err := m.Endpoints[0].Control(ctxT(t, 5*time.Second), 1, transport.Key{Seq: 4}, []byte("desync")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "0 4 desync" {
			t.Fatalf("control handler got %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("control message not delivered")
	}
}

// testPeerDeath kills a rank while others wait on it: every waiting
// receive fails with a PeerError naming it within two seconds, and later
// sends and receives with it fail at once.
func testPeerDeath(t *testing.T, newMesh NewMesh) {
	m := newMesh(t, 3)
	defer m.Close()
	down := make(chan int, 4)
	m.Endpoints[0].SetHandlers(transport.Handlers{PeerDown: func(e *transport.PeerError) { down <- e.Rank }})
	ctx := ctxT(t, 30*time.Second)
	errc := make(chan error, 2)
	for _, peer := range []int{2, transport.AnySource} {
		go func() {
			_, err := m.Endpoints[0].Recv(ctx, peer, transport.ExactMatch(peer, transport.Key{Seq: 99}), 0, make([]byte, 8))
			errc <- err
		}()
	}
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	m.Kill(2)
	for range 2 {
		err := <-errc
		var pe *transport.PeerError
		if !errors.As(err, &pe) || pe.Rank != 2 {
			t.Fatalf("receive after rank 2 died: %v", err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("death noticed after %v", d)
	}
	select {
	case r := <-down:
		if r != 2 {
			t.Fatalf("PeerDown for rank %d", r)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no PeerDown event")
	}
	var pe *transport.PeerError
	if err := m.Endpoints[0].Send(ctx, 2, transport.Key{}, 0, []byte{1}); !errors.As(err, &pe) {
		t.Fatalf("send to dead rank: %v", err)
	}
	// The others still talk.
	go m.Endpoints[1].Send(ctx, 0, transport.Key{Seq: 5}, 0, []byte{5})
	buf := make([]byte, 1)
	if _, err := m.Endpoints[0].Recv(ctx, 1, transport.ExactMatch(1, transport.Key{Seq: 5}), 0, buf); err != nil || buf[0] != 5 {
		t.Fatalf("survivors: %v %v", buf, err)
	}
}

// testMessages: KindMessage frames reach the message handler whole (small,
// large enough for shared memory, empty), in 8-byte aligned buffers;
// messages that come before a handler wait for it; one over the limit
// gives the handler its prefix and length only, and the connection goes
// on; WatchPeers hears a death.
func testMessages(t *testing.T, newMesh NewMesh) {
	m := newMesh(t, 3)
	defer m.Close()
	ctx := ctxT(t, 20*time.Second)
	type msg struct {
		src  int
		seq  uint64
		fp   uint64
		b    []byte
		size int64
	}
	got := make(chan msg, 16)
	// Sent before rank 1 has a handler: kept for it.
	early := payload(0, 1, 0, 100)
	if err := m.Endpoints[0].SendMessage(ctx, 1, transport.Key{Seq: 1}, 11, early[:40], early[40:]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	const limit = 12 << 20
	m.Endpoints[1].SetMessageHandler(limit, func(src int, k transport.Key, fp uint64, b []byte, size int64) {
		got <- msg{src, k.Seq, fp, b, size}
	})
	big := payload(2, 1, 1, 600<<10)
	// Larger than a shared-memory slot: it goes in fragments there.
	bigger := payload(0, 1, 7, 9<<20+5)
	huge := payload(0, 1, 2, limit+1)
	sends := []struct {
		src  int
		seq  uint64
		data []byte
	}{{2, 2, big}, {0, 3, nil}, {0, 4, huge}, {2, 5, payload(2, 1, 5, 9)}, {0, 6, bigger},
		// Around the sizes where shared memory fragments a message.
		{0, 7, payload(0, 1, 7, 128<<10-1)}, {0, 8, payload(0, 1, 8, 256<<10-9)}, {2, 9, payload(2, 1, 9, 256<<10)},
		{0, 10, payload(0, 1, 10, 1<<20+3)}, {2, 11, payload(2, 1, 11, 4<<20+1)}}
	for _, s := range sends {
		if err := m.Endpoints[s.src].SendMessage(ctx, 1, transport.Key{Seq: s.seq}, s.seq, s.data); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[uint64]msg{}
	for len(seen) < len(sends)+1 {
		select {
		case x := <-got:
			seen[x.seq] = x
		case <-ctx.Done():
			t.Fatalf("only %d of %d messages arrived", len(seen), len(sends)+1)
		}
	}
	check := func(seq uint64, src int, want []byte) {
		x := seen[seq]
		if x.src != src || !bytes.Equal(x.b, want) || x.size != int64(len(want)) {
			t.Errorf("message %d: from %d, %d bytes of %d, want from %d, %d bytes", seq, x.src, len(x.b), x.size, src, len(want))
		}
		if len(x.b) > 0 && uintptr(unsafe.Pointer(&x.b[0]))%8 != 0 {
			t.Errorf("message %d is not 8-byte aligned", seq)
		}
	}
	check(1, 0, early)
	check(2, 2, big)
	check(3, 0, []byte{})
	check(5, 2, payload(2, 1, 5, 9))
	check(6, 0, bigger)
	for _, s := range sends[5:] {
		check(s.seq, s.src, s.data)
	}
	if x := seen[4]; x.size != limit+1 || len(x.b) != transport.MessagePrefix || !bytes.Equal(x.b, huge[:transport.MessagePrefix]) {
		t.Errorf("over-limit message: %d bytes of %d", len(x.b), x.size)
	}
	if seen[1].fp != 11 || seen[2].fp != 2 {
		t.Errorf("fingerprints: %d %d", seen[1].fp, seen[2].fp)
	}
	down := make(chan int, 2)
	stop := m.Endpoints[1].WatchPeers(func(e *transport.PeerError) { down <- e.Rank })
	defer stop()
	m.Kill(2)
	select {
	case r := <-down:
		if r != 2 {
			t.Fatalf("WatchPeers heard rank %d", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WatchPeers heard nothing")
	}
}

// testMessagesKept: message buffers a handler keeps stay its own while
// the collector runs and more messages of the same size arrive (the
// transport recycles the buffers of messages nobody holds any more: it
// must never reuse one that is still held), and a second round, after
// the first is dropped, arrives intact too.
func testMessagesKept(t *testing.T, newMesh NewMesh) {
	m := newMesh(t, 2)
	defer m.Close()
	ctx := ctxT(t, 30*time.Second)
	got := make(chan []byte, 64)
	m.Endpoints[1].SetMessageHandler(8<<20, func(src int, k transport.Key, fp uint64, b []byte, size int64) {
		got <- b
	})
	const n, size = 24, 1<<20 + 5
	for round := range 2 {
		kept := make([][]byte, 0, n)
		for i := range n {
			if err := m.Endpoints[0].SendMessage(ctx, 1, transport.Key{Seq: uint64(round*n + i)}, 1, payload(0, round, i, size)); err != nil {
				t.Fatal(err)
			}
			select {
			case b := <-got:
				kept = append(kept, b)
			case <-ctx.Done():
				t.Fatalf("round %d: message %d did not arrive", round, i)
			}
			runtime.GC() // buffers of dropped messages come back for reuse now
		}
		for i, b := range kept {
			if !bytes.Equal(b, payload(0, round, i, size)) {
				t.Fatalf("round %d: kept message %d changed after later messages arrived", round, i)
			}
		}
		kept = nil
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // let finalizers run
	}
}
