package transport

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/godist/godist/internal/handshake"
	"github.com/godist/godist/internal/simd"
	"github.com/godist/godist/store"
	"github.com/godist/godist/transport/internal/shmring"
)

// TCPOptions configure NewTCP.
type TCPOptions struct {
	Rank, Size int
	// Store is where the ranks publish and find each other's addresses.
	Store store.Store
	// Prefix namespaces the store keys (one prefix per endpoint a job
	// builds, e.g. per restart).
	Prefix string
	// Host is the address other ranks reach this one at (default
	// 127.0.0.1); the listener binds Host:0 unless Listen is set.
	Host   string
	Listen string
	// JobID and Token authenticate every connection (see
	// internal/handshake): without the token a peer is dropped after the
	// handshake's bounded bytes.
	JobID string
	Token []byte
	// SocketBuffer sets SO_SNDBUF/SO_RCVBUF when positive (default 4 MiB).
	SocketBuffer int
	// Spin is how long a connection's reader polls the socket before it
	// parks in the runtime's poller (DefaultSpin computes the usual
	// value); 0 or less never polls.
	Spin time.Duration
	// Yield makes a polling reader (of a socket or of the frame ring)
	// give its CPU to other processes between polls (sched_yield), not
	// only to this process's goroutines, and keep polling when it finds
	// it lost its CPU meanwhile (which yielding makes the rule): for a
	// host running more ranks than CPUs, where a rank that polls without
	// yielding holds the CPU its peer needs to answer, and one that parks
	// pays a wake-up for every message (DefaultPolling). A yielding
	// reader polls only while a receive from its peer is posted, and
	// posting one wakes it (wake.go).
	Yield bool
	// PeerTimeout is how long a peer may send nothing, not even a
	// heartbeat, before it is declared lost (its host down or cut off,
	// its processes stopped): receives from it then fail with a
	// *PeerError whose cause is a *SilentError (heartbeat.go). A rank
	// sends a heartbeat to each peer it has sent nothing to for
	// PeerTimeout/5. 0: DefaultPeerTimeout; negative: never.
	PeerTimeout time.Duration
	// SharedMemory lets peers on the same host move large payloads through
	// shared memory (see shm.go); headers still go over TCP. A pair uses
	// it only when both ranks enable it.
	SharedMemory bool
	// ShmRing (with SharedMemory) sends every frame between two ranks of
	// the same host, headers and small payloads included, through a ring
	// in their shared segment that the receiver polls, instead of over
	// the socket, which then carries only wakeups (when the receiver has
	// stopped polling), frames too large for the ring, and the end of the
	// connection (so a dead peer is still noticed at once). A pair uses it
	// only when both ranks ask for it. Experimental; off by default.
	ShmRing bool
	// Logger receives the fallbacks that change how the endpoint behaves
	// (shared memory asked for but not set up with a peer, and why); the
	// endpoint keeps it for its users (Endpoint.Logger). nil discards.
	Logger *slog.Logger
}

