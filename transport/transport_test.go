package transport_test

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godist/godist/internal/handshake"
	"github.com/godist/godist/store"
	"github.com/godist/godist/transport"
	"github.com/godist/godist/transport/transporttest"
)

func inproc(f transport.Faults) transporttest.NewMesh {
	return func(t *testing.T, size int) transporttest.Mesh {
		m := transport.NewInProc(size, f)
		return transporttest.Mesh{Endpoints: m.Endpoints, Kill: m.Kill, Close: m.Close}
	}
}

func TestInProc(t *testing.T) { transporttest.Run(t, inproc(transport.Faults{})) }

func TestInProcFaulty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("fault seed %d", seed)
	transporttest.Run(t, inproc(transport.Faults{Seed: seed, Loss: 0.2, Dup: 0.2, MaxDelay: 2 * time.Millisecond}))
}

// tcpMesh connects size ranks over loopback TCP through an in-memory
// store, with a job token; readers park at once.
func tcpMesh(t *testing.T, size int) transporttest.Mesh { return newTCPMesh(t, size, 0, false) }

// tcpMeshSpin is tcpMesh with readers that poll their sockets for spin
// before parking.
func tcpMeshSpin(spin time.Duration) transporttest.NewMesh {
	return func(t *testing.T, size int) transporttest.Mesh {
		return newTCPMesh(t, size, spin, false)
	}
}

func newTCPMesh(t *testing.T, size int, spin time.Duration, shm bool) transporttest.Mesh {
	return newTCPMeshRing(t, size, spin, shm, false, false)
}

func newTCPMeshRing(t *testing.T, size int, spin time.Duration, shm, ring, yield bool) transporttest.Mesh {
	return newTCPMeshWith(t, size, transport.TCPOptions{Spin: spin, Yield: yield, SharedMemory: shm, ShmRing: ring})
}

// newTCPMeshWith makes size endpoints with opt's tuning (its Rank, Size,
// Store, JobID and Token are set here).
func newTCPMeshWith(t *testing.T, size int, opt transport.TCPOptions) transporttest.Mesh {
	st := store.NewMem()
	eps := make([]*transport.Endpoint, size)
	errs := make([]error, size)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opt
			o.Rank, o.Size, o.Store, o.JobID, o.Token = r, size, st, "test", []byte("secret")
			eps[r], errs[r] = transport.NewTCP(ctx, o)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return transporttest.Mesh{
		Endpoints: eps,
		Kill:      func(r int) { eps[r].Crash() },
		Close: func() {
			for _, e := range eps {
				e.Close()
			}
			st.Close()
		},
	}
}

func TestTCP(t *testing.T) { transporttest.Run(t, tcpMesh) }

// TestTCPSpin runs the suite with polling readers (as dist.Init makes
// them): frames, peer death and Close behave the same.
func TestTCPSpin(t *testing.T) { transporttest.Run(t, tcpMeshSpin(200*time.Microsecond)) }

// TestTCPSharedMemory runs the suite with the same-host path on: large
// payloads go through shared-memory slots, headers over TCP.
func TestTCPSharedMemory(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) transporttest.Mesh { return newTCPMesh(t, size, 0, true) })
}

// TestTCPShmRing runs the suite with every frame between same-host ranks
// going through the shared-memory frame ring (TCPOptions.ShmRing), with a
// polling reader and with one that parks at once on the socket.
func TestTCPShmRing(t *testing.T) {
	for _, c := range []struct {
		spin  time.Duration
		yield bool
	}{{0, false}, {200 * time.Microsecond, false}, {200 * time.Microsecond, true}} {
		t.Run(fmt.Sprintf("spin%v/yield=%v", c.spin, c.yield), func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, size int) transporttest.Mesh {
				return newTCPMeshRing(t, size, c.spin, true, true, c.yield)
			})
		})
	}
}

