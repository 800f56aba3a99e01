package store

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/godist/godist/internal/handshake"
)

// ServerOptions configures a Server.
type ServerOptions struct {
	// Token is the job's shared secret; clients must present the same one.
	// Empty means no authentication.
	Token []byte
	// JobID must match the clients' DialOptions.JobID.
	JobID string
	// Logf, if set, receives the refused and failed connections, at most
	// one line a second (with the count of those not told).
	Logf func(format string, args ...any)
	// MaxConns bounds the connections served at once (DefaultMaxConns
	// when zero; negative: none): one more is closed at once. The
	// process's descriptor limit bounds them too (RaiseFileLimit); the
	// server says so in Logf when it reaches it.
	MaxConns int
	// MaxBytes bounds the bytes of keys and values the store holds
	// (DefaultMaxBytes when zero; negative: none): a write past it fails
	// with an error wrapping ErrFull.
	MaxBytes int64
	// MaxInflight bounds the bytes of request bodies being received at
	// once over all connections (DefaultMaxInflight when zero; negative:
	// none), so that clients announcing large writes and sending them
	// slowly cannot make the server hold more: a frame past it drops its
	// connection. Bodies of 64 KiB or less are not counted.
	MaxInflight int64
}

// The server's default limits: far above what a job's rendezvous,
// addresses and object collectives use, far below what would exhaust a
// host.
const (
	DefaultMaxConns = 1 << 16
	DefaultMaxBytes = 256 << 20
	// DefaultMaxInflight admits one frame of the largest request (a
	// compare-and-set of two values of MaxValueLen): a smaller budget
	// refused a Set of MaxValueLen bytes by dropping the connection.
	DefaultMaxInflight = maxBody
)

// Server is a TCP store server: it keeps the data in memory and serves
// any number of clients made by Dial. Each connection is served by one
// reader goroutine (which decodes and executes requests) and one writer
// goroutine (which sends responses, so that a Set never waits on another
// client's socket). A blocked Get or Wait costs an entry in a table, not a
// goroutine: it parks on its keys and is answered by the Set that makes
// them exist. Nothing polls.
type Server struct {
	ln   net.Listener
	t    *table
	opts ServerOptions
	wg   sync.WaitGroup // the accept loop and every connection's goroutines

	inflight atomic.Int64 // bytes of request bodies being received (MaxInflight)

	mu struct {
		sync.Mutex
		conns  map[net.Conn]struct{}
		closed bool
	}
}

// NewServer listens on addr ("host:port"; port 0 picks a free one, see
// Addr) and serves in the background until Close. ctx bounds only the
// setting up of the listener.
func NewServer(ctx context.Context, addr string, opts ServerOptions) (*Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, errors.Join(errors.New("store: starting the tcp server"), err)
	}
	if opts.MaxConns == 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxInflight == 0 {
		opts.MaxInflight = DefaultMaxInflight
	}
	s := &Server{ln: ln, t: newTable(), opts: opts}
	s.t.limit = max(opts.MaxBytes, 0)
	s.mu.conns = make(map[net.Conn]struct{})
	logf := s.opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	// At most one line a second: an attack must not fill the log.
	var logMu sync.Mutex
	var last time.Time
	var quiet int
	s.opts.Logf = func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		if now := time.Now(); now.Sub(last) >= time.Second {
			if quiet > 0 {
				format += fmt.Sprintf(" (and %d more lines like it in the last second, not shown)", quiet)
			}
			last, quiet = now, 0
			logf(format, args...)
			return
		}
		quiet++
	}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr returns the address the server listens on, with the real port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server: it stops listening, closes every connection (so
// that every client's pending and later calls fail with a *ConnError), and
// waits for its goroutines to end. The data is dropped. Close is
// idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	err := s.ln.Close()
	for c := range s.mu.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.mu.closed
			s.mu.Unlock()
			if closed {
				return
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				s.mu.Lock()
				n := len(s.mu.conns)
				s.mu.Unlock()
				s.opts.Logf("store server %s: out of file descriptors at %d connections (soft limit %d): new clients wait in the listen queue; raise the limit (ulimit -n, LimitNOFILE=, or store.RaiseFileLimit before NewServer)", s.Addr(), n, fileLimit())
			} else {
				s.opts.Logf("store server %s: accept: %v", s.Addr(), err)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			conn.Close()
			return
		}
		if s.opts.MaxConns > 0 && len(s.mu.conns) >= s.opts.MaxConns {
			s.mu.Unlock()
			conn.Close()
			s.opts.Logf("store server %s: refused %s: %d connections already (ServerOptions.MaxConns)", s.Addr(), conn.RemoteAddr(), s.opts.MaxConns)
			continue
		}
		s.mu.conns[conn] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(conn)
	}
}