// NewTCP connects this rank to every other rank over TCP and returns its
// endpoint. Each rank listens, publishes its address in the store, dials
// every lower rank and accepts every higher one; every connection starts
// with the authenticated handshake. It returns when all size-1 connections
// are up, or fails when ctx ends, naming the ranks still missing.
func NewTCP(ctx context.Context, opt TCPOptions) (*Endpoint, error) {
	if opt.Size < 1 || opt.Rank < 0 || opt.Rank >= opt.Size {
		return nil, fmt.Errorf("transport: rank %d of world size %d", opt.Rank, opt.Size)
	}
	if opt.Host == "" {
		opt.Host = "127.0.0.1"
	}
	if opt.Listen == "" {
		opt.Listen = net.JoinHostPort(opt.Host, "0")
	}
	if opt.SocketBuffer == 0 {
		opt.SocketBuffer = 4 << 20
	}
	e := newEndpoint(opt.Rank, opt.Size)
	if opt.Logger != nil {
		e.log = opt.Logger
	}
	if opt.Size == 1 {
		return e, nil
	}
	ln, err := net.Listen("tcp", opt.Listen)
	if err != nil {
		return nil, fmt.Errorf("transport: rank %d: listen on %s: %w", opt.Rank, opt.Listen, err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	addr := net.JoinHostPort(opt.Host, strconv.Itoa(port))
	// The rank's record: its address and the public half of a key made
	// for this endpoint, under a write-once key. The first process to
	// publish as a rank holds it; every handshake proves it with the
	// private half, so no other process can take its place.
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("transport: rank %d: making its key: %w", opt.Rank, err)
	}
	// Until NewTCP returns, a rank that dies is watched for (initwatch.go),
	// and every wait below ends with the first death seen.
	watch := newInitWatch(ctx, opt.Store, opt.Prefix+"transport/abort", opt.Rank)
	defer watch.stop()
	records := &rankRecords{store: opt.Store, prefix: opt.Prefix, ctx: watch.ctx, rank: opt.Rank, size: opt.Size}
	mine := rankRecord{addr: addr, key: pub}
	got, err := opt.Store.CompareAndSet(ctx, records.key(opt.Rank), nil, mine.encode())
	if err != nil {
		return nil, fmt.Errorf("transport: rank %d: publish its address: %w", opt.Rank, err)
	}
	if string(got) != string(mine.encode()) {
		other, _ := decodeRankRecord(got)
		return nil, &DuplicateRankError{Rank: opt.Rank, Addr: addr, Other: other.addr}
	}
	hs := handshake.Config{Proto: "transport", JobID: opt.JobID, Rank: opt.Rank, Size: opt.Size, Token: opt.Token,
		Identity: priv, PeerKey: records.peerKey}
	wctx := watch.ctx

	type result struct {
		rank int
		conn net.Conn
		err  error
	}
	results := make(chan result, opt.Size)
	var wg sync.WaitGroup
	// Dial every lower rank.
	for r := 0; r < opt.Rank; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := dialPeer(wctx, records, r, hs)
			results <- result{r, conn, err}
		}()
	}
	// Accept every higher rank; refuse anything else. The listener stays
	// open until NewTCP returns (the probes of lower ranks that have not
	// heard from this one yet take a refusal for its death).
	acceptCtx, stopAccept := context.WithCancel(wctx)
	go func() {
		<-acceptCtx.Done()
		ln.Close()
	}()
	expect := opt.Size - 1 - opt.Rank
	var mu sync.Mutex
	seen := map[int]bool{} // the higher ranks connected
	connected := func(r int) bool {
		mu.Lock()
		defer mu.Unlock()
		return seen[r]
	}
	for r := opt.Rank + 1; r < opt.Size; r++ {
		watch.probe(r, records, connected)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Handshakes run concurrently, at most maxPendingHandshakes at
		// once, each bounded by the handshake's own deadline: a slow or
		// silent connection delays no one (a connection beyond the bound
		// is closed at once; a member's dial retries).
		sem := make(chan struct{}, maxPendingHandshakes)
		var hwg sync.WaitGroup
		defer hwg.Wait()
		for {
			mu.Lock()
			done := len(seen) >= expect
			mu.Unlock()
			if done {
				return // the kernel still completes (probes') connections until ln closes
			}
			conn, err := ln.Accept()
			if err != nil {
				mu.Lock()
				done := len(seen) >= expect
				mu.Unlock()
				if !done && acceptCtx.Err() == nil {
					results <- result{-1, nil, fmt.Errorf("accept: %w", err)}
				}
				return
			}
			select {
			case sem <- struct{}{}:
			default:
				conn.Close() // too many handshakes under way
				continue
			}
			hwg.Add(1)
			go func() {
				defer hwg.Done()
				defer func() { <-sem }()
				stop := context.AfterFunc(acceptCtx, func() { conn.Close() })
				peer, err := handshake.Server(conn, hs)
				stop()
				mu.Lock()
				ok := err == nil && acceptCtx.Err() == nil && peer.Rank > opt.Rank && peer.Rank < opt.Size && !seen[peer.Rank]
				if ok {
					seen[peer.Rank] = true
				}
				mu.Unlock()
				if !ok {
					conn.Close() // unauthenticated, foreign, a duplicate or a probe: dropped, nothing changed
					return
				}
				results <- result{peer.Rank, conn, nil}
			}()
		}
	}()
	// The accept loop may wait in Accept after the last member: only the
	// listener's closing ends it.
	defer func() {
		stopAccept()
		wg.Wait()
	}()

	conns := make([]net.Conn, opt.Size)
	fail := func(err error) (*Endpoint, error) {
		if pe := watch.settle(); pe != nil {
			err = fmt.Errorf("transport: rank %d: %w", opt.Rank, pe) // the death, not what it made fail here
		}
		stopAccept()
		wg.Wait()
		close(results)
		for r := range results {
			if r.conn != nil {
				r.conn.Close()
			}
		}
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		// The segments of a rank that died here are nobody's: remove
		// them, and this rank's own (all of them, whoever created them,
		// are useless now).
		tags := []string{segTag(pub)}
		records.mu.Lock()
		for _, rec := range records.cache {
			tags = append(tags, segTag(rec.key))
		}
		records.mu.Unlock()
		removeSegs(tags)
		return nil, err
	}
	for got := 0; got < opt.Size-1; {
		select {
		case r := <-results:
			if r.err != nil {
				var ge *goneError
				if errors.As(r.err, &ge) {
					return fail(watch.gone(ge.rank, ge.why))
				}
				return fail(fmt.Errorf("transport: rank %d: %w", opt.Rank, r.err))
			}
			conns[r.rank] = r.conn
			watch.watchConn(r.rank, r.conn)
			got++
		case <-wctx.Done():
			if pe := watch.cause(); pe != nil {
				return fail(pe)
			}
			var missing []int
			for r := range conns {
				if r != opt.Rank && conns[r] == nil {
					missing = append(missing, r)
				}
			}
			return fail(fmt.Errorf("transport: rank %d: no connection from ranks %v before the deadline: %w (are they running, with the same job id and token?)", opt.Rank, missing, ctx.Err()))
		}
	}
	shmOuts, shmIns, hosts, err := setupShm(wctx, opt.Store, opt.Prefix, opt.Rank, opt.Size, opt.SharedMemory, opt.SharedMemory && opt.ShmRing, e.log, segTag(pub), func(p int) string {
		rec, err := records.get(wctx, p) // known: p has connected
		if err != nil {
			return ""
		}
		return segTag(rec.key)
	})
	if err == nil {
		err = allReady(wctx, opt.Store, opt.Prefix, opt.Size)
	}
	if err == nil {
		// Stop watching; a death seen until now still fails NewTCP.
		watch.stop()
		if pe := watch.cause(); pe != nil {
			err = pe
		}
	}
	if err != nil {
		closeSegs(shmOuts, shmIns)
		return fail(fmt.Errorf("transport: rank %d: finishing the setup (shared memory, every rank ready): %w", opt.Rank, err))
	}
	e.hosts = hosts
	if opt.Yield && opt.Spin > 0 {
		e.wakers = make([]*waker, opt.Size)
		for r, c := range conns {
			if c != nil {
				e.wakers[r] = &waker{conn: c}
			}
		}
	}
	for r, c := range conns {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
			tc.SetReadBuffer(opt.SocketBuffer)
			tc.SetWriteBuffer(opt.SocketBuffer)
		}
		l := newTCPLink(c)
		if shmOuts[r] != nil {
			l.shm = &shmOut{seg: shmOuts[r], down: &e.gone[r]}
			l.ring = shmOuts[r].ring
		}
		e.links[r] = l
		if in := shmIns[r]; in != nil && in.ring != nil {
			go e.readRing(r, c, opt.Spin, opt.Yield, in)
		} else {
			go e.readLoop(r, c, opt.Spin, opt.Yield, in)
		}
	}
	if opt.PeerTimeout >= 0 {
		timeout := opt.PeerTimeout
		if timeout == 0 {
			timeout = DefaultPeerTimeout
		}
		e.watchDone = make(chan struct{})
		go e.watch(timeout, conns, e.watchDone)
	}
	return e, nil
}