// TestTCPRefusesWrongToken starts rank 0 of a two-rank job and connects to
// it with the wrong token, then as a stranger that is not godist at all:
// both are dropped, and the real rank 1 still joins.
func TestTCPRefusesWrongToken(t *testing.T) {
	st := store.NewMem()
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type res struct {
		e   *transport.Endpoint
		err error
	}
	r0 := make(chan res, 1)
	go func() {
		e, err := transport.NewTCP(ctx, transport.TCPOptions{Rank: 0, Size: 2, Store: st, JobID: "job", Token: []byte("right")})
		r0 <- res{e, err}
	}()
	addr, err := transport.RankAddr(ctx, st, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	// An impostor claiming rank 1 without the token.
	c, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdh.X25519().GenerateKey(rand.Reader)
	_, herr := handshake.Client(c, handshake.Config{Proto: "transport", JobID: "job", Rank: 1, Token: []byte("wrong"),
		Identity: key, PeerKey: func(int) (*ecdh.PublicKey, error) { return key.PublicKey(), nil }})
	c.Close()
	if !errors.Is(herr, handshake.ErrAuth) {
		t.Fatalf("impostor's handshake: %v, want ErrAuth", herr)
	}
	// Something that is not godist.
	c, err = net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.0\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			break // dropped
		}
	}
	c.Close()
	// The real rank 1.
	e1, err := transport.NewTCP(ctx, transport.TCPOptions{Rank: 1, Size: 2, Store: st, JobID: "job", Token: []byte("right")})
	if err != nil {
		t.Fatal(err)
	}
	defer e1.Close()
	r := <-r0
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.e.Close()
	go e1.Send(ctx, 0, transport.Key{Seq: 1}, 0, []byte("hi"))
	got := make([]byte, 2)
	if _, err := r.e.Recv(ctx, 1, transport.ExactMatch(1, transport.Key{Seq: 1}), 0, got); err != nil || string(got) != "hi" {
		t.Fatalf("after refusing strangers: %q %v", got, err)
	}
}

// TestDefaultSpin: the polling time is a function of the host's ranks,
// each rank's Ps and the CPUs alone.
func TestDefaultSpin(t *testing.T) {
	for _, c := range []struct {
		local, procs, cpus int
		want               time.Duration
		yield              bool
	}{
		{1, 1, 2, 100 * time.Millisecond, false},   // the rank's Ps fit in the CPUs
		{2, 1, 2, 100 * time.Millisecond, false},   // one P per CPU
		{2, 2, 2, 50 * time.Microsecond, false},    // more Ps than CPUs
		{1, 3, 2, 50 * time.Microsecond, false},    // one rank, more Ps than CPUs
		{3, 1, 2, 100 * time.Millisecond, true},    // more ranks than CPUs: poll, yielding
		{256, 1, 64, 100 * time.Millisecond, true}, // 4 ranks a CPU: poll, yielding
		{257, 1, 64, 0, false},                     // more than 4 ranks a CPU: park
		{100000, 1, 64, 0, false},                  // far more ranks than CPUs
		{0, 1, 64, 50 * time.Microsecond, false},   // not launched: unknown neighbours
		{-1, 1, 64, 50 * time.Microsecond, false},  // unknown
		{8, 8, 64, 100 * time.Millisecond, false},  // 8 ranks of 8 Ps on 64 CPUs
		{8, 9, 64, 50 * time.Microsecond, false},   // one P too many
	} {
		if got := transport.DefaultSpin(c.local, c.procs, c.cpus); got != c.want {
			t.Errorf("DefaultSpin(%d ranks, %d Ps, %d CPUs) = %v, want %v", c.local, c.procs, c.cpus, got, c.want)
		}
		if got, yield := transport.DefaultPolling(c.local, c.procs, c.cpus); got != c.want || yield != c.yield {
			t.Errorf("DefaultPolling(%d ranks, %d Ps, %d CPUs) = %v, %v, want %v, %v", c.local, c.procs, c.cpus, got, yield, c.want, c.yield)
		}
	}
}

// TestTCPFrameLargerThanSocketBuffers sends frames that cannot go in one
// non-blocking writev (the socket buffers hold 8 MiB): the rest of each
// waits on the socket, and every byte arrives in order.
func TestTCPFrameLargerThanSocketBuffers(t *testing.T) {
	m := newTCPMesh(t, 2, 0, false)
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 24 << 20
	want := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		want[i] = byte(i >> 12)
	}
	for i := range 2 {
		k := transport.Key{Group: 3, Seq: uint64(i)}
		errc := make(chan error, 1)
		go func() { errc <- m.Endpoints[0].Send(ctx, 1, k, 0, want) }()
		got := make([]byte, n)
		if _, err := m.Endpoints[1].Recv(ctx, 0, transport.ExactMatch(0, k), 0, got); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("frame %d of %d bytes arrived changed", i, n)
		}
	}
}

