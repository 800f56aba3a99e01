package transport

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godist/godist/internal/handshake"
	"github.com/godist/godist/store"
)

// tcpMesh is one NewTCP's rendezvous with the other ranks, in the steps
// NewTCP takes: listenMesh, publish, connect, finish, and close when
// NewTCP returns.
type tcpMesh struct {
	opt     TCPOptions
	ln      net.Listener
	addr    string          // where the other ranks reach this one
	pub     *ecdh.PublicKey // the public half of this endpoint's key (X25519: see package handshake)
	watch   *initWatch
	records *rankRecords
	hs      handshake.Config

	// Set by connect: each connection made (or why one failed) goes to
	// results; wg counts the dialers and the accept loop, which
	// stopAccept ends; conns holds each rank's connection once it is
	// collected.
	results    chan connResult
	wg         sync.WaitGroup
	stopAccept context.CancelFunc
	conns      []net.Conn

	mu struct {
		sync.Mutex
		seen map[int]bool // the higher ranks connected
	}
}

// connResult is a connection to rank, or why it failed.
type connResult struct {
	rank int
	conn net.Conn
	err  error
}

// listenMesh opens this rank's listener, makes the endpoint's key and
// starts watching for deaths.
func listenMesh(ctx context.Context, opt TCPOptions) (*tcpMesh, error) {
	ln, err := net.Listen("tcp", opt.Listen)
	if err != nil {
		return nil, fmt.Errorf("transport: rank %d: listen on %s: %w", opt.Rank, opt.Listen, err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	m := &tcpMesh{opt: opt, ln: ln, addr: net.JoinHostPort(opt.Host, strconv.Itoa(port))}
	// The rank's record: its address and the public half of a key made
	// for this endpoint, under a write-once key. The first process to
	// publish as a rank holds it; every handshake proves it with the
	// private half, so no other process can take its place.
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("transport: rank %d: making its key: %w", opt.Rank, err)
	}
	m.pub = priv.PublicKey()
	// Until NewTCP returns, a rank that dies is watched for (initwatch.go),
	// and every wait below ends with the first death seen.
	m.watch = newInitWatch(ctx, opt.Store, opt.Prefix+"transport/abort", opt.Rank)
	m.records = &rankRecords{store: opt.Store, prefix: opt.Prefix, ctx: m.watch.ctx, rank: opt.Rank, size: opt.Size}
	m.hs = handshake.Config{Proto: "transport", JobID: opt.JobID, Rank: opt.Rank, Size: opt.Size, Token: opt.Token,
		Identity: priv, PeerKey: m.records.peerKey}
	return m, nil
}

// publish writes this rank's record to the store, or fails with a
// *DuplicateRankError when another process holds the rank.
func (m *tcpMesh) publish(ctx context.Context) error {
	mine := rankRecord{addr: m.addr, key: m.pub}
	got, err := m.opt.Store.CompareAndSet(ctx, m.records.key(m.opt.Rank), nil, mine.encode())
	if err != nil {
		return fmt.Errorf("transport: rank %d: publish its address: %w", m.opt.Rank, err)
	}
	if string(got) != string(mine.encode()) {
		other, _ := decodeRankRecord(got)
		return &DuplicateRankError{Rank: m.opt.Rank, Addr: m.addr, Other: other.addr}
	}
	return nil
}

// connect dials every lower rank and accepts every higher one, and waits
// until all are connected (m.conns).
func (m *tcpMesh) connect(ctx context.Context) error {
	m.results = make(chan connResult, m.opt.Size)
	m.dialLower()
	m.acceptHigher()
	m.conns = make([]net.Conn, m.opt.Size)
	return m.collect(ctx)
}

// dialLower dials every lower rank, each from its own goroutine.
func (m *tcpMesh) dialLower() {
	for r := 0; r < m.opt.Rank; r++ {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			conn, err := dialPeer(m.watch.ctx, m.records, r, m.hs)
			m.results <- connResult{r, conn, err}
		}()
	}
}

// acceptHigher accepts every higher rank and refuses anything else, and
// probes the listeners of the higher ranks that have not connected yet.
// The listener stays open until NewTCP returns (the probes of lower ranks
// that have not heard from this one yet take a refusal for its death).
func (m *tcpMesh) acceptHigher() {
	acceptCtx, stopAccept := context.WithCancel(m.watch.ctx)
	m.stopAccept = stopAccept
	go func() {
		<-acceptCtx.Done()
		m.ln.Close()
	}()
	m.mu.seen = map[int]bool{}
	for r := m.opt.Rank + 1; r < m.opt.Size; r++ {
		m.watch.probe(r, m.records, m.connected)
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.acceptLoop(acceptCtx)
	}()
}

// connected reports whether higher rank r has connected.
func (m *tcpMesh) connected(r int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.seen[r]
}

// acceptedAll reports whether every higher rank has connected.
func (m *tcpMesh) acceptedAll() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mu.seen) >= m.opt.Size-1-m.opt.Rank
}