// allReady waits until every rank has finished its setup: a rank that
// dies before it has cannot leave the others with an endpoint (the
// watchers end ctx); one that dies after it did so after its NewTCP had
// all it needed, and its peers learn of it as of any death later.
func allReady(ctx context.Context, st store.Store, prefix string, size int) error {
	n, err := st.Add(ctx, prefix+"transport/ready", 1)
	if err != nil {
		return err
	}
	if n == int64(size) {
		if err := st.Set(ctx, prefix+"transport/ready/all", nil); err != nil {
			return err
		}
	}
	_, err = st.Get(ctx, prefix+"transport/ready/all")
	return err
}

// maxPendingHandshakes bounds the handshakes a listener runs at once.
const maxPendingHandshakes = 128

// DuplicateRankError reports that another process published itself as
// this rank first: two processes were started with the same RANK, or a
// process of an earlier attempt of the job is still running.
type DuplicateRankError struct {
	Rank  int
	Addr  string // this process's address
	Other string // the address of the process that holds the rank
}

func (e *DuplicateRankError) Error() string {
	return fmt.Sprintf("transport: rank %d is taken: the process at %s registered as rank %d before this one (at %s); two processes were started with RANK=%d, or one of an earlier attempt of this job still runs, or the store holds an earlier job's records (use a fresh store or job id); give every process its own RANK",
		e.Rank, e.Other, e.Rank, e.Addr, e.Rank)
}

// rankRecord is what a rank publishes: its address and public key.
type rankRecord struct {
	addr string
	key  ed25519.PublicKey
}

func (r rankRecord) encode() []byte {
	return []byte(r.addr + " " + hex.EncodeToString(r.key))
}

func decodeRankRecord(b []byte) (rankRecord, error) {
	addr, k, ok := strings.Cut(string(b), " ")
	key, err := hex.DecodeString(k)
	if !ok || err != nil || len(key) != ed25519.PublicKeySize {
		return rankRecord{addr: string(b)}, fmt.Errorf("malformed rank record %q", b)
	}
	return rankRecord{addr: addr, key: key}, nil
}

// rankRecords reads the ranks' records from the store, once each.
type rankRecords struct {
	store      store.Store
	prefix     string
	ctx        context.Context
	rank, size int // this rank's, and the world's
	mu         sync.Mutex
	cache      map[int]rankRecord
}

func (rs *rankRecords) key(r int) string {
	return rs.prefix + "transport/once/rank/" + strconv.Itoa(r)
}