// TestTCPSharedMemoryStream sends many more slot-sized frames than there
// are slots, both ways at once, with the receives posted late: every frame
// arrives intact and in order, the pair really uses the segment, and no
// segment file of this process is left in /dev/shm (other packages' tests
// run beside this one and have theirs).
func TestTCPSharedMemoryStream(t *testing.T) {
	m := newTCPMesh(t, 2, 0, true)
	defer func() {
		m.Close()
		if left, _ := filepath.Glob("/dev/shm/" + transport.ShmPrefix() + "*"); len(left) > 0 {
			t.Errorf("segment files left behind: %v", left)
		}
	}()
	for r := range 2 {
		if !transport.UsesSharedMemory(m.Endpoints[r], 1-r) {
			t.Fatalf("rank %d does not use shared memory to rank %d on one host", r, 1-r)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const frames, n = 24, 1<<20 + 12
	frame := func(src, i int) []byte {
		b := make([]byte, n)
		for k := 0; k < n; k += 997 {
			b[k] = byte(src*131 + i*7 + k)
		}
		return b
	}
	errc := make(chan error, 4)
	for r := range 2 {
		go func() {
			for i := range frames {
				if err := m.Endpoints[r].Send(ctx, 1-r, transport.Key{Group: 5, Seq: uint64(i)}, 9, frame(r, i)); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		go func() {
			time.Sleep(20 * time.Millisecond) // let frames arrive first
			got := make([]byte, n)
			for i := range frames {
				k := transport.Key{Group: 5, Seq: uint64(i)}
				if _, err := m.Endpoints[r].Recv(ctx, 1-r, transport.ExactMatch(1-r, k), 9, got); err != nil {
					errc <- err
					return
				}
				if !bytes.Equal(got, frame(1-r, i)) {
					errc <- fmt.Errorf("rank %d: frame %d from rank %d arrived changed", r, i, 1-r)
					return
				}
			}
			errc <- nil
		}()
	}
	for range 4 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// TestTCPSendMeetsCloseWithUnreadData: a rank closes while its peer is
// streaming frames at it, so its kernel answers with a reset; the peer's
// send then reports the close (the goodbye that preceded the reset), not
// the reset.
func TestTCPSendMeetsCloseWithUnreadData(t *testing.T) {
	for i := range 5 {
		m := newTCPMesh(t, 2, 0, false)
		payload := make([]byte, 4<<20)
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for s := uint64(0); ; s++ {
				if err := m.Endpoints[1].Send(ctx, 0, transport.Key{Seq: s}, 0, payload); err != nil {
					done <- err
					return
				}
			}
		}()
		time.Sleep(20 * time.Millisecond)
		m.Endpoints[0].Close()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d: the send never failed", i)
		}
		if !errors.Is(err, transport.ErrPeerClosed) {
			t.Errorf("run %d: send failed with %v, want the peer's close (ErrPeerClosed)", i, err)
		}
		m.Close()
	}
}

// TestSlowHandshakesDelayNoOne: 64 connections that send one byte and then
// nothing hold rank 0's listener while ranks 1 and 2 join; handshakes run
// concurrently, so the members connect at once (handshakes one at a time
// made them fail after the 10 s handshake limit).
func TestSlowHandshakesDelayNoOne(t *testing.T) {
	st := store.NewMem()
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	eps := make([]*transport.Endpoint, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	join := func(r int) {
		defer wg.Done()
		eps[r], errs[r] = transport.NewTCP(ctx, transport.TCPOptions{Rank: r, Size: 3, Store: st, JobID: "job", Token: []byte("t")})
	}
	wg.Add(1)
	go join(0)
	addr, err := transport.RankAddr(ctx, st, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var attackers []net.Conn
	for range 64 {
		c, err := net.Dial("tcp", string(addr))
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte{'G'})
		attackers = append(attackers, c)
	}
	defer func() {
		for _, c := range attackers {
			c.Close()
		}
	}()
	time.Sleep(50 * time.Millisecond) // the listener has them all
	begin := time.Now()
	wg.Add(2)
	go join(1)
	go join(2)
	wg.Wait()
	took := time.Since(begin)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		defer eps[r].Close()
	}
	t.Logf("ranks 1 and 2 joined %v after 64 slow connections", took)
	if took > 2*time.Second {
		t.Fatalf("joining took %v with slow connections at the listener", took)
	}
}

// TestWorldSizeMismatch: a rank started with another WORLD_SIZE than its
// peer's fails to connect at once, naming both sizes, instead of hanging
// in its first collective (issue 19, item 8).
func TestWorldSizeMismatch(t *testing.T) {
	st := store.NewMem()
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		short, stop := context.WithTimeout(ctx, 3*time.Second)
		defer stop()
		if e, err := transport.NewTCP(short, transport.TCPOptions{Rank: 0, Size: 2, Store: st, JobID: "job", Token: []byte("t")}); err == nil {
			e.Close()
		}
	}()
	begin := time.Now()
	_, err := transport.NewTCP(ctx, transport.TCPOptions{Rank: 1, Size: 3, Store: st, JobID: "job", Token: []byte("t")})
	if err == nil || !strings.Contains(err.Error(), "world size") || !strings.Contains(err.Error(), "WORLD_SIZE") {
		t.Fatalf("rank 1 of 3 joining rank 0 of 2: %v", err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Fatalf("the mismatch was found after %v", d)
	}
}

// TestMemberCannotBeReplaced (issue 19, items 2 and 8): with the job's
// token in hand, a process that is not rank 1 can neither overwrite rank
// 1's record in the store nor pass a handshake as rank 1 (ErrIdentity):
// the real rank 1 still joins, and frames flow. A second process started
// as rank 1 fails at once with a *DuplicateRankError naming both
// addresses, instead of hanging.
func TestMemberCannotBeReplaced(t *testing.T) {
	st := store.NewMem()
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tok := []byte("the job's token")
	type res struct {
		e   *transport.Endpoint
		err error
	}
	start := func(rank int) chan res {
		ch := make(chan res, 1)
		go func() {
			e, err := transport.NewTCP(ctx, transport.TCPOptions{Rank: rank, Size: 2, Store: st, JobID: "job", Token: tok})
			ch <- res{e, err}
		}()
		return ch
	}
	r0 := start(0)
	addr, err := transport.RankAddr(ctx, st, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Rank 1's record is published before it dials rank 0: wait for it
	// by starting rank 1 only after the attacks on the store.
	impostorKey, _ := ecdh.X25519().GenerateKey(rand.Reader)
	fake := []byte("10.6.6.6:1 " + hex.EncodeToString(impostorKey.PublicKey().Bytes()))
	if got, err := st.CompareAndSet(ctx, "transport/once/rank/0", nil, fake); err != nil || string(got) == string(fake) {
		t.Fatalf("overwriting rank 0's record by compare-and-set: %q, %v", got, err)
	}
	if err := st.Set(ctx, "transport/once/rank/0", fake); err == nil {
		t.Fatal("overwriting rank 0's record by set succeeded")
	}
	if ok, err := st.Delete(ctx, "transport/once/rank/0"); ok || err == nil {
		t.Fatal("deleting rank 0's record succeeded")
	}
	r1 := start(1)
	if _, err := transport.RankAddr(ctx, st, "", 1); err != nil {
		t.Fatal(err)
	}
	// The impostor has the token, and claims rank 1 with its own key. If
	// the real rank 1 was quicker, rank 0 has its peers and no longer
	// listens: refused too.
	if c, err := net.Dial("tcp", addr); err == nil {
		_, herr := handshake.Client(c, handshake.Config{Proto: "transport", JobID: "job", Rank: 1, Size: 2, Token: tok,
			Identity: impostorKey, PeerKey: func(int) (*ecdh.PublicKey, error) { return impostorKey.PublicKey(), nil }})
		if herr == nil {
			// (The impostor cannot check rank 0's proof either, so it
			// fails too; should it pass, rank 0 must drop it.)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Fatal("rank 0 kept the impostor's connection")
			}
		}
		c.Close()
	} else if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ECONNRESET) {
		// Refused, or reset when rank 0 closed its listener with the
		// impostor's connection still in its backlog (seen under load).
		t.Fatal(err)
	}
	a, b := <-r0, <-r1
	if a.err != nil || b.err != nil {
		t.Fatalf("the real ranks: %v, %v", a.err, b.err)
	}
	defer a.e.Close()
	defer b.e.Close()
	got := make([]byte, 5)
	rcv := b.e.Post(0, transport.ExactMatch(0, transport.Key{Group: 1}), 0, got)
	if err := a.e.Send(ctx, 1, transport.Key{Group: 1}, 0, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := rcv.Wait(ctx); err != nil || string(got) != "hello" {
		t.Fatalf("rank 1 got %q, %v", got, err)
	}
	// A second process started as rank 1.
	_, err = transport.NewTCP(ctx, transport.TCPOptions{Rank: 1, Size: 2, Store: st, JobID: "job", Token: tok})
	var dup *transport.DuplicateRankError
	if !errors.As(err, &dup) || dup.Rank != 1 || dup.Other == "" || dup.Addr == dup.Other || !strings.Contains(err.Error(), "RANK=1") {
		t.Fatalf("a second rank 1: %v, want a *DuplicateRankError naming both addresses", err)
	}
}

// TestTCPHosts: every rank of a TCP job learns every rank's host label,
// with shared memory on or off: one label, the same for all, here; an
// in-process mesh reports what SetHosts gave it.
func TestTCPHosts(t *testing.T) {
	for _, shm := range []bool{false, true} {
		m := newTCPMesh(t, 3, 0, shm)
		for r, e := range m.Endpoints {
			h := e.Hosts()
			if len(h) != 3 || h[0] == "" || h[1] != h[0] || h[2] != h[0] {
				t.Errorf("shared memory %v: rank %d sees hosts %q, want one non-empty label three times", shm, r, h)
			}
		}
		m.Close()
	}
	mesh := transport.NewInProc(2, transport.Faults{})
	defer mesh.Close()
	if h := mesh.Endpoints[0].Hosts(); len(h) != 2 || h[0] != h[1] {
		t.Errorf("in-process hosts %q, want one host", h)
	}
	mesh.SetHosts([]string{"a", "b"})
	if h := mesh.Endpoints[1].Hosts(); len(h) != 2 || h[0] != "a" || h[1] != "b" {
		t.Errorf("in-process hosts after SetHosts %q, want [a b]", h)
	}
}

// TestTCPYield runs the suite with yielding readers that may poll for
// 100 ms (as on a host with more ranks than CPUs): they poll only while
// a receive waits, and parking, waking and peer death behave.
func TestTCPYield(t *testing.T) {
	for _, ring := range []bool{false, true} {
		t.Run(fmt.Sprintf("ring=%v", ring), func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, size int) transporttest.Mesh {
				return newTCPMeshRing(t, size, transport.YieldSpin, ring, ring, true)
			})
		})
	}
}