// acceptLoop accepts connections until every higher rank has connected
// or ctx ends, and admits each.
func (m *tcpMesh) acceptLoop(ctx context.Context) {
	// Handshakes run concurrently, at most maxPendingHandshakes at
	// once, each bounded by the handshake's own deadline: a slow or
	// silent connection delays no one (a connection beyond the bound
	// is closed at once; a member's dial retries).
	sem := make(chan struct{}, maxPendingHandshakes)
	var hwg sync.WaitGroup
	defer hwg.Wait()
	for {
		if m.acceptedAll() {
			return // the kernel still completes (probes') connections until ln closes
		}
		conn, err := m.ln.Accept()
		if err != nil {
			if !m.acceptedAll() && ctx.Err() == nil {
				m.results <- connResult{-1, nil, fmt.Errorf("accept: %w", err)}
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
			m.admit(ctx, conn)
		}()
	}
}

// admit runs the handshake on an accepted connection and hands it on
// when it comes from a higher rank not connected yet.
func (m *tcpMesh) admit(ctx context.Context, conn net.Conn) {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	peer, err := handshake.Server(conn, m.hs)
	stop()
	m.mu.Lock()
	ok := err == nil && ctx.Err() == nil && peer.Rank > m.opt.Rank && peer.Rank < m.opt.Size && !m.mu.seen[peer.Rank]
	if ok {
		m.mu.seen[peer.Rank] = true
	}
	m.mu.Unlock()
	if !ok {
		conn.Close() // unauthenticated, foreign, a duplicate or a probe: dropped, nothing changed
		return
	}
	m.results <- connResult{peer.Rank, conn, nil}
}

// collect waits for a connection to every other rank; the first that
// fails, a death seen, or ctx's end fails the setup.
func (m *tcpMesh) collect(ctx context.Context) error {
	for got := 0; got < m.opt.Size-1; {
		select {
		case r := <-m.results:
			if r.err != nil {
				var ge *goneError
				if errors.As(r.err, &ge) {
					return m.fail(m.watch.gone(ge.rank, ge.why))
				}
				return m.fail(fmt.Errorf("transport: rank %d: %w", m.opt.Rank, r.err))
			}
			m.conns[r.rank] = r.conn
			m.watch.watchConn(r.rank, r.conn)
			got++
		case <-m.watch.ctx.Done():
			if pe := m.watch.cause(); pe != nil {
				return m.fail(pe)
			}
			var missing []int
			for r := range m.conns {
				if r != m.opt.Rank && m.conns[r] == nil {
					missing = append(missing, r)
				}
			}
			return m.fail(fmt.Errorf("transport: rank %d: no connection from ranks %v before the deadline: %w (are they running, with the same job id and token?)", m.opt.Rank, missing, ctx.Err()))
		}
	}
	return nil
}

// finish sets up shared memory with the peers on this host and waits
// until every rank is ready, then stops watching for deaths (one seen
// until then still fails it). It returns each peer's segments and each
// rank's host label (setupShm).
func (m *tcpMesh) finish(log *slog.Logger) (shmOuts, shmIns []*shmSeg, hosts []string, err error) {
	wctx, opt := m.watch.ctx, m.opt
	shmOuts, shmIns, hosts, err = setupShm(wctx, opt.Store, opt.Prefix, opt.Rank, opt.Size, opt.SharedMemory, opt.SharedMemory && opt.ShmRing, log, segTag(m.pub), func(p int) string {
		rec, err := m.records.get(wctx, p) // known: p has connected
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
		m.watch.stop()
		if pe := m.watch.cause(); pe != nil {
			err = pe
		}
	}
	if err != nil {
		closeSegs(shmOuts, shmIns)
		return nil, nil, nil, m.fail(fmt.Errorf("transport: rank %d: finishing the setup (shared memory, every rank ready): %w", opt.Rank, err))
	}
	return shmOuts, shmIns, hosts, nil
}

// fail undoes a setup that failed with err after connect began: it closes
// every connection made, and removes the shared-memory segments of this
// rank and of the peers it knows. It returns the error NewTCP fails with:
// a death seen meanwhile rather than err, which is often its echo.
func (m *tcpMesh) fail(err error) error {
	if pe := m.watch.settle(); pe != nil {
		err = fmt.Errorf("transport: rank %d: %w", m.opt.Rank, pe) // the death, not what it made fail here
	}
	m.stopAccept()
	m.wg.Wait()
	close(m.results)
	for r := range m.results {
		if r.conn != nil {
			r.conn.Close()
		}
	}
	for _, c := range m.conns {
		if c != nil {
			c.Close()
		}
	}
	// The segments of a rank that died here are nobody's: remove
	// them, and this rank's own (all of them, whoever created them,
	// are useless now).
	tags := []string{segTag(m.pub)}
	m.records.mu.Lock()
	for _, rec := range m.records.cache {
		tags = append(tags, segTag(rec.key))
	}
	m.records.mu.Unlock()
	removeSegs(tags)
	return err
}

// close ends the rendezvous when NewTCP returns: the accept loop may
// wait in Accept after the last member, and only the listener's closing
// ends it.
func (m *tcpMesh) close() {
	if m.stopAccept != nil {
		m.stopAccept()
		m.wg.Wait()
	}
	m.watch.stop()
	m.ln.Close()
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

// RankAddr waits for the address rank published in st (under prefix, as
// TCPOptions.Prefix) and returns it: where that rank's endpoint accepts
// connections. Tools and tests use it; ranks find each other themselves.
func RankAddr(ctx context.Context, st store.Store, prefix string, rank int) (string, error) {
	rec, err := (&rankRecords{store: st, prefix: prefix}).get(ctx, rank)
	return rec.addr, err
}

// maxPendingHandshakes bounds the handshakes a listener runs at once.
const maxPendingHandshakes = 128

// rankRecord is what a rank publishes: its address and public key.
type rankRecord struct {
	addr string
	key  *ecdh.PublicKey
}

func (r rankRecord) encode() []byte {
	return []byte(r.addr + " " + hex.EncodeToString(r.key.Bytes()))
}

func decodeRankRecord(b []byte) (rankRecord, error) {
	addr, k, ok := strings.Cut(string(b), " ")
	raw, err := hex.DecodeString(k)
	var key *ecdh.PublicKey
	if ok && err == nil {
		key, err = ecdh.X25519().NewPublicKey(raw)
	}
	if !ok || err != nil {
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
func (rs *rankRecords) peerKey(r int) (*ecdh.PublicKey, error) {
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