// get waits for rank r's record.
func (rs *rankRecords) get(ctx context.Context, r int) (rankRecord, error) {
	rs.mu.Lock()
	rec, ok := rs.cache[r]
	rs.mu.Unlock()
	if ok {
		return rec, nil
	}
	b, err := rs.store.Get(ctx, rs.key(r))
	if err != nil {
		return rankRecord{}, fmt.Errorf("address of rank %d: %w", r, err)
	}
	if rec, err = decodeRankRecord(b); err != nil {
		return rankRecord{}, fmt.Errorf("rank %d: %w", r, err)
	}
	rs.mu.Lock()
	if rs.cache == nil {
		rs.cache = map[int]rankRecord{}
	}
	rs.cache[r] = rec
	rs.mu.Unlock()
	return rec, nil
}

// peerKey is the handshake's PeerKey: rank r's published key, waited for
// at most as long as a handshake.
func (rs *rankRecords) peerKey(r int) (ed25519.PublicKey, error) {
	if r < 0 || r >= rs.size || r == rs.rank {
		return nil, fmt.Errorf("no rank %d to connect with (world size %d, this is rank %d)", r, rs.size, rs.rank)
	}
	ctx, cancel := context.WithTimeout(rs.ctx, handshake.DefaultTimeout)
	defer cancel()
	rec, err := rs.get(ctx, r)
	return rec.key, err
}

// dialPeer waits for rank r's record in the store, connects with retry
// and performs the handshake.
func dialPeer(ctx context.Context, records *rankRecords, r int, hs handshake.Config) (net.Conn, error) {
	rec, err := records.get(ctx, r)
	if err != nil {
		return nil, err
	}
	addr := rec.addr
	var d net.Dialer
	backoff := 10 * time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "tcp", string(addr))
		if err == nil {
			peer, herr := handshake.Client(conn, hs)
			if herr == nil {
				if peer.Rank != r {
					conn.Close()
					return nil, fmt.Errorf("%s answered as rank %d, expected rank %d", addr, peer.Rank, r)
				}
				return conn, nil
			}
			conn.Close()
			if !isConnDrop(herr) {
				return nil, fmt.Errorf("handshake with rank %d at %s: %w", r, addr, herr)
			}
			// Dropped mid-handshake: r died, or its listener had too many
			// handshakes under way. A refused connection tells which; an
			// open listener is tried again.
			c, perr := d.DialContext(ctx, "tcp", addr)
			if perr == nil {
				c.Close()
			} else if errors.Is(perr, syscall.ECONNREFUSED) {
				return nil, &goneError{rank: r, why: fmt.Sprintf("it dropped the handshake (%v) and its listener at %s now refuses connections: the process exited", herr, addr)}
			}
			err = herr
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			// r published its address after it began listening, and
			// listens until it has connected to every rank, this one
			// included: a refusal means its process is gone.
			return nil, &goneError{rank: r, why: fmt.Sprintf("its listener at %s refuses connections: the process exited", addr)}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to rank %d at %s: %w (last error: %v)", r, addr, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// isConnDrop reports whether err is a connection the peer ended (closed
// or reset) rather than a refusal in the handshake's protocol.
func isConnDrop(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// tcpLink writes frames to one connection.
type tcpLink struct {
	mu   sync.Mutex // one frame at a time
	conn net.Conn
	raw  syscall.RawConn // conn's descriptor; nil when conn is not a socket
	hdr  [HeaderSize]byte
	bufs net.Buffers   // the frame being written (reused)
	iov  []unix.Iovec  // bufs for writev (reused)
	shm  *shmOut       // same-host peer's segment, or nil
	ring *shmring.Ring // the frame ring in it (TCPOptions.ShmRing), or nil
}

func newTCPLink(conn net.Conn) *tcpLink {
	l := &tcpLink{conn: conn}
	if sc, ok := conn.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			l.raw = rc
		}
	}
	return l
}

func (l *tcpLink) send(ctx context.Context, h *Header, payload [][]byte) (err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return notSent{err}
	}
	if l.shm != nil && h.Kind == KindMessage && totalLen(payload) >= fragMin {
		return l.sendFragments(ctx, h, payload)
	}
	if l.shm != nil && (h.Kind == KindData || h.Kind == KindMessage) {
		var n int
		for _, p := range payload {
			n += len(p)
		}
		if n >= shmMinFrame && n <= shmSlotSize {
			// The payload goes through the next shared-memory slot; the
			// header, naming the slot, goes over TCP.
			i, aerr := l.shm.acquire(ctx)
			if aerr != nil {
				if ctx.Err() != nil {
					return notSent{aerr}
				}
				return aerr
			}
			copyParts(l.shm.seg.slot(i), payload) // no checksum (memPayload.slot)
			h.CRC = 0
			l.shm.seg.state(i).Store(1)
			h.Slot = uint8(i)
			if h.Kind == KindData {
				h.Kind = KindShmData
			} else {
				h.Kind = KindShmMessage
			}
			payload = nil
			defer func() {
				if _, ok := err.(notSent); ok {
					l.shm.release(i) // the header never left: the slot is free again
				}
			}()
		}
	}
	if h.Kind != KindShmData && h.Kind != KindShmMessage {
		h.CRC = Checksum(payload...)
	}
	h.encode(l.hdr[:])
	bufs := append(l.bufs[:0], l.hdr[:])
	for _, p := range payload {
		if len(p) > 0 {
			bufs = append(bufs, p)
		}
	}
	l.bufs = bufs
	defer clear(l.bufs) // keep no tensor alive
	return l.write(ctx, bufs)
}