// TestYieldingReadersParkAndWake checks the policy of wake.go: with no
// receive posted a yielding reader parks within its grace (it must not
// hold a shared CPU between collectives), posting a receive wakes the
// reader of its peer before any frame comes and leaves the others
// parked, and a receive from any source wakes them all.
func TestYieldingReadersParkAndWake(t *testing.T) {
	for _, ring := range []bool{false, true} {
		t.Run(fmt.Sprintf("ring=%v", ring), func(t *testing.T) {
			m := newTCPMeshRing(t, 3, transport.YieldSpin, ring, ring, true)
			defer m.Close()
			e0, e1 := m.Endpoints[0], m.Endpoints[1]
			waitFor := func(what string, cond func() bool) {
				t.Helper()
				deadline := time.Now().Add(5 * time.Second)
				for !cond() {
					if time.Now().After(deadline) {
						t.Fatalf("%s: still not after 5 s (parked readers of rank 0: %d)", what, transport.ParkedReaders(e0))
					}
					time.Sleep(time.Millisecond)
				}
			}
			waitFor("rank 0's two readers parked with no receive posted", func() bool { return transport.ParkedReaders(e0) == 2 })
			// Wakes are counted, not watched: a woken reader that finds
			// the process's readers held (a busy machine's lost yields,
			// TestHeldReadersPark) parks again at once.
			w1, w2 := transport.ReaderWakes(e0, 1), transport.ReaderWakes(e0, 2)
			k := transport.Key{Tag: 7}
			r := e0.Post(1, transport.ExactMatch(1, k), 0, make([]byte, 5))
			waitFor("rank 0's reader of rank 1 woken by a receive from it", func() bool { return transport.ReaderWakes(e0, 1) > w1 })
			time.Sleep(20 * time.Millisecond)
			if transport.ReaderWakes(e0, 2) != w2 {
				t.Fatal("rank 0's reader of rank 2 woke for a receive from rank 1")
			}
			ra := e0.Post(transport.AnySource, transport.ExactMatch(transport.AnySource, transport.Key{Tag: 8}), 0, make([]byte, 1))
			waitFor("rank 0's reader of rank 2 woken by a receive from any source", func() bool { return transport.ReaderWakes(e0, 2) > w2 })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := e1.Send(ctx, 0, k, 0, []byte("hello")); err != nil {
				t.Fatal(err)
			}
			if src, err := r.Wait(ctx); err != nil || src != 1 {
				t.Fatalf("receive: from %d, %v", src, err)
			}
			if err := m.Endpoints[2].Send(ctx, 0, transport.Key{Tag: 8}, 0, []byte("x")); err != nil {
				t.Fatal(err)
			}
			if src, err := ra.Wait(ctx); err != nil || src != 2 {
				t.Fatalf("receive from any source: from %d, %v", src, err)
			}
			waitFor("rank 0's readers parked again after the receive", func() bool { return transport.ParkedReaders(e0) == 2 })
			// A second round: the readers' deadlines were cleared, so a
			// frame that arrives while parked is read.
			if err := e1.Send(ctx, 0, k, 0, []byte("again")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 5)
			if _, err := e0.Recv(ctx, 1, transport.ExactMatch(1, k), 0, buf); err != nil || string(buf) != "again" {
				t.Fatalf("second receive: %q, %v", buf, err)
			}
		})
	}
}

