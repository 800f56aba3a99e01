package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"
)

// Faults make the in-process transport misbehave, reproducibly from Seed:
// frames are delayed by random amounts (so frames between one pair arrive
// out of order), lost and sent again after RTO (as a reliable protocol over
// a lossy link would), or delivered twice (the duplicate is discarded by
// sequence number). The endpoints must still deliver every frame exactly
// once, so a correct algorithm gives bit-identical results.
type Faults struct {
	Seed     uint64
	Loss     float64       // probability that a transmission is lost
	Dup      float64       // probability that a frame is delivered twice
	MaxDelay time.Duration // frames wait a uniform random time up to this
	RTO      time.Duration // retransmission timeout after a loss (default 1ms)
}

// Mesh is a job's worth of in-process endpoints, connected to each other
// through links that can be faulted, partitioned and killed.
type Mesh struct {
	Endpoints []*Endpoint
	faults    Faults

	mu struct {
		sync.Mutex
		rng         *rand.Rand
		dead        map[int]bool
		partitioned map[[2]int]bool
		held        map[[2]int][]func() // deliveries waiting for a partition to heal
	}
}

// NewInProc returns size endpoints connected in memory.
func NewInProc(size int, f Faults) *Mesh {
	if f.RTO == 0 {
		f.RTO = time.Millisecond
	}
	m := &Mesh{faults: f}
	m.mu.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x5851f42d4c957f2d))
	m.mu.dead = map[int]bool{}
	m.mu.partitioned = map[[2]int]bool{}
	m.mu.held = map[[2]int][]func(){}
	m.Endpoints = make([]*Endpoint, size)
	for r := range size {
		e := newEndpoint(r, size)
		e.connect = func(peer int) error { m.connect(r, peer); return nil }
		m.Endpoints[r] = e
	}
	return m
}

// connect makes the links between ranks a and b, both ways, on their
// first use (not at NewInProc: W ranks would make W² links, and most
// pairs never exchange a frame).
// A closed endpoint is connected to no more: the link to it is down, as a
// TCP dial to a process that exited is refused.
func (m *Mesh) connect(a, b int) {
	ea, eb := m.Endpoints[a], m.Endpoints[b]
	if eb.isClosed() {
		ea.peerDown(b, ErrPeerClosed)
		return
	}
	ea.setLink(b, &memLink{mesh: m, src: a, dst: b})
	eb.setLink(a, &memLink{mesh: m, src: b, dst: a})
}

// SetHosts places the mesh's ranks on hosts, as Endpoint.Hosts reports
// them: labels[r] is rank r's host. The frames still go through memory;
// it is for testing what the layers above do with a job spread over
// hosts. Call it before the endpoints are used.
func (m *Mesh) SetHosts(labels []string) {
	if len(labels) != len(m.Endpoints) {
		panic(fmt.Sprintf("transport: SetHosts: %d labels for %d ranks", len(labels), len(m.Endpoints)))
	}
	for _, e := range m.Endpoints {
		e.hosts = append([]string(nil), labels...)
	}
}

// Kill makes rank die as a process would: its connections close, so every
// other rank sees its PeerError, and it sees every peer's.
func (m *Mesh) Kill(rank int) {
	m.mu.Lock()
	if m.mu.dead[rank] {
		m.mu.Unlock()
		return
	}
	m.mu.dead[rank] = true
	m.mu.Unlock()
	for r, e := range m.Endpoints {
		if r != rank {
			e.peerDown(rank, io.EOF)
			m.Endpoints[rank].peerDown(r, errors.New("this rank was killed"))
		}
	}
}

// Partition holds every frame between ranks a and b (both ways) until
// Heal.
func (m *Mesh) Partition(a, b int) {
	m.mu.Lock()
	m.mu.partitioned[pair(a, b)] = true
	m.mu.Unlock()
}

// Heal ends a partition and delivers the frames it held.
func (m *Mesh) Heal(a, b int) {
	m.mu.Lock()
	p := pair(a, b)
	delete(m.mu.partitioned, p)
	held := m.mu.held[p]
	delete(m.mu.held, p)
	m.mu.Unlock()
	for _, f := range held {
		f()
	}
}

func pair(a, b int) [2]int {
	if a > b {
		a, b = b, a
	}
	return [2]int{a, b}
}

