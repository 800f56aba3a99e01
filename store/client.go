package store

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/internal/handshake"
)

// DefaultTimeout bounds each call of a TCP store client whose
// DialOptions.Timeout is zero, as torch.distributed's default store timeout
// does.
const DefaultTimeout = 30 * time.Minute

// DialOptions configures a TCP store client.
type DialOptions struct {
	// Token is the job's shared secret; it must match the server's.
	Token []byte
	// JobID must match the server's ServerOptions.JobID.
	JobID string
	// Rank is the caller's rank, sent in the handshake for the server's
	// logs; -1 for a process without one (a tool).
	Rank int
	// Timeout bounds every call in addition to its ctx; 0 means
	// DefaultTimeout (30 minutes).
	Timeout time.Duration
	// ConnectTimeout bounds Dial (its retries and the handshake) in
	// addition to its ctx; 0 means Timeout.
	ConnectTimeout time.Duration
	// Logf, if set, hears a Dial that is still trying: ReportAfter after
	// it began, and then every six times as long, one line that names the
	// address, the time waited, the attempts, the last error and what to
	// check. (A rank that waits 30 minutes for a store that never answers
	// must not wait in silence.) Dial goes on trying until its timeout
	// either way: rank 0 may legitimately start late.
	Logf func(format string, args ...any)
	// ReportAfter is when Dial first reports to Logf (default 10 s; the
	// later reports then come every minute).
	ReportAfter time.Duration
	// KeepAlive is how often the client pings a server that has sent
	// nothing (default DefaultKeepAlive; negative: never). When nothing
	// comes from the server for three intervals, a ping included, the
	// connection is declared dead: every pending call (a blocked Get or
	// Wait included) and every later one fails with a *ConnError wrapping
	// ErrUnresponsive. The server answers pings however many calls are
	// parked on it.
	KeepAlive time.Duration
}

// DefaultKeepAlive is DialOptions.KeepAlive's default: a store host that
// stops answering (stopped, hung, cut off without a reset) is reported
// within about 30 seconds.
const DefaultKeepAlive = 10 * time.Second

// ErrUnresponsive is the cause of a *ConnError when the store's host
// stopped answering keep-alives while the connection stayed open.
var ErrUnresponsive = errors.New("the store host stopped answering (no reply to keep-alive pings)")