// TestHeldReadersPark: while the process's readers are held asleep (a
// CPU hog took their yields, cpuyield.Hold), a yielding reader that
// finds nothing sleeps at once, counted as parked, so that a receive
// posted for its peer can wake it; frames are still read and
// delivered, and afterwards every reader is parked again. (Before, a
// held reader slept uncounted, and under a busy machine's -race run
// TestYieldingReadersParkAndWake saw no reader parked for 5 s.)
func TestHeldReadersPark(t *testing.T) {
	for _, ring := range []bool{false, true} {
		t.Run(fmt.Sprintf("ring=%v", ring), func(t *testing.T) {
			release := transport.HoldReaders()
			defer release()
			m := newTCPMeshRing(t, 3, transport.YieldSpin, ring, ring, true)
			defer m.Close()
			e0, e1 := m.Endpoints[0], m.Endpoints[1]
			parked := func(what string) {
				t.Helper()
				deadline := time.Now().Add(5 * time.Second)
				for transport.ParkedReaders(e0) != 2 {
					if time.Now().After(deadline) {
						t.Fatalf("%s: rank 0's readers not both parked after 5 s (%d)", what, transport.ParkedReaders(e0))
					}
					time.Sleep(time.Millisecond)
				}
			}
			parked("held, no receive posted")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			k := transport.Key{Tag: 7}
			for i := range 3 {
				r := e0.Post(1, transport.ExactMatch(1, k), 0, make([]byte, 5))
				if err := e1.Send(ctx, 0, k, 0, []byte("hello")); err != nil {
					t.Fatal(err)
				}
				if src, err := r.Wait(ctx); err != nil || src != 1 {
					t.Fatalf("receive %d while held: from %d, %v", i, src, err)
				}
				parked(fmt.Sprintf("held, after receive %d", i))
			}
		})
	}
}