// Close closes every endpoint.
func (m *Mesh) Close() {
	for _, e := range m.Endpoints {
		e.Close()
	}
}

// memLink carries frames from src to dst.
type memLink struct {
	mesh     *Mesh
	src, dst int

	mu     sync.Mutex
	next   uint64          // sequence number of the next frame
	seen   map[uint64]bool // frames delivered, kept only under Faults.Dup (duplicates are dropped)
	closed bool
}

func (l *memLink) send(ctx context.Context, h *Header, payload [][]byte) error {
	if err := ctx.Err(); err != nil {
		return notSent{err}
	}
	m := l.mesh
	m.mu.Lock()
	dead := m.mu.dead[l.src] || m.mu.dead[l.dst]
	m.mu.Unlock()
	l.mu.Lock()
	closed := l.closed
	seq := l.next
	l.next++
	l.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if dead {
		return io.ErrClosedPipe
	}
	frame := make([]byte, HeaderSize, HeaderSize+totalLen(payload))
	for _, p := range payload {
		frame = append(frame, p...)
	}
	h.CRC = Checksum(frame[HeaderSize:])
	h.encode(frame)
	f := m.faults
	if f.Loss == 0 && f.Dup == 0 && f.MaxDelay == 0 {
		m.route(l, seq, frame, 0)
		return nil
	}
	m.mu.Lock()
	delay := time.Duration(0)
	if f.MaxDelay > 0 {
		delay = time.Duration(m.mu.rng.Int64N(int64(f.MaxDelay) + 1))
	}
	for f.Loss > 0 && m.mu.rng.Float64() < f.Loss {
		delay += f.RTO // lost: the sender's timer fires and it sends again
	}
	dup := f.Dup > 0 && m.mu.rng.Float64() < f.Dup
	dupDelay := time.Duration(0)
	if dup && f.MaxDelay > 0 {
		dupDelay = time.Duration(m.mu.rng.Int64N(int64(f.MaxDelay) + 1))
	}
	m.mu.Unlock()
	m.route(l, seq, frame, delay)
	if dup {
		m.route(l, seq, frame, dupDelay)
	}
	return nil
}

func totalLen(ps [][]byte) int {
	n := 0
	for _, p := range ps {
		n += len(p)
	}
	return n
}

// route delivers a frame after delay, or holds it while its pair is
// partitioned.
func (m *Mesh) route(l *memLink, seq uint64, frame []byte, delay time.Duration) {
	deliver := func() {
		m.mu.Lock()
		if m.mu.dead[l.src] || m.mu.dead[l.dst] {
			m.mu.Unlock()
			return
		}
		if p := pair(l.src, l.dst); m.mu.partitioned[p] {
			m.mu.held[p] = append(m.mu.held[p], func() { m.route(l, seq, frame, 0) })
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		l.mu.Lock()
		if l.seen[seq] || l.closed {
			l.mu.Unlock()
			return
		}
		if m.faults.Dup > 0 {
			// Only a duplicated frame can come twice: without Dup
			// the map would only grow, a frame at a time, on each of
			// the W² links.
			if l.seen == nil {
				l.seen = make(map[uint64]bool)
			}
			l.seen[seq] = true
		}
		l.mu.Unlock()
		m.receive(l, frame)
	}
	if delay == 0 {
		// Deliver in order on a goroutine of its own per frame would
		// reorder; without faults the link keeps FIFO order by delivering
		// synchronously.
		deliver()
		return
	}
	time.AfterFunc(delay, deliver)
}

// receive hands a frame to the destination endpoint.
func (m *Mesh) receive(l *memLink, frame []byte) {
	dst := m.Endpoints[l.dst]
	h, err := decodeHeader(frame)
	if err != nil {
		dst.peerDown(l.src, err)
		return
	}
	body := frame[HeaderSize:]
	if int64(len(body)) != h.Len {
		dst.peerDown(l.src, fmt.Errorf("%w: %d payload bytes, header says %d", ErrFrame, len(body), h.Len))
		return
	}
	if err := dst.deliver(l.src, &h, &memPayload{b: body}); err != nil {
		dst.peerDown(l.src, err)
	}
}

func (l *memLink) close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	// The peer learns of the close from the goodbye frame Close sent.
	return nil
}