// Dial connects to the store server at addr ("host:port") and returns a
// Store that sends every call to it.
//
// The server may start after the client (as under torchrun): Dial retries
// refused connections with exponential backoff (10 ms doubling to 1 s, with
// jitter) until ctx or ConnectTimeout ends, and then fails with a *ConnError
// that wraps context.DeadlineExceeded and the last dial error. A handshake
// refusal (wrong or missing token, other job) is not retried: the error
// wraps handshake.ErrAuth or is a *handshake.MismatchError. While it
// retries, DialOptions.Logf hears about it (after 10 s, then every
// minute).
//
// The client multiplexes concurrent calls over one connection. When the
// connection dies, every pending call (blocked Gets and Waits included)
// fails at once with a *ConnError, and so does every later call; a server
// that stops answering while the connection stays open counts as dead
// after three keep-alive intervals (DialOptions.KeepAlive). A Get or
// Wait whose ctx ends returns at once and tells the server, with a CANCEL
// frame, to stop waiting for it; other calls go on. A Set, Add,
// CompareAndSet or Delete whose ctx ends after it was sent may still take
// effect on the server.
func Dial(ctx context.Context, addr string, opts DialOptions) (Store, error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	connect := opts.ConnectTimeout
	if connect <= 0 {
		connect = timeout
	}
	ctx, cancel := context.WithTimeout(ctx, connect)
	defer cancel()

	start := time.Now()
	backoff := 10 * time.Millisecond
	var lastErr error
	var d net.Dialer
	rep := &dialReport{addr: addr, start: start}
	if opts.Logf != nil {
		first := opts.ReportAfter
		if first <= 0 {
			first = 10 * time.Second
		}
		stop := rep.run(ctx, opts.Logf, first, 6*first)
		defer stop()
	}
	for attempt := 1; ; attempt++ {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			hs := handshake.Config{Proto: "store", JobID: opts.JobID, Rank: opts.Rank, Token: opts.Token}
			if dl, ok := ctx.Deadline(); ok {
				hs.Timeout = max(min(handshake.DefaultTimeout, time.Until(dl)), time.Millisecond)
			}
			if _, err = handshake.Client(conn, hs); err == nil {
				keepAlive := opts.KeepAlive
				if keepAlive == 0 {
					keepAlive = DefaultKeepAlive
				}
				return newClient(conn, addr, timeout, keepAlive), nil
			}
			conn.Close()
			var me *handshake.MismatchError
			if errors.Is(err, handshake.ErrAuth) || errors.As(err, &me) {
				return nil, fmt.Errorf("store tcp %s: %w", addr, err)
			}
		}
		if ctx.Err() == nil || lastErr == nil {
			lastErr = err
			rep.attempted(attempt, err)
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			// A name that does not resolve will not start to: say so now,
			// not at the end of the timeout.
			return nil, &ConnError{Addr: addr, Op: "dial", Err: fmt.Errorf("the host does not resolve (%w): check MASTER_ADDR", err)}
		}
		if ctx.Err() != nil {
			return nil, &ConnError{Addr: addr, Op: "dial", Err: fmt.Errorf("%w after %v and %d attempts (last error: %w)",
				ctx.Err(), time.Since(start).Round(time.Millisecond), attempt, lastErr)}
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, time.Second)
		t := time.NewTimer(sleep)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// dialReport tells DialOptions.Logf about a Dial that is still trying.
type dialReport struct {
	addr  string
	start time.Time
	mu    struct {
		sync.Mutex
		attempts int
		err      error // the last attempt's
	}
}

func (r *dialReport) attempted(n int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.attempts, r.mu.err = n, err
}

// run reports after first and then every later until ctx ends or stop is
// called; stop waits for a report under way.
func (r *dialReport) run(ctx context.Context, logf func(string, ...any), first, later time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(first)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			t.Reset(later)
			r.mu.Lock()
			n, err := r.mu.attempts, r.mu.err
			r.mu.Unlock()
			tried := "the first attempt has had no answer yet (a host that drops the packets, or the wrong address)"
			if err != nil {
				tried = fmt.Sprintf("%d attempts failed, the last with: %v", n, err)
			}
			left := "until its context ends"
			if dl, ok := ctx.Deadline(); ok {
				left = fmt.Sprintf("for another %v", time.Until(dl).Round(time.Second))
			}
			logf("store tcp %s: no store answers there after %v: %s; still trying %s: check that rank 0 (or the launcher serving the store) is running, that MASTER_ADDR and MASTER_PORT name its host and port, and that no firewall drops the port",
				r.addr, time.Since(r.start).Round(100*time.Millisecond), tried, left)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// client is the Store that Dial returns.
type client struct {
	addr    string
	name    string // "tcp " + addr, for errors
	conn    net.Conn
	timeout time.Duration

	readerDone chan struct{}
	cancels    sync.WaitGroup // CANCEL frames being sent, pings, the keep-alive loop

	keepAlive time.Duration // ping interval; 0: never
	heard     atomic.Int64  // when the server last showed life (unix ns): a read, or a large frame's write progressing
	pinging   atomic.Bool   // a ping is being written

	wmu sync.Mutex // serializes frame writes

	mu struct {
		sync.Mutex
		pending map[uint64]chan result
		nextID  uint64
		err     error // the terminal error once the connection failed or closed
		closed  bool
	}
}

type result struct {
	resp response
	err  error
}

var _ Store = (*client)(nil)

func newClient(conn net.Conn, addr string, timeout, keepAlive time.Duration) *client {
	c := &client{addr: addr, name: "tcp " + addr, conn: conn, timeout: timeout, readerDone: make(chan struct{})}
	c.mu.pending = make(map[uint64]chan result)
	c.heard.Store(time.Now().UnixNano())
	go c.reader()
	if keepAlive > 0 {
		c.keepAlive = max(keepAlive, time.Millisecond) // a ticker needs a positive half
		c.cancels.Add(1)
		go c.keepalive()
	}
	return c
}

// liveReader notes every read that brings bytes as a sign of life.
type liveReader struct{ c *client }

func (r liveReader) Read(p []byte) (int, error) {
	n, err := r.c.conn.Read(p)
	if n > 0 {
		r.c.heard.Store(time.Now().UnixNano())
	}
	return n, err
}

// keepalive pings a server that has been quiet for an interval, and
// fails the connection when nothing has come from it for three intervals
// although a ping went out at least one interval ago. It ends with the
// reader.
func (c *client) keepalive() {
	defer c.cancels.Done()
	t := time.NewTicker(c.keepAlive / 2)
	defer t.Stop()
	var pingAt time.Time // the last ping sent since the server was last heard; zero: none
	for {
		select {
		case <-c.readerDone:
			return
		case <-t.C:
		}
		now := time.Now()
		heard := time.Unix(0, c.heard.Load())
		if heard.After(pingAt) {
			pingAt = time.Time{}
		}
		quiet := now.Sub(heard)
		switch {
		case pingAt.IsZero() && quiet >= c.keepAlive:
			pingAt = now
			c.ping()
		case !pingAt.IsZero() && quiet >= 3*c.keepAlive && now.Sub(pingAt) >= c.keepAlive:
			c.fail(fmt.Errorf("%w for %v while the connection stayed open (a stopped or hung process, or a network that drops packets)", ErrUnresponsive, quiet.Round(time.Millisecond)))
			c.conn.Close() // the reader ends, and so do writes stuck on a full socket
			return
		}
	}
}

// ping sends a PING, whose answer nobody waits for: any byte from the
// server shows it alive. At most one is being written at a time.
func (c *client) ping() {
	if !c.pinging.CompareAndSwap(false, true) {
		return
	}
	c.mu.Lock()
	if c.mu.err != nil {
		c.mu.Unlock()
		c.pinging.Store(false)
		return
	}
	c.mu.nextID++
	id := c.mu.nextID
	c.cancels.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.cancels.Done()
		defer c.pinging.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), c.keepAlive)
		defer cancel()
		c.write(ctx, encodeRequest(nil, &request{id: id, kind: kindPing}))
	}()
}