// TestSilentPeerIsLost: a peer that stops sending anything (its
// heartbeats stopped, its connections open, as a stopped process's or a
// cut-off host's) is declared lost within the timeout: a receive from it
// fails naming it, while a peer that is merely quiet (nothing to say for
// many timeouts) is kept alive by heartbeats, over the socket and over
// the shared-memory ring.
func TestSilentPeerIsLost(t *testing.T) {
	for _, ring := range []bool{false, true} {
		t.Run(fmt.Sprintf("ring=%v", ring), func(t *testing.T) {
			// A quiet peer's heartbeats were seen held up 330 ms on a
			// busy machine: a timeout of twice that.
			const timeout = 600 * time.Millisecond
			m := newTCPMeshWith(t, 3, transport.TCPOptions{PeerTimeout: timeout, SharedMemory: ring, ShmRing: ring, Spin: 50 * time.Microsecond})
			defer m.Close()
			e0, e2 := m.Endpoints[0], m.Endpoints[2]
			time.Sleep(4 * timeout) // quiet, not silent: heartbeats flow
			transport.StopHeartbeats(m.Endpoints[1])
			ctx, cancel := context.WithTimeout(context.Background(), 20*timeout)
			defer cancel()
			start := time.Now()
			_, err := e0.Recv(ctx, 1, transport.ExactMatch(1, transport.Key{Tag: 1}), 0, make([]byte, 4))
			took := time.Since(start)
			var pe *transport.PeerError
			if !errors.As(err, &pe) || pe.Rank != 1 || !errors.Is(err, transport.ErrSilent) {
				t.Fatalf("receive from the silent rank 1 after %v: %v; want a PeerError for rank 1 caused by its silence", took, err)
			}
			if took > 4*timeout { // the timeout and a tick, with room for a busy machine
				t.Errorf("rank 1 found silent after %v; want about the timeout %v", took, timeout)
			}
			if msg := err.Error(); !strings.Contains(msg, "nothing from rank 1") || !strings.Contains(msg, "on this host") {
				t.Errorf("error does not say which rank went silent and where: %v", msg)
			}
			// Rank 2 was as quiet as rank 1 all along, but sent heartbeats.
			k := transport.Key{Tag: 2}
			if err := e2.Send(ctx, 0, k, 0, []byte("live")); err != nil {
				t.Fatalf("rank 2, quiet but alive, is cut off: %v", err)
			}
			buf := make([]byte, 4)
			if _, err := e0.Recv(ctx, 2, transport.ExactMatch(2, k), 0, buf); err != nil || string(buf) != "live" {
				t.Fatalf("receive from rank 2: %q, %v", buf, err)
			}
		})
	}
}