// write sends bufs, one frame, to the peer: through the ring when the
// link has one (a frame too large for it goes on the socket after a
// marker in the ring that tells the reader to read it there, so the order
// holds), else on the socket. l.mu is held.
func (l *tcpLink) write(ctx context.Context, bufs net.Buffers) error {
	if l.ring == nil {
		return l.writeAll(ctx, bufs)
	}
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	if n <= l.ring.MaxFrame() {
		return l.ringPush(ctx, bufs)
	}
	if err := l.ringPush(ctx, nil); err != nil { // the marker: an empty frame
		return err
	}
	if err := l.writeAll(ctx, bufs); err != nil {
		if ns, ok := err.(notSent); ok {
			return ns.err // the marker is out: the stream is cut
		}
		return err
	}
	return nil
}

// ringPush pushes one frame into the ring, waiting while it is full, and
// wakes the reader when it had stopped polling. It returns notSent when
// ctx ended before the frame went in.
func (l *tcpLink) ringPush(ctx context.Context, parts [][]byte) error {
	var start time.Time
	for {
		wake, err := l.ring.TryPush(parts...)
		if err == nil {
			if wake {
				// A wakeup must not be cancelled: the frame is in.
				if err := l.writeAll(context.Background(), net.Buffers{[]byte{0}}); err != nil {
					return fmt.Errorf("transport: waking the peer: %w", err)
				}
			}
			return nil
		}
		if !errors.Is(err, shmring.ErrFull) {
			return err
		}
		if l.shm.down.Load() || l.shm.closed.Load() {
			return fmt.Errorf("transport: the frame ring is full and the connection is closed")
		}
		if err := ctx.Err(); err != nil {
			return notSent{err}
		}
		backoff(&start)
	}
}

