package transport

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/internal/handshake"
	"github.com/godist/godist/store"
	"github.com/godist/godist/transport/internal/shmring"
)

// Connections on demand (TCPOptions.OnDemand).
//
// NewTCP publishes this rank's record (address and key) and host label,
// waits until every rank has, and returns with no connection made but to
// the other ranks of its host when they share memory and are at most
// shmMaxLocals (connectHost). The listener stays open for the endpoint's
// life. The first Send to a rank
// dials it (a posted receive from it dials it too, in the background, so
// that its loss is seen); every connection starts with the authenticated
// handshake, as at NewTCP.
//
// Two ranks may dial each other at once. The accepting side answers each
// handshake with a verdict byte: verdictKeep keeps the connection, the
// others refuse it and say why.
// A rank that is itself dialing the peer keeps the lower rank's
// connection: the lower rank refuses the higher one's dial, and the
// higher one accepts the lower one's, while its own dial, refused, waits
// for that connection to come up. So a pair ends with one connection,
// whichever side used it first.
//
// After the verdict the pair sets up shared memory, when both want it and
// share a host, over the connection itself (pairShm): each says whether it
// wants a segment (and the frame ring), names the segment it made for the
// other, and says whether it mapped the other's. Then the connection
// carries frames, as one made at NewTCP does.
//
// A dial that is refused by the peer's kernel means the peer's process
// is gone (its listener is open while its endpoint is): the pair's
// transfers fail with a *PeerError naming it, its cause ErrPeerClosed
// when the peer closed its endpoint (it says so in the store), a death
// otherwise.

// onDemand is an endpoint's listener and dials.
type onDemand struct {
	e       *Endpoint
	opt     TCPOptions
	ln      net.Listener
	records *rankRecords
	hs      handshake.Config
	tag     string // this endpoint's segment tag (segTag)
	ctx     context.Context
	cancel  context.CancelFunc

	// shm: this rank's pairs on its host set up shared memory (SharedMemory
	// asked for, the host known, and not crowded: see crowdedHost); local:
	// the peers it connects to at NewTCP (planHost). Set before the
	// accept loop starts, read-only after.
	shm   bool
	local []int

	mu    sync.Mutex
	pairs map[int]*pairDial // dials and accepts under way, by peer

	testHookConnect func(r int) // tests: runs in connect before the pair is looked up
}

// pairDial is a connection to one peer being made.
type pairDial struct {
	dialing   bool // this rank dials the peer
	accepting bool // this rank accepted the peer's connection and sets it up
	done      chan struct{}
	once      sync.Once
	err       error
}

func (p *pairDial) finish(err error) {
	p.once.Do(func() {
		p.err = err
		close(p.done)
	})
}

// The verdict an accepting rank answers a handshake with.
const (
	verdictCrossing  = 0 // refused: this rank is dialing the lower-ranked dialer and keeps that connection
	verdictKeep      = 1 // kept: the pair's connection
	verdictConnected = 2 // refused: the pair is connected already
	verdictFailed    = 3 // refused: this rank holds the dialer as failed
)

// crossWait bounds how long a rank whose dial was refused for a crossing
// one waits for that connection to come up.
const crossWait = 2 * handshake.DefaultTimeout

