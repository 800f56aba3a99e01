package shmring

import (
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
)

// BenchmarkPingPong8B measures the round trip of an 8-byte message and
// its echo, ns/op being one round trip: through two rings with spinning
// consumers, and beside it through a loopback TCP connection, read by
// the runtime's poller (tcp) and by a spinning nonblocking read as
// transport's spinReader does (tcp-spin); between two goroutines of
// this process, and between this process and another.
func BenchmarkPingPong8B(b *testing.B) {
	b.Run("ring/goroutines", func(b *testing.B) {
		ma, mb := aligned(Size(4096)), aligned(Size(4096))
		ping, _ := Init(ma)
		pong, _ := Init(mb)
		done := make(chan struct{})
		go func() {
			var buf [8]byte
			var n int
			for {
				popSpin(ping, func(f []byte) { n = copy(buf[:], f) })
				pushSpin(pong, buf[:n])
				if n == 0 {
					close(done)
					return
				}
			}
		}()
		pingPongRing(b, ping, pong)
		<-done
	})
	b.Run("ring-parked/goroutines", func(b *testing.B) {
		// Both consumers park at once and sleep on a pipe: the round
		// trip when nobody spins (more ranks than cores).
		ma, mb := aligned(Size(4096)), aligned(Size(4096))
		ping, _ := Init(ma)
		pong, _ := Init(mb)
		pingR, pingW, _ := os.Pipe()
		pongR, pongW, _ := os.Pipe()
		defer func() { pingR.Close(); pingW.Close(); pongR.Close(); pongW.Close() }()
		done := make(chan struct{})
		go func() {
			var buf [8]byte
			var n int
			for {
				popPark(ping, pingR, func(f []byte) { n = copy(buf[:], f) })
				pushWake(pong, pongW, buf[:n])
				if n == 0 {
					close(done)
					return
				}
			}
		}()
		msg := []byte("8 bytes!")
		nop := func([]byte) {}
		b.ResetTimer()
		for range b.N {
			pushWake(ping, pingW, msg)
			popPark(pong, pongR, nop)
		}
		b.StopTimer()
		pushWake(ping, pingW, nil)
		popPark(pong, pongR, nop)
		<-done
	})
	b.Run("tcp/goroutines", func(b *testing.B) { tcpGoroutines(b, false) })
	b.Run("tcp-spin/goroutines", func(b *testing.B) { tcpGoroutines(b, true) })
	b.Run("ring/processes", func(b *testing.B) {
		p, pr := startPeer(b, "echo")
		ping, _ := Attach(p.a)
		pong, _ := Attach(p.b)
		pingPongRing(b, ping, pong)
		if err := pr.wait(); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("tcp-spin/processes", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		_, pr := startPeer(b, "tcpecho", envAddr+"="+ln.Addr().String())
		c, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		pingPongConn(b, c, spinReader(b, c))
		if err := pr.wait(); err != nil {
			b.Fatal(err)
		}
	})
}

const envAddr = "SHMRING_ADDR"

// pingPongRing sends b.N 8-byte frames on ping, each after the echo of
// the last came back on pong, then an empty one to end the echo.
func pingPongRing(b *testing.B, ping, pong *Ring) {
	msg := []byte("8 bytes!")
	nop := func([]byte) {}
	b.ResetTimer()
	for range b.N {
		pushSpin(ping, msg)
		popSpin(pong, nop)
	}
	b.StopTimer()
	pushSpin(ping, nil)
	popSpin(pong, nop)
}

func pushSpin(r *Ring, msg []byte) {
	for i := 0; ; i++ {
		_, err := r.TryPush(msg)
		if err == nil {
			return
		}
		if err != ErrFull {
			panic(err)
		}
		if i%128 == 127 {
			runtime.Gosched()
		}
	}
}

// popSpin polls r until it pops a frame, yielding now and then so that
// a spinning goroutine cannot starve the other at GOMAXPROCS 1.
func popSpin(r *Ring, fn func([]byte)) {
	for i := 0; ; i++ {
		ok, err := r.TryPop(fn)
		if err != nil {
			panic(err)
		}
		if ok {
			return
		}
		if i%128 == 127 {
			runtime.Gosched()
		}
	}
}

// popPark pops a frame from r, parking on an empty ring and sleeping
// until a byte comes on wake.
func popPark(r *Ring, wake *os.File, fn func([]byte)) {
	var buf [16]byte
	for {
		ok, err := r.TryPop(fn)
		if err != nil {
			panic(err)
		}
		if ok {
			return
		}
		if r.Park() {
			if _, err := wake.Read(buf[:]); err != nil {
				panic(err)
			}
			r.Unpark()
		}
	}
}

// pushWake pushes msg to r and writes a byte to wake when the consumer
// parked.
func pushWake(r *Ring, wake *os.File, msg []byte) {
	for {
		w, err := r.TryPush(msg)
		if err == ErrFull {
			runtime.Gosched()
			continue
		}
		if err != nil {
			panic(err)
		}
		if w {
			if _, err := wake.Write([]byte{1}); err != nil {
				panic(err)
			}
		}
		return
	}
}

func tcpGoroutines(b *testing.B, spin bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c1, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c1.Close()
	c2, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer c2.Close()
	r1, r2 := io.Reader(c1), io.Reader(c2)
	if spin {
		r1, r2 = spinReader(b, c1), spinReader(b, c2)
	}
	done := make(chan struct{})
	go func() {
		tcpEcho(c2, r2)
		close(done)
	}()
	pingPongConn(b, c1, r1)
	<-done
}

// tcpEcho echoes 8-byte messages until the connection ends.
func tcpEcho(w io.Writer, r io.Reader) {
	var buf [8]byte
	for {
		if _, err := io.ReadFull(r, buf[:]); err != nil {
			return
		}
		if _, err := w.Write(buf[:]); err != nil {
			return
		}
	}
}

func pingPongConn(b *testing.B, c net.Conn, r io.Reader) {
	msg := []byte("8 bytes!")
	var buf [8]byte
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r, buf[:]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	c.Close()
}

// spinRead reads a socket by polling it with nonblocking reads, never
// parking (transport's spinReader with an endless spin).
type spinRead struct{ rc syscall.RawConn }

func spinReader(tb testing.TB, c net.Conn) io.Reader {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	return spinRead{rc}
}

func (s spinRead) Read(p []byte) (int, error) {
	var n int
	var err error
	rerr := s.rc.Read(func(fd uintptr) bool {
		for i := 0; ; i++ {
			n, err = syscall.Read(int(fd), p)
			if err != syscall.EAGAIN && err != syscall.EINTR {
				return true
			}
			if i%128 == 127 {
				runtime.Gosched()
			}
		}
	})
	switch {
	case rerr != nil:
		return 0, rerr
	case err != nil:
		return 0, err
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// tcpEchoPeer is the peer process of tcp-spin/processes.
func tcpEchoPeer(t *testing.T) {
	c, err := net.Dial("tcp", os.Getenv(envAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tcpEcho(c, spinReader(t, c))
}
