package transport

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

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
	// OnDemand makes the connections when they are first used, not at
	// NewTCP: a rank connects to the peers its calls exchange frames
	// with (a ring's two neighbours, a tree's log W), so that W ranks
	// hold what their calls use rather than W² connections and, on one
	// host, W² shared-memory segments (ondemand.go). The ranks of a
	// host with shared memory and at most 8 ranks still connect to
	// each other at NewTCP: their same-host paths want every pair.
	OnDemand bool
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
	opt = opt.withDefaults()
	e := newEndpoint(opt.Rank, opt.Size)
	if opt.Logger != nil {
		e.log = opt.Logger
	}
	if opt.Size == 1 {
		return e, nil
	}
	if opt.OnDemand {
		return newTCPOnDemand(ctx, opt, e)
	}
	// The rendezvous (tcpmesh.go), step by step: listen, publish this
	// rank's record, connect to every other rank, finish (shared memory,
	// every rank ready); close ends what is left of it when NewTCP
	// returns.
	m, err := listenMesh(ctx, opt)
	if err != nil {
		return nil, err
	}
	defer m.close()
	if err := m.publish(ctx); err != nil {
		return nil, err
	}
	if err := m.connect(ctx); err != nil {
		return nil, err
	}
	shmOuts, shmIns, hosts, err := m.finish(e.log)
	if err != nil {
		return nil, err
	}
	e.hosts = hosts
	e.startLinks(opt, m.conns, shmOuts, shmIns)
	e.startWatchdog(opt.PeerTimeout)
	return e, nil
}

// withDefaults fills in the options left zero that have a default.
func (opt TCPOptions) withDefaults() TCPOptions {
	if opt.Host == "" {
		opt.Host = "127.0.0.1"
	}
	if opt.Listen == "" {
		opt.Listen = net.JoinHostPort(opt.Host, "0")
	}
	if opt.SocketBuffer == 0 {
		opt.SocketBuffer = 4 << 20
	}
	return opt
}

// startLinks makes a link of each peer's connection (with its shared
// memory, if any) and starts its reader: of the frame ring when the pair
// has one (TCPOptions.ShmRing), else of the socket.
func (e *Endpoint) startLinks(opt TCPOptions, conns []net.Conn, shmOuts, shmIns []*shmSeg) {
	if opt.Yield && opt.Spin > 0 {
		e.wakers = make([]atomic.Pointer[waker], opt.Size)
		e.wantFrom = make([]atomic.Int32, opt.Size)
		for r, c := range conns {
			if c != nil {
				e.wakers[r].Store(&waker{conn: c})
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
			l.shm = &shmOut{seg: shmOuts[r], down: &e.peers.make(r).gone}
			l.ring = shmOuts[r].ring
		}
		e.peers.make(r).link.Store(&linkRef{l})
		if in := shmIns[r]; in != nil && in.ring != nil {
			go e.readRing(r, c, opt.Spin, opt.Yield, in)
		} else {
			go e.readLoop(r, c, opt.Spin, opt.Yield, in)
		}
	}
}

// startWatchdog starts the watchdog that declares a silent peer lost
// (heartbeat.go), unless peerTimeout is negative (never). It starts once
// every link is set up.
func (e *Endpoint) startWatchdog(peerTimeout time.Duration) {
	if peerTimeout < 0 {
		return
	}
	timeout := peerTimeout
	if timeout == 0 {
		timeout = DefaultPeerTimeout
	}
	e.watchDone = make(chan struct{})
	go e.watch(timeout, e.watchDone)
}