// newTCPOnDemand is NewTCP with TCPOptions.OnDemand: the rendezvous
// without the connections.
func newTCPOnDemand(ctx context.Context, opt TCPOptions, e *Endpoint) (*Endpoint, error) {
	m, err := listenMesh(ctx, opt)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			m.watch.stop()
			m.ln.Close()
		}
	}()
	if err := m.publish(ctx); err != nil {
		return nil, err
	}
	wctx := m.watch.ctx
	if opt.Size > 1 {
		// No connection is made while the ranks meet, so a rank that
		// dies after publishing its address would leave the others
		// waiting for it to be ready until their deadline: each rank
		// probes the listener of the next one (one probe a rank, not
		// W²), and a refusal is a death every rank hears of through
		// the store's abort key.
		m.watch.probe((opt.Rank+1)%opt.Size, m.records, func(int) bool { return false })
	}
	label, herr := hostID()
	if herr != nil {
		label = "" // no shared memory: which peers share the host is unknown
	}
	key := func(r int) string { return opt.Prefix + "transport/host/" + strconv.Itoa(r) }
	if err := opt.Store.Set(wctx, key(opt.Rank), []byte(label)); err != nil {
		return nil, fmt.Errorf("transport: rank %d: publish its host: %w", opt.Rank, err)
	}
	if err := allReady(wctx, opt.Store, opt.Prefix, opt.Size); err != nil {
		if pe := m.watch.cause(); pe != nil {
			return nil, pe
		}
		return nil, fmt.Errorf("transport: rank %d: waiting for every rank to publish its address: %w%s", opt.Rank, err, missingRanks(opt.Store, m.records, opt.Size))
	}
	hosts, err := gatherHosts(wctx, opt, key)
	if err != nil {
		return nil, fmt.Errorf("transport: rank %d: the ranks' hosts: %w", opt.Rank, err)
	}
	m.watch.stop()
	e.hosts = hosts
	if opt.Yield && opt.Spin > 0 {
		e.wakers = make([]atomic.Pointer[waker], opt.Size)
		e.wantFrom = make([]atomic.Int32, opt.Size)
	}
	d := &onDemand{e: e, opt: opt, ln: m.ln, records: m.records, hs: m.hs, tag: segTag(m.pub), pairs: map[int]*pairDial{}}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	m.records.ctx = d.ctx // the handshakes' key lookups, for the endpoint's life
	e.connect = d.connect
	e.od = d
	d.planHost(ctx)
	go d.acceptLoop()
	e.startWatchdog(opt.PeerTimeout)
	if err := d.connectHost(ctx); err != nil {
		ok = true // Close ends the listener and the dials
		e.Close()
		return nil, err
	}
	ok = true
	return e, nil
}

// crowdedHost is the most ranks a host may hold for its pairs to set up
// shared memory on demand: its CPUs, and at least shmMaxLocals. On a
// host with more ranks than CPUs the ranks take turns on them, and each
// pair's segments (created, mapped, torn down; 16 MiB of address space
// each way) cost more than they save: 128 ranks on 2 CPUs, three
// all-reduces took 1.1-1.45 s with them and 0.96-1.0 without, their
// exits 0.38-0.40 s and 0.07-0.09. NewTCP without OnDemand keeps to
// shmMaxLocals. A variable for the tests.
var crowdedHost = func() int { return max(shmMaxLocals, runtime.NumCPU()) }

// planHost decides, before any connection, whether this rank's pairs on
// its host set up shared memory (d.shm), and which of them connect at
// NewTCP (d.local: the others of a host of at most shmMaxLocals, when
// they share memory), and logs, as NewTCP without OnDemand does, the
// peers that will not share memory with this rank and why.
func (d *onDemand) planHost(ctx context.Context) {
	e := d.e
	me := e.hosts[e.rank]
	if !d.opt.SharedMemory {
		return
	}
	tcpOnly := func(level slog.Level, why string, args ...any) {
		e.log.Log(ctx, level, "transport: shared memory not used: "+why+"; large payloads go over TCP", append([]any{"rank", e.rank}, args...)...)
	}
	if me == "" {
		tcpOnly(slog.LevelWarn, "cannot tell which peers share this host")
		return
	}
	var local, elsewhere []int
	for r, h := range e.hosts {
		switch {
		case r == e.rank:
		case h == me:
			local = append(local, r)
		default:
			elsewhere = append(elsewhere, r)
		}
	}
	if len(elsewhere) > 0 {
		tcpOnly(slog.LevelInfo, "peers on other hosts", "peers", elsewhere)
	}
	if n := len(local) + 1; n > crowdedHost() {
		tcpOnly(slog.LevelInfo, fmt.Sprintf("%d ranks on this host, more than its %d CPUs and than %d", n, runtime.NumCPU(), shmMaxLocals), "peers", local)
		return
	}
	d.shm = true
	if len(local)+1 <= shmMaxLocals {
		d.local = local
	}
}

// connectHost connects this rank to the others of its host at once when
// they share memory and are few (d.local, planHost): every pair of them
// talks in the same-host engine and the control block of small
// collectives, which want every pair's segment, and a handful of
// connections costs nothing at scale. Peers on other hosts, and the
// ranks of a larger host, wait for first use.
func (d *onDemand) connectHost(ctx context.Context) error {
	e, local := d.e, d.local
	if len(local) == 0 {
		return nil
	}
	errs := make([]error, len(local))
	var wg sync.WaitGroup
	for i, r := range local {
		wg.Go(func() { errs[i] = d.connect(r) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("transport: rank %d: connecting to the ranks of its host %v: %w", e.rank, local, ctx.Err())
	}
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("transport: rank %d: connecting to rank %d of its host: %w", e.rank, local[i], err)
		}
	}
	return nil
}