// reader is the one goroutine that reads responses and hands each to the
// call waiting for it.
func (c *client) reader() {
	defer close(c.readerDone)
	// Buffered: a frame's header and small body in one read.
	r := bufio.NewReaderSize(liveReader{c}, readBuffer)
	for {
		resp, err := readResponse(r)
		if err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		ch := c.mu.pending[resp.id]
		delete(c.mu.pending, resp.id)
		c.mu.Unlock()
		if ch != nil {
			ch <- result{resp: resp} // buffered
		}
		// A response nobody waits for answers a call that gave up.
	}
}

// fail makes err the client's terminal error (unless it has one) and fails
// every pending call with it.
func (c *client) fail(err error) {
	c.mu.Lock()
	if c.mu.err == nil {
		c.mu.err = &ConnError{Addr: c.addr, Op: "call", Err: err}
	}
	pending := c.mu.pending
	c.mu.pending = make(map[uint64]chan result)
	terminal := c.mu.err
	c.mu.Unlock()
	for _, ch := range pending {
		ch <- result{err: terminal}
	}
}

func (c *client) Close() error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil
	}
	c.mu.closed = true
	if c.mu.err == nil {
		c.mu.err = fmt.Errorf("store %s: %w", c.name, ErrClosed)
	}
	c.mu.Unlock()
	c.fail(nil)
	err := c.conn.Close()
	<-c.readerDone
	c.cancels.Wait()
	return err
}

// call sends req and waits for its response.
func (c *client) call(ctx context.Context, req *request) (response, error) {
	start := time.Now()
	op := req.kind.String()
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return response{}, fmt.Errorf("store %s: %s: %w", c.name, op, ErrClosed)
	}
	c.mu.Unlock()
	if err := checkKeys(req.keys); err != nil {
		return response{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if ctx.Err() != nil {
		return response{}, timeoutErr(ctx, c.name, op, start, req.keys...)
	}

	ch := make(chan result, 1)
	c.mu.Lock()
	if c.mu.err != nil {
		err := c.mu.err
		c.mu.Unlock()
		return response{}, err
	}
	c.mu.nextID++
	req.id = c.mu.nextID
	c.mu.pending[req.id] = ch
	c.mu.Unlock()

	if err := c.write(ctx, encodeRequest(nil, req)); err != nil {
		c.forget(req.id)
		if ctx.Err() != nil {
			return response{}, timeoutErr(ctx, c.name, op, start, req.keys...)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) { // the deadline passed a hair before ctx noticed
			return response{}, &TimeoutError{Op: op, Keys: req.keys, Store: c.name, Waited: time.Since(start), Err: context.DeadlineExceeded}
		}
		return response{}, err
	}

	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		if c.forget(req.id) {
			if req.kind == kindGet || req.kind == kindWait {
				c.sendCancel(req.id)
			}
			return response{}, timeoutErr(ctx, c.name, op, start, req.keys...)
		}
		r = <-ch // the reader has it already: take it
	}
	if r.err != nil {
		return response{}, r.err
	}
	switch r.resp.status {
	case statusOK:
		return r.resp, nil
	case statusNotInteger:
		return response{}, fmt.Errorf("store %s: %w (%s)", c.name, ErrNotInteger, r.resp.body)
	default:
		if bytes.HasPrefix(r.resp.body, []byte(ErrFull.Error())) {
			return response{}, fmt.Errorf("store %s: %s: %w (%s)", c.name, op, ErrFull, bytes.TrimPrefix(r.resp.body, []byte(ErrFull.Error()+": ")))
		}
		if bytes.HasPrefix(r.resp.body, []byte(ErrWriteOnce.Error())) {
			return response{}, fmt.Errorf("store %s: %s: %w (%s)", c.name, op, ErrWriteOnce, bytes.TrimPrefix(r.resp.body, []byte(ErrWriteOnce.Error()+": ")))
		}
		return response{}, fmt.Errorf("store %s: %s: the server refused the request: %s", c.name, op, r.resp.body)
	}
}