// serve runs one connection: the handshake, then requests until the
// connection ends.
func (s *Server) serve(conn net.Conn) {
	defer s.wg.Done()
	defer func() {
		conn.Close()
		s.mu.Lock()
		delete(s.mu.conns, conn)
		s.mu.Unlock()
	}()
	peer, err := handshake.Server(conn, handshake.Config{
		Proto: "store", JobID: s.opts.JobID, Rank: -1, Token: s.opts.Token,
	})
	if err != nil {
		s.opts.Logf("store server %s: refused %s: %v", s.Addr(), conn.RemoteAddr(), err)
		return
	}
	c := &serverConn{s: s, conn: conn, wake: make(chan struct{}, 1), done: make(chan struct{})}
	c.mu.waiting = make(map[uint64]*waiter)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writer()
	}()
	defer func() {
		c.shutdown()
		conn.Close() // unblocks a writer stuck on a client that does not read
		<-writerDone
	}()
	var held int64 // this connection's share of the in-flight budget
	release := func() {
		if held > 0 {
			s.inflight.Add(-held)
			held = 0
		}
	}
	defer release()
	reserve := func(n int) error {
		if s.opts.MaxInflight < 0 {
			return nil
		}
		if now := s.inflight.Add(int64(n)); now > s.opts.MaxInflight {
			s.inflight.Add(-int64(n))
			return fmt.Errorf("a body of %d bytes would take the server past %d bytes being received at once", n, s.opts.MaxInflight)
		}
		held = int64(n)
		return nil
	}
	// Buffered: a request's header and small body in one read, not two.
	r := bufio.NewReaderSize(conn, readBuffer)
	for {
		release() // the last request is handled: a Set's value now counts against MaxBytes
		req, err := readRequestReserving(r, reserve)
		if req == nil {
			if !errors.Is(err, net.ErrClosed) && !isEOF(err) {
				s.opts.Logf("store server %s: dropping rank %d at %s: %v", s.Addr(), peer.Rank, conn.RemoteAddr(), err)
			}
			return
		}
		if err != nil {
			c.send(encodeResponse(nil, req.id, statusBadRequest, []byte(err.Error())))
			continue
		}
		c.handle(req)
	}
}

// serverConn is the state of one client connection.
type serverConn struct {
	s    *Server
	conn net.Conn
	wake chan struct{} // has output; capacity 1
	done chan struct{} // closed by shutdown

	mu struct {
		sync.Mutex
		out     [][]byte           // frames for the writer
		writing bool               // a goroutine is writing to conn
		waiting map[uint64]*waiter // parked GET and WAIT requests by id
		closed  bool
	}
}

func (c *serverConn) handle(req *request) {
	t := c.s.t
	switch req.kind {
	case kindSet:
		// req.value is a fresh buffer: the table may own it
		if err := t.set(req.keys[0], req.value); err != nil {
			c.reply(encodeResponse(nil, req.id, statusBadRequest, []byte(err.Error())))
			return
		}
		c.okNow(req.id, nil)
	case kindGet:
		c.get(req.id, req.keys[0], true)
	case kindWait:
		w := &waiter{keys: req.keys}
		w.fire = func() { // on the reader of the connection whose Set released it
			c.unpark(req.id)
			c.ok(req.id, nil)
		}
		if !c.park(req.id, w) {
			return
		}
		if t.wait(w) {
			c.unpark(req.id)
			c.okNow(req.id, nil)
		}
	case kindAdd:
		n, err := t.add(req.keys[0], req.delta)
		if errors.Is(err, ErrFull) || errors.Is(err, ErrWriteOnce) {
			c.reply(encodeResponse(nil, req.id, statusBadRequest, []byte(err.Error())))
			return
		}
		if err != nil {
			c.reply(encodeResponse(nil, req.id, statusNotInteger, []byte(err.Error())))
			return
		}
		c.okNow(req.id, binary.BigEndian.AppendUint64(nil, uint64(n)))
	case kindCAS:
		v, err := t.cas(req.keys[0], req.value, clone(req.desired))
		if err != nil {
			c.reply(encodeResponse(nil, req.id, statusBadRequest, []byte(err.Error())))
			return
		}
		if v == nil {
			c.okNow(req.id, []byte{0}) // missing
			return
		}
		c.okNow(req.id, append([]byte{1}, v...))
	case kindCheck:
		c.okNow(req.id, boolByte(t.check(req.keys)))
	case kindDelete:
		ok, err := t.del(req.keys[0])
		if err != nil {
			c.reply(encodeResponse(nil, req.id, statusBadRequest, []byte(err.Error())))
			return
		}
		c.okNow(req.id, boolByte(ok))
	case kindNumKeys:
		c.okNow(req.id, binary.BigEndian.AppendUint64(nil, uint64(t.numKeys())))
	case kindCancel:
		if w := c.unpark(req.id); w != nil {
			t.cancel(w)
		}
	case kindPing:
		c.okNow(req.id, nil)
	}
}

