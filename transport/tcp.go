package transport

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/godist/godist/internal/handshake"
	"github.com/godist/godist/store"
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

// RankAddr waits for the address rank published in st (under prefix, as
// TCPOptions.Prefix) and returns it: where that rank's endpoint accepts
// connections. Tools and tests use it; ranks find each other themselves.
func RankAddr(ctx context.Context, st store.Store, prefix string, rank int) (string, error) {
	rec, err := (&rankRecords{store: st, prefix: prefix}).get(ctx, rank)
	return rec.addr, err
}