// forget removes a pending call and reports whether it was still pending.
func (c *client) forget(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.mu.pending[id]
	delete(c.mu.pending, id)
	return ok
}

// write sends one frame, giving up at ctx's deadline. A frame cut short
// leaves the stream out of step, so the connection is then failed; a write
// that timed out before sending anything leaves it usable.
func (c *client) write(ctx context.Context, frame []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	dl, _ := ctx.Deadline()
	c.conn.SetWriteDeadline(dl)
	// A large frame goes in chunks, and each chunk the socket takes shows
	// the server alive (it reads, or the socket would be full): a long
	// upload is not taken for a silent server. A small write shows
	// nothing: it fits in the socket's buffer whoever is at the other end.
	var sent int
	var err error
	for sent < len(frame) {
		var n int
		n, err = c.conn.Write(frame[sent:min(len(frame), sent+writeChunk)])
		sent += n
		if err != nil {
			break
		}
		if len(frame) > writeChunk {
			c.heard.Store(time.Now().UnixNano())
		}
	}
	if err == nil {
		return nil
	}
	if sent == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	c.fail(err)
	c.conn.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.err
}

// writeChunk is how much of a frame write sends in one go.
const writeChunk = 1 << 20

// sendCancel tells the server, in the background, to stop waiting for
// request id.
func (c *client) sendCancel(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed || c.mu.err != nil {
		return
	}
	c.cancels.Add(1)
	go func() {
		defer c.cancels.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.write(ctx, encodeRequest(nil, &request{id: id, kind: kindCancel}))
	}()
}

func (c *client) Set(ctx context.Context, key string, value []byte) error {
	if err := checkValue(value); err != nil {
		return err
	}
	_, err := c.call(ctx, &request{kind: kindSet, keys: []string{key}, value: value})
	return err
}

func (c *client) Get(ctx context.Context, key string) ([]byte, error) {
	r, err := c.call(ctx, &request{kind: kindGet, keys: []string{key}})
	if err != nil {
		return nil, err
	}
	return r.body, nil // a fresh buffer per frame: the caller may own it
}

func (c *client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	r, err := c.call(ctx, &request{kind: kindAdd, keys: []string{key}, delta: delta})
	if err != nil {
		return 0, err
	}
	return c.decode(decodeInt64(r.body))
}

func (c *client) CompareAndSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	if err := checkValue(expected); err != nil {
		return nil, err
	}
	if err := checkValue(desired); err != nil {
		return nil, err
	}
	r, err := c.call(ctx, &request{kind: kindCAS, keys: []string{key}, value: expected, desired: desired})
	if err != nil {
		return nil, err
	}
	if len(r.body) == 0 || r.body[0] > 1 {
		return nil, fmt.Errorf("store %s: %w: compare-and-set response %.8x", c.name, errFrame, r.body)
	}
	if r.body[0] == 0 {
		return nil, nil // the key is missing
	}
	return r.body[1:], nil
}

func (c *client) Wait(ctx context.Context, keys ...string) error {
	_, err := c.call(ctx, &request{kind: kindWait, keys: keys})
	return err
}

func (c *client) Check(ctx context.Context, keys ...string) (bool, error) {
	r, err := c.call(ctx, &request{kind: kindCheck, keys: keys})
	if err != nil {
		return false, err
	}
	return c.decodeBool(decodeBool(r.body))
}

func (c *client) Delete(ctx context.Context, key string) (bool, error) {
	r, err := c.call(ctx, &request{kind: kindDelete, keys: []string{key}})
	if err != nil {
		return false, err
	}
	return c.decodeBool(decodeBool(r.body))
}

func (c *client) NumKeys(ctx context.Context) (int64, error) {
	r, err := c.call(ctx, &request{kind: kindNumKeys})
	if err != nil {
		return 0, err
	}
	return c.decode(decodeInt64(r.body))
}

func (c *client) decode(n int64, err error) (int64, error) {
	if err != nil {
		return 0, fmt.Errorf("store %s: %w", c.name, err)
	}
	return n, nil
}

func (c *client) decodeBool(b bool, err error) (bool, error) {
	if err != nil {
		return false, fmt.Errorf("store %s: %w", c.name, err)
	}
	return b, nil
}