// writeAll writes bufs as one frame. l.mu is held. It returns notSent when
// ctx ended before any byte left.
func (l *tcpLink) writeAll(ctx context.Context, bufs net.Buffers) error {
	// Most frames fit in the socket's buffer: one writev that cannot block
	// needs no cancellation. Only the rest of a frame that does not fit
	// waits on the socket, and only that wait watches ctx.
	n, err := l.tryWritev(bufs)
	if err != nil {
		return err
	}
	started := n > 0
	for n > 0 && len(bufs) > 0 {
		if n < len(bufs[0]) {
			bufs[0] = bufs[0][n:]
			break
		}
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	if len(bufs) == 0 {
		return nil
	}
	if ctx.Done() != nil {
		// ctx's deadline, if any, closes Done too: then the write stops.
		// (Setting the socket's write deadline on every send instead costs
		// two timer updates per frame, a third of a small message's time.)
		var mu sync.Mutex
		finished := false
		stop := context.AfterFunc(ctx, func() {
			mu.Lock()
			defer mu.Unlock()
			if !finished {
				l.conn.SetWriteDeadline(time.Now())
			}
		})
		defer func() {
			mu.Lock()
			finished = true
			mu.Unlock()
			if !stop() {
				l.conn.SetWriteDeadline(time.Time{}) // it fired: undo it
			}
		}()
	}
	m, err := bufs.WriteTo(l.conn) // writev: header and tensor bytes, no copy
	if err != nil && !started && m == 0 && ctx.Err() != nil {
		return notSent{ctx.Err()}
	}
	return err
}

// tryWritev makes one writev of bufs that does not wait for the socket,
// and returns how many bytes it took (0 when the socket buffer is full).
func (l *tcpLink) tryWritev(bufs [][]byte) (int, error) {
	if l.raw == nil {
		return 0, nil
	}
	l.iov = l.iov[:0]
	for _, b := range bufs {
		v := unix.Iovec{Base: &b[0]}
		v.SetLen(len(b))
		l.iov = append(l.iov, v)
	}
	defer clear(l.iov)
	var n uintptr
	var errno syscall.Errno
	err := l.raw.Write(func(fd uintptr) bool {
		for {
			n, _, errno = syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&l.iov[0])), uintptr(len(l.iov)))
			if errno != syscall.EINTR {
				return true // never wait here
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno == syscall.EAGAIN:
		return 0, nil
	case errno != 0:
		return 0, os.NewSyscallError("writev", errno)
	}
	return int(n), nil
}

func (l *tcpLink) close() error {
	if l.shm != nil {
		l.shm.closed.Store(true)
	}
	err := l.conn.Close()
	l.mu.Lock()
	if l.shm != nil {
		l.shm.seg.unmap()
		l.shm, l.ring = nil, nil
	}
	l.mu.Unlock()
	return err
}

// readLoop reads frames from rank r until the connection ends.
func (e *Endpoint) readLoop(r int, conn net.Conn, spin time.Duration, yield bool, shm *shmSeg) {
	defer shm.unmap()
	var w *waker
	if e.wakers != nil {
		w = e.wakers[r]
	}
	br := bufio.NewReaderSize(countingReader{socketReader(conn, spin, yield, w, e.receiveWaits), &e.live[r].heard}, viewMax)
	in := &streamPayload{br}
	var asm assembly
	for {
		if err := e.readFrame(r, br, in, shm, &asm); err != nil {
			e.endRead(r, conn, err)
			return
		}
	}
}

// endRead ends a reader on err: the connection's end, or a broken frame
// (then the connection is closed too).
func (e *Endpoint) endRead(r int, conn net.Conn, err error) {
	e.spares[r].close()
	var fe frameErr
	if errors.As(err, &fe) {
		e.peerDown(r, fe.err)
		conn.Close()
		return
	}
	if errors.Is(err, net.ErrClosed) {
		err = ErrClosed
	}
	e.peerDown(r, err)
}

// frameErr marks a frame that breaks the protocol: the reader closes the
// connection.
type frameErr struct{ err error }

func (f frameErr) Error() string { return f.err.Error() }

// readFrame reads one frame's header from the socket and handles it.
func (e *Endpoint) readFrame(r int, br *bufio.Reader, in payload, shm *shmSeg, asm *assembly) error {
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(br, hb[:]); err != nil {
		return err
	}
	h, err := decodeHeader(hb[:])
	if err != nil {
		return frameErr{err}
	}
	return e.handleFrame(r, &h, in, shm, asm)
}

// handleFrame delivers one frame whose payload is in (or in a slot of
// shm). An error is a frameErr.
func (e *Endpoint) handleFrame(r int, h *Header, in payload, shm *shmSeg, asm *assembly) error {
	if h.Frag != 0 || asm.active {
		if err := e.fragment(r, h, shm, asm); err != nil {
			return frameErr{err}
		}
		return nil
	}
	if h.Kind == KindShmData || h.Kind == KindShmMessage {
		if shm == nil || int(h.Slot) >= shmSlots || h.Len > shmSlotSize {
			return frameErr{fmt.Errorf("%w: shared-memory frame (slot %d, %d bytes) on a connection without a segment for it", ErrFrame, h.Slot, h.Len)}
		}
		if h.Kind == KindShmData {
			h.Kind = KindData
		} else {
			h.Kind = KindMessage
		}
		err := e.deliver(r, h, &memPayload{b: shm.slot(int(h.Slot))[:h.Len], slot: true})
		shm.free(int(h.Slot)) // the sender may reuse it
		if err != nil {
			return frameErr{err}
		}
		return nil
	}
	if err := e.deliver(r, h, in); err != nil {
		return frameErr{err}
	}
	return nil
}

// readRing reads rank r's frames from the ring in its segment
// (TCPOptions.ShmRing): it polls the ring for up to spin, then parks on
// the socket, which brings a wakeup byte (0) when the sender has pushed
// a frame since, or the connection's end. A frame too large for the ring
// comes on the socket after an empty frame in the ring that says so.
func (e *Endpoint) readRing(r int, conn net.Conn, spin time.Duration, yield bool, shm *shmSeg) {
	defer shm.unmap()
	var w *waker // yielding: poll only while a receive waits (wake.go)
	if e.wakers != nil {
		w = e.wakers[r]
	}
	br := bufio.NewReaderSize(countingReader{conn, &e.live[r].heard}, viewMax)
	in := &streamPayload{br}
	var asm assembly
	var ferr error
	bulk := false // the last frame's payload was in a slot
	handle := func(f []byte) {
		if len(f) == 0 {
			// The next frame is on the socket, after any wakeups.
			for {
				b, err := br.Peek(1)
				if err != nil {
					ferr = err
					return
				}
				if b[0] != 0 {
					break
				}
				br.Discard(1)
			}
			ferr = e.readFrame(r, br, in, shm, &asm)
			return
		}
		if len(f) < HeaderSize {
			ferr = frameErr{fmt.Errorf("%w: a ring frame of %d bytes", ErrFrame, len(f))}
			return
		}
		h, err := decodeHeader(f[:HeaderSize])
		if err != nil {
			ferr = frameErr{err}
			return
		}
		body := f[HeaderSize:]
		if h.Kind != KindShmData && h.Kind != KindShmMessage && int64(len(body)) != h.Len {
			ferr = frameErr{fmt.Errorf("%w: a ring frame of %d payload bytes for a header of %d", ErrFrame, len(body), h.Len)}
			return
		}
		bulk = h.Kind == KindShmData || h.Kind == KindShmMessage
		ferr = e.handleFrame(r, &h, &memPayload{b: body}, shm, &asm)
	}
	ring := shm.ring
	var idle, checked time.Time
	polls, handled := 0, 0
	for {
		got, err := ring.TryPop(handle)
		if err != nil {
			e.endRead(r, conn, frameErr{fmt.Errorf("%w: %w", ErrFrame, err)})
			return
		}
		if ferr != nil {
			e.endRead(r, conn, ferr)
			return
		}
		if got {
			e.live[r].heard.Add(1)
			idle, polls = time.Time{}, 0
			// While frames keep coming this loop never waits, and the
			// goroutines its frames wake (the handler of a request, the
			// caller of a reply) would wait for the runtime to preempt
			// it, 10 ms later. Step aside after each frame whose payload
			// was in a slot (a copy long enough to make a yield cheap)
			// and every 16 others.
			if handled++; bulk || handled%16 == 0 {
				bulk = false
				runtime.Gosched()
			}
			continue
		}
		if idle.IsZero() {
			idle = time.Now()
			checked = idle
		}
		// The clock is read every 32 polls: a poll is cheaper than it.
		// While a fragmented message is under way its next fragment is
		// due as soon as the sender has copied it in (tens of µs), so the
		// reader polls longer (fragSpin) rather than make the sender wake
		// it for each fragment.
		wait := spin
		unwanted := w != nil && !e.receiveWaits()
		if unwanted {
			wait = min(spin, yieldGrace)
		}
		if asm.active {
			wait = max(spin, fragSpin)
		}
		if polls++; wait > 0 && polls%32 == 0 {
			now := time.Now()
			if !yield && now.Sub(checked) > preempted {
				// The thread was off its CPU between two looks at the
				// clock: other work wants this CPU, and a poller that
				// holds it only delays the peer's answer (a busy host
				// turned 10 µs calls into 16 ms ones). Sleep instead.
				wait = 0
			}
			checked = now
			if now.Sub(idle) >= wait {
				wait = 0
			}
		}
		if wait > 0 {
			runtime.Gosched() // polling must not keep the senders off the cores
			if yield {
				osYield()
			}
			continue
		}
		if !ring.Park() {
			continue
		}
		if w != nil {
			w.park()
			if unwanted && e.receiveWaits() && w.state.CompareAndSwap(readerParked, readerRunning) {
				// A receive was posted as it parked. (One that waits
				// longer than spin does not keep it polling: parked, it
				// reads the socket, which brings the peer's end.)
				ring.Unpark()
				idle = time.Time{}
				continue
			}
		}
		// Asleep on the socket: a wakeup, the connection's end, or a
		// receive posted (the waker's deadline).
		b, err := br.ReadByte()
		woke := w != nil && w.resume()
		ring.Unpark()
		if err != nil {
			if woke && errors.Is(err, os.ErrDeadlineExceeded) {
				idle = time.Time{}
				continue
			}
			e.endRead(r, conn, err)
			return
		}
		if b != 0 {
			br.UnreadByte() // a frame the ring's marker announces
		}
		idle = time.Time{}
	}
}

// streamPayload is the payload of the frame being read from a connection.
type streamPayload struct{ br *bufio.Reader }

func (s *streamPayload) read(p []byte) error {
	_, err := io.ReadFull(s.br, p)
	return err
}

// view hands out the bytes in the connection's read buffer (n is at most
// its size).
func (s *streamPayload) view(n int, fn func([]byte)) error {
	b, err := s.br.Peek(n)
	if err != nil {
		return err
	}
	fn(b)
	_, err = s.br.Discard(n)
	return err
}

// Messages of fragMin bytes or more go through the slots in fragments
// (sendFragments), so that the receiver copies one out while the sender
// copies the next in: a message of n bytes then costs about one copy of n
// and one of a fragment, where whole it costs two copies of n. Fragments
// are a quarter of the message, within [fragMin/2, fragMax]: small enough
// to overlap, large enough that the header and wakeup of each are noise.
const (
	fragMin = 256 << 10
	fragMax = 1 << 20
)

// preempted is a gap between two looks at the clock of a polling reader
// (32 polls, a few µs) that says its thread lost its CPU meanwhile.
const preempted = 500 * time.Microsecond

// fragSpin is how long a ring's reader polls for the next fragment of a
// message under way before it parks.
const fragSpin = 2 * time.Millisecond

func fragSize(n int) int { return min(max((n+3)/4, fragMin/2), fragMax) }

// sendFragments sends a message through consecutive shared-memory slots,
// one header per fragment (fragSize): the first fragment's payload starts
// with the message's length (8 bytes, little-endian), and every fragment
// but the last says more follow. The receiver frees each slot once it has
// copied the fragment out. l.mu is held: no other frame comes between the
// fragments.
func (l *tcpLink) sendFragments(ctx context.Context, h *Header, payload [][]byte) error {
	var length [8]byte
	binary.LittleEndian.PutUint64(length[:], uint64(totalLen(payload)))
	parts := append([][]byte{length[:]}, payload...)
	rest := totalLen(parts)
	size := fragSize(rest)
	first := true
	for rest > 0 {
		n := min(rest, size)
		i, err := l.shm.acquire(ctx)
		if err != nil {
			if first && ctx.Err() != nil {
				return notSent{err}
			}
			return err // fragments already sent: the stream is cut
		}
		var chunk [][]byte
		chunk, parts = splitParts(parts, n)
		f := Header{Kind: KindShmMessage, Key: h.Key, FP: h.FP, Len: int64(n), Slot: uint8(i), Frag: FragPart}
		copyParts(l.shm.seg.slot(i), chunk)
		l.shm.seg.state(i).Store(1)
		rest -= n
		if first {
			f.Frag |= FragFirst
		}
		if rest > 0 {
			f.Frag |= FragMore
		}
		f.encode(l.hdr[:])
		if err := l.write(ctx, net.Buffers{l.hdr[:]}); err != nil {
			if _, ok := err.(notSent); ok {
				l.shm.release(i)
				if first {
					return err
				}
				return err.(notSent).err // cut mid-message
			}
			return err
		}
		first = false
	}
	return nil
}

// splitParts returns the first n bytes of parts, and the rest.
func splitParts(parts [][]byte, n int) (head, rest [][]byte) {
	for n > 0 && len(parts) > 0 {
		p := parts[0]
		if len(p) <= n {
			head = append(head, p)
			n -= len(p)
			parts = parts[1:]
			continue
		}
		head = append(head, p[:n])
		parts = append([][]byte{p[n:]}, parts[1:]...)
		n = 0
	}
	return head, parts
}

// assembly is a fragmented message being received on one connection.
type assembly struct {
	active bool
	buf    []byte // the whole message; nil when skipped (over the limit)
	prefix []byte // a skipped message's first bytes
	off    int64
	total  int64
}

// fragment takes one fragment of a message sent through several slots
// (sendFragments) and hands the message on when it is whole. An error
// means the stream is unusable.
func (e *Endpoint) fragment(src int, h *Header, shm *shmSeg, asm *assembly) error {
	if h.Kind != KindShmMessage || h.Frag&FragPart == 0 || h.Frag&^(FragPart|FragMore|FragFirst) != 0 || shm == nil || int(h.Slot) >= shmSlots || h.Len > shmSlotSize || h.Len <= 0 {
		return fmt.Errorf("%w: %v frame (fragment flags %d, slot %d, %d bytes) where a fragment of a message was due", ErrFrame, h.Kind, h.Frag, h.Slot, h.Len)
	}
	first := h.Frag&FragFirst != 0
	if first == asm.active {
		return fmt.Errorf("%w: fragment out of order (first %v, a message under way %v)", ErrFrame, first, asm.active)
	}
	data := shm.slot(int(h.Slot))[:h.Len]
	defer shm.free(int(h.Slot)) // the sender may reuse it
	// The data carries no checksum: it crossed no wire (memPayload.slot).
	if first {
		if len(data) < 8 {
			return fmt.Errorf("%w: first fragment of %d bytes", ErrFrame, len(data))
		}
		total := binary.LittleEndian.Uint64(data)
		if total > MaxPayload || total+8 < fragMin {
			return fmt.Errorf("%w: fragmented message of %d bytes", ErrFrame, total)
		}
		*asm = assembly{active: true, total: int64(total)}
		e.mu.Lock()
		fn, limit := e.mu.message, e.mu.msgLimit
		e.mu.Unlock()
		if fn == nil || asm.total > limit {
			asm.prefix = append([]byte(nil), data[8:][:min(len(data)-8, MessagePrefix)]...)
		} else {
			asm.buf = e.spares[src].get(int(total))
		}
		data = data[8:]
	}
	if asm.off+int64(len(data)) > asm.total {
		return fmt.Errorf("%w: fragments longer than the %d bytes announced", ErrFrame, asm.total)
	}
	if asm.buf != nil {
		// Non-temporal stores: the message is larger than the caches
		// want (fragMin and up), and its buffer is cold.
		simd.CopyStreaming(asm.buf[asm.off:asm.off+int64(len(data))], data)
	}
	asm.off += int64(len(data))
	if h.Frag&FragMore != 0 {
		return nil
	}
	if asm.off != asm.total {
		return fmt.Errorf("%w: fragments of %d bytes, %d announced", ErrFrame, asm.off, asm.total)
	}
	buf := asm.buf
	if buf == nil {
		buf = asm.prefix
	}
	size := asm.total
	*asm = assembly{}
	e.handMessage(src, h.Key, h.FP, buf, size)
	return nil
}

// RankAddr waits for the address rank published in st (under prefix, as
// TCPOptions.Prefix) and returns it: where that rank's endpoint accepts
// connections. Tools and tests use it; ranks find each other themselves.
func RankAddr(ctx context.Context, st store.Store, prefix string, rank int) (string, error) {
	rec, err := (&rankRecords{store: st, prefix: prefix}).get(ctx, rank)
	return rec.addr, err
}