// get answers a GET now if the key exists, or parks it. It runs again from
// the waiter when the key appears (and parks again if the key was deleted
// in between); own says it runs on this connection's reader, which may
// write the answer itself.
func (c *serverConn) get(id uint64, key string, own bool) {
	t := c.s.t
	for {
		if v, ok := t.get(key); ok {
			if own {
				c.okNow(id, v)
			} else {
				c.ok(id, v)
			}
			return
		}
		w := &waiter{keys: []string{key}}
		w.fire = func() { // on the reader of the connection whose Set released it
			c.unpark(id)
			c.get(id, key, false)
		}
		if !c.park(id, w) {
			return
		}
		if !t.wait(w) {
			return // parked
		}
		c.unpark(id) // it appeared meanwhile: look again
	}
}

// park records w under id so that CANCEL and the end of the connection
// can unpark it; it reports false if the connection is closed.
func (c *serverConn) park(id uint64, w *waiter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return false
	}
	c.mu.waiting[id] = w
	return true
}

func (c *serverConn) unpark(id uint64) *waiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.mu.waiting[id]
	delete(c.mu.waiting, id)
	return w
}

// ok queues a success for the writer (from another connection's reader).
func (c *serverConn) ok(id uint64, body []byte) {
	c.send(encodeResponse(nil, id, statusOK, body))
}

// okNow answers a success from this connection's own reader.
func (c *serverConn) okNow(id uint64, body []byte) {
	c.reply(encodeResponse(nil, id, statusOK, body))
}

// reply answers a request of this connection from its own reader: it
// writes the frame at once when nothing is being written or queued (one
// goroutine switch less a request, most of a small request's cost at
// thousands of clients), and otherwise queues it behind the frames before
// it. Only this connection's reader waits on the write, as it would wait
// on a client that does not read anyway.
func (c *serverConn) reply(frame []byte) {
	c.mu.Lock()
	if c.mu.closed || c.mu.writing || len(c.mu.out) > 0 {
		c.mu.Unlock()
		c.send(frame)
		return
	}
	c.mu.writing = true
	c.mu.Unlock()
	_, err := c.conn.Write(frame)
	c.mu.Lock()
	c.mu.writing = false
	queued := len(c.mu.out) > 0
	c.mu.Unlock()
	if err != nil {
		c.conn.Close() // the reader sees it and ends the connection
		return
	}
	if queued {
		c.wakeWriter()
	}
}

// send queues a frame for the writer; it never blocks. Answers that
// another connection's request releases (a parked GET or WAIT) come this
// way, so that no client waits on another's socket.
func (c *serverConn) send(frame []byte) {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return
	}
	c.mu.out = append(c.mu.out, frame)
	c.mu.Unlock()
	c.wakeWriter()
}

func (c *serverConn) wakeWriter() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *serverConn) writer() {
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		for {
			c.mu.Lock()
			if c.mu.writing || len(c.mu.out) == 0 {
				// The reader is writing; it wakes the writer again if
				// frames wait when it is done.
				c.mu.Unlock()
				break
			}
			out := c.mu.out
			c.mu.out = nil
			c.mu.writing = true
			c.mu.Unlock()
			bufs := net.Buffers(out)
			_, err := bufs.WriteTo(c.conn)
			c.mu.Lock()
			c.mu.writing = false
			c.mu.Unlock()
			if err != nil {
				c.conn.Close() // the reader sees it and ends the connection
				return
			}
		}
	}
}

// shutdown unparks every waiter of the connection and stops the writer.
func (c *serverConn) shutdown() {
	c.mu.Lock()
	c.mu.closed = true
	waiting := c.mu.waiting
	c.mu.waiting = nil
	c.mu.out = nil
	c.mu.Unlock()
	for _, w := range waiting {
		c.s.t.cancel(w)
	}
	close(c.done)
}

func boolByte(b bool) []byte {
	if b {
		return []byte{1}
	}
	return []byte{0}
}

// isEOF reports whether err is the ordinary end of a connection, which is
// not worth a log line.
func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}