// TestHeartbeatBehindLongPayload: a payload that takes several timeouts to
// arrive (its reader slow) holds the sender's link, so the sender's
// heartbeats wait behind it; its bytes, arriving all along, keep the
// sender alive in the receiver's eyes: no false alarm.
//
// The timeout is a second, not less: under the race detector, with other
// packages' tests on the same two CPUs, the sender's heartbeats were once
// starved for 330 ms before its payload began.
func TestHeartbeatBehindLongPayload(t *testing.T) {
	const timeout = time.Second
	m := newTCPMeshWith(t, 2, transport.TCPOptions{PeerTimeout: timeout})
	defer m.Close()
	e0, e1 := m.Endpoints[0], m.Endpoints[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 64 << 20
	k := transport.Key{Tag: 3}
	var got int
	r := e0.PostSink(1, transport.ExactMatch(1, k), 0, n, func(off int, b []byte) {
		got += len(b)
		time.Sleep(4 * time.Millisecond) // about 4 s for 64 MiB: several timeouts
	})
	errc := make(chan error, 1)
	go func() { errc <- e1.Send(ctx, 0, k, 0, make([]byte, n)) }()
	start := time.Now()
	if _, err := r.Wait(ctx); err != nil {
		t.Fatalf("receive of 64 MiB over %v (timeout %v): %v", time.Since(start), timeout, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); got != n || took < 4*timeout {
		t.Fatalf("got %d bytes in %v; want %d, over several timeouts (%v) for the test to mean anything", got, took, n, timeout)
	}
}

// TestTCPOnDemand runs the suite with connections made on first use
// (TCPOptions.OnDemand): plain, with polling readers, with shared memory
// and with the frame ring, which each pair sets up when it connects.
func TestTCPOnDemand(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  transport.TCPOptions
	}{
		{"plain", transport.TCPOptions{OnDemand: true}},
		{"spin", transport.TCPOptions{OnDemand: true, Spin: 200 * time.Microsecond}},
		{"shared-memory", transport.TCPOptions{OnDemand: true, SharedMemory: true}},
		{"ring-yield", transport.TCPOptions{OnDemand: true, SharedMemory: true, ShmRing: true, Spin: 200 * time.Microsecond, Yield: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, size int) transporttest.Mesh { return newTCPMeshWith(t, size, c.opt) })
		})
	}
}