// gatherHosts returns every rank's host label once every rank has
// published its own (key(r)): rank 0 reads them and publishes the list
// under one key, which the others read, so that the job makes 2W store
// reads, not W².
func gatherHosts(ctx context.Context, opt TCPOptions, key func(int) string) ([]string, error) {
	all := opt.Prefix + "transport/hosts"
	if opt.Rank == 0 {
		// The reads go out together (the store client multiplexes
		// them): one after another, each waits its turn on a busy host.
		hosts := make([]string, opt.Size)
		errs := make([]error, opt.Size)
		sem := make(chan struct{}, 64)
		var wg sync.WaitGroup
		for r := range opt.Size {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				v, err := opt.Store.Get(ctx, key(r))
				hosts[r], errs[r] = string(v), err
			})
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("host of rank %d: %w", r, err)
			}
		}
		b, err := json.Marshal(hosts)
		if err != nil {
			return nil, err
		}
		return hosts, opt.Store.Set(ctx, all, b)
	}
	b, err := opt.Store.Get(ctx, all)
	if err != nil {
		return nil, err
	}
	var hosts []string
	if err := json.Unmarshal(b, &hosts); err != nil || len(hosts) != opt.Size {
		return nil, fmt.Errorf("rank 0 published %d hosts for %d ranks (%v)", len(hosts), opt.Size, err)
	}
	return hosts, nil
}

// missingRanks names the ranks that have not published a record, for a
// setup that timed out; "" when it cannot tell.
func missingRanks(st store.Store, records *rankRecords, size int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var missing []int
	for r := range size {
		ok, err := st.Check(ctx, records.key(r))
		if err != nil {
			return ""
		}
		if !ok {
			missing = append(missing, r)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf(" (ranks %v never published one: are they running, with the same job id and store?)", missing)
}

// close ends the listener (Endpoint.Close), after recording in the store
// that this rank closed (when clean), so that a peer whose dial is
// refused later knows it was not a death.
func (d *onDemand) close(clean bool) {
	if clean {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = d.opt.Store.Set(ctx, d.closedKey(d.e.rank), nil)
		cancel()
	}
	d.cancel()
	d.ln.Close()
}

func (d *onDemand) closedKey(r int) string {
	return d.opt.Prefix + "transport/closed/" + strconv.Itoa(r)
}

// connect makes the connection to rank r (Endpoint.connect), or waits for
// the one being made.
func (d *onDemand) connect(r int) error {
	e := d.e
	for {
		if e.Connected(r) {
			return nil
		}
		if err := e.PeerErr(r); err != nil {
			return err
		}
		if d.testHookConnect != nil {
			d.testHookConnect(r)
		}
		d.mu.Lock()
		// Looked at again under the lock: an accepted connection may have
		// come up, and its pair gone, since the check above (a pair is
		// removed only after its link is set). Dialing then would be
		// refused by a peer already connected to this rank.
		if e.Connected(r) || e.PeerErr(r) != nil {
			d.mu.Unlock()
			continue
		}
		if p := d.pairs[r]; p != nil {
			d.mu.Unlock()
			<-p.done
			if p.err != nil {
				return p.err
			}
			continue
		}
		p := &pairDial{dialing: true, done: make(chan struct{})}
		d.pairs[r] = p
		d.mu.Unlock()
		err := d.dial(r, p)
		p.finish(err)
		d.mu.Lock()
		if d.pairs[r] == p {
			delete(d.pairs, r)
		}
		d.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// dial connects to rank r as the dialing side, or, when r refuses the
// dial for its own crossing one, waits for that one (which the accept
// loop sets up and finishes p with).
func (d *onDemand) dial(r int, p *pairDial) error {
	e := d.e
	ctx, cancel := context.WithTimeout(d.ctx, crossWait)
	defer cancel()
	conn, err := dialPeer(ctx, d.records, r, d.hs)
	if err != nil {
		var ge *goneError
		if errors.As(err, &ge) {
			e.peerDown(r, d.goneCause(r, ge.why))
			return e.PeerErr(r)
		}
		e.peerDown(r, fmt.Errorf("connecting on first use: %w", err))
		return e.PeerErr(r)
	}
	conn.SetDeadline(time.Now().Add(handshake.DefaultTimeout))
	var verdict [1]byte
	if _, err := io.ReadFull(conn, verdict[:]); err != nil {
		conn.Close()
		e.peerDown(r, fmt.Errorf("connecting on first use: reading the verdict: %w", err))
		return e.PeerErr(r)
	}
	switch verdict[0] {
	case verdictKeep:
	case verdictFailed:
		conn.Close()
		e.peerDown(r, fmt.Errorf("connecting on first use: rank %d refused the connection: it had already lost this rank", r))
		return e.PeerErr(r)
	default:
		// r is dialing this rank too and keeps its own connection
		// (verdictCrossing), or has one up already (verdictConnected):
		// it comes up here through the accept loop.
		conn.Close()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.done:
				return p.err
			case <-tick.C:
				if e.Connected(r) {
					return nil
				}
			case <-ctx.Done():
				e.peerDown(r, fmt.Errorf("connecting on first use: rank %d refused this rank's connection for its own (verdict %d), which did not come within %v", r, verdict[0], crossWait))
				return e.PeerErr(r)
			}
		}
	}
	if err := d.install(r, conn); err != nil {
		e.peerDown(r, fmt.Errorf("connecting on first use: %w", err))
		return e.PeerErr(r)
	}
	return nil
}

// goneCause is the cause of a refused dial to r: ErrPeerClosed when r
// recorded that it closed its endpoint, its death otherwise.
func (d *onDemand) goneCause(r int, why string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if ok, err := d.opt.Store.Check(ctx, d.closedKey(r)); err == nil && ok {
		return ErrPeerClosed
	}
	return errors.New(why)
}

// acceptLoop accepts the peers' connections until the endpoint closes.
func (d *onDemand) acceptLoop() {
	sem := make(chan struct{}, maxPendingHandshakes)
	for {
		conn, err := d.ln.Accept()
		if err != nil {
			if d.ctx.Err() == nil {
				d.e.log.Warn("transport: accepting connections stopped", "rank", d.e.rank, "err", err)
			}
			return
		}
		select {
		case sem <- struct{}{}:
		default:
			conn.Close() // too many handshakes under way; the dial retries
			continue
		}
		go func() {
			defer func() { <-sem }()
			d.admit(conn)
		}()
	}
}

// admit runs the handshake on an accepted connection, answers with the
// verdict and sets the connection up when it keeps it.
func (d *onDemand) admit(conn net.Conn) {
	e := d.e
	stop := context.AfterFunc(d.ctx, func() { conn.Close() })
	peer, err := handshake.Server(conn, d.hs)
	stop()
	if err != nil || peer.Rank < 0 || peer.Rank >= e.size || peer.Rank == e.rank {
		conn.Close() // unauthenticated or foreign: dropped, nothing changed
		return
	}
	r := peer.Rank
	d.mu.Lock()
	p := d.pairs[r]
	verdict := byte(verdictCrossing)
	switch {
	case e.PeerErr(r) != nil:
		verdict = verdictFailed
	case e.Connected(r):
		verdict = verdictConnected
	case p == nil:
		p = &pairDial{accepting: true, done: make(chan struct{})}
		d.pairs[r] = p
		verdict = verdictKeep
	case p.dialing && !p.accepting && r < e.rank:
		p.accepting = true // the lower rank's connection wins
		verdict = verdictKeep
	}
	d.mu.Unlock()
	keep := verdict == verdictKeep
	conn.SetDeadline(time.Now().Add(handshake.DefaultTimeout))
	if _, werr := conn.Write([]byte{verdict}); werr != nil || !keep {
		conn.Close()
		if keep {
			d.finishAccept(r, p, fmt.Errorf("connection from rank %d: writing the verdict: %w", r, werr))
		}
		return
	}
	err = d.install(r, conn)
	d.finishAccept(r, p, err)
}

// finishAccept ends an accepted connection's setup; a failed one fails
// the peer (its waiters hear why).
func (d *onDemand) finishAccept(r int, p *pairDial, err error) {
	if err != nil {
		d.e.peerDown(r, fmt.Errorf("accepting its connection: %w", err))
		err = d.e.PeerErr(r)
	}
	p.finish(err)
	d.mu.Lock()
	if d.pairs[r] == p && !p.dialing {
		delete(d.pairs, r)
	}
	d.mu.Unlock()
}

// install sets up a kept connection to r: shared memory, the link and
// its reader.
func (d *onDemand) install(r int, conn net.Conn) error {
	e, opt := d.e, d.opt
	out, in, err := d.pairShm(r, conn)
	if err != nil {
		conn.Close()
		return err
	}
	conn.SetDeadline(time.Time{})
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetReadBuffer(opt.SocketBuffer)
		tc.SetWriteBuffer(opt.SocketBuffer)
	}
	l := newTCPLink(conn)
	if out != nil {
		l.shm = &shmOut{seg: out, down: &e.peers.make(r).gone}
		l.ring = out.ring
	}
	if e.wakers != nil {
		e.wakers[r].Store(&waker{conn: conn})
	}
	if e.isClosed() || !e.setLink(r, l) {
		conn.Close()
		out.unmap()
		in.unmap()
		if e.isClosed() {
			return ErrClosed
		}
		return nil // another connection won (cannot happen with the verdicts; harmless)
	}
	if in != nil && in.ring != nil {
		go e.readRing(r, conn, opt.Spin, opt.Yield, in)
	} else {
		go e.readLoop(r, conn, opt.Spin, opt.Yield, in)
	}
	return nil
}

// pairShm sets up the pair's shared memory over conn (see the top of the
// file): out is this rank's segment for r, in is r's for this rank, each
// nil when not set up (the payloads then go over TCP). Only a connection
// that fails is an error.
func (d *onDemand) pairShm(r int, conn net.Conn) (out, in *shmSeg, err error) {
	e, opt := d.e, d.opt
	want := d.shm && e.hosts[r] == e.hosts[e.rank]
	var mine, theirs [2]byte
	if want {
		mine[0] = 1
	}
	if opt.ShmRing {
		mine[1] = 1
	}
	if err := exchangeFixed(conn, mine[:], theirs[:]); err != nil {
		return nil, nil, fmt.Errorf("shared memory with rank %d: %w", r, err)
	}
	if !want || theirs[0] != 1 {
		return nil, nil, nil
	}
	ring := mine[1] == 1 && theirs[1] == 1
	name := ""
	var file *os.File
	if f, cerr := createSeg(d.tag, e.rank, r); cerr == nil {
		seg, merr := mapSeg(f)
		if merr == nil && ring {
			if seg.ring, merr = shmring.Init(seg.mem[shmRingOff:]); merr != nil {
				seg.unmap()
			}
		}
		if merr == nil {
			out, file, name = seg, f, f.Name()
		} else {
			f.Close()
			os.Remove(f.Name())
		}
	}
	defer func() {
		if file != nil {
			file.Close()
			os.Remove(file.Name()) // mapped by now, or never will be
		}
	}()
	peerName, err := exchangeName(conn, name)
	if err != nil {
		out.unmap()
		return nil, nil, fmt.Errorf("shared memory with rank %d: %w", r, err)
	}
	ok := byte(0)
	if peerName != "" {
		rec, rerr := d.records.get(d.ctx, r)
		if rerr == nil && isSegName(peerName, segTag(rec.key)) {
			if f, oerr := os.OpenFile(peerName, os.O_RDWR, 0); oerr == nil {
				seg, merr := mapSeg(f)
				if merr == nil && ring {
					if seg.ring, merr = shmring.Attach(seg.mem[shmRingOff:]); merr != nil {
						seg.unmap()
					}
				}
				if merr == nil {
					in, ok = seg, 1
				}
				f.Close()
			}
			os.Remove(peerName)
		}
	}
	var theirOK [1]byte
	if err := exchangeFixed(conn, []byte{ok}, theirOK[:]); err != nil {
		out.unmap()
		in.unmap()
		return nil, nil, fmt.Errorf("shared memory with rank %d: %w", r, err)
	}
	if theirOK[0] != 1 && out != nil {
		out.unmap()
		out = nil
	}
	return out, in, nil
}

// exchangeFixed writes mine and reads len(theirs) bytes.
func exchangeFixed(conn net.Conn, mine, theirs []byte) error {
	if _, err := conn.Write(mine); err != nil {
		return err
	}
	_, err := io.ReadFull(conn, theirs)
	return err
}

// exchangeName writes a segment's name (length-prefixed) and reads the
// peer's, bounded.
func exchangeName(conn net.Conn, name string) (string, error) {
	if len(name) > maxSegName {
		name = "" // not ours to send: go without
	}
	b := binary.BigEndian.AppendUint16(nil, uint16(len(name)))
	if _, err := conn.Write(append(b, name...)); err != nil {
		return "", err
	}
	var n [2]byte
	if _, err := io.ReadFull(conn, n[:]); err != nil {
		return "", err
	}
	l := int(binary.BigEndian.Uint16(n[:]))
	if l > maxSegName {
		return "", fmt.Errorf("a segment name of %d bytes, at most %d", l, maxSegName)
	}
	got := make([]byte, l)
	if _, err := io.ReadFull(conn, got); err != nil {
		return "", err
	}
	return string(got), nil
}

// maxSegName bounds a segment's name on the wire.
const maxSegName = 255
