package transport

import (
	"fmt"
	"sync/atomic"
)

// peer is an endpoint's state for one other rank. It is made when the
// rank is first used (a frame sent to it or from it, a receive posted for
// it, news of its loss), not for every rank at the start: at W ranks a
// job holds W² of these, and most pairs never exchange a frame (a ring's
// rank talks to two, a tree's to log W).
type peer struct {
	link  atomic.Pointer[linkRef] // nil until the link to the rank is up
	gone  atomic.Bool             // set when the link fails or closes
	spare spare                   // its messages' spare buffer (spare.go)
	live  liveness                // heartbeat counts (heartbeat.go)
}

// linkRef holds a link, for an atomic pointer to it.
type linkRef struct{ l link }

// linkOf returns the peer's link, or nil.
func (p *peer) linkOf() link {
	if r := p.link.Load(); r != nil {
		return r.l
	}
	return nil
}

// peerTable holds an endpoint's peers by rank, sparsely: a chunk of
// peerChunk slots is made when a rank in it is first used. Lookups take no
// lock.
type peerTable struct {
	chunks []atomic.Pointer[[peerChunk]atomic.Pointer[peer]]
}

const peerChunk = 64

func newPeerTable(size int) peerTable {
	return peerTable{chunks: make([]atomic.Pointer[[peerChunk]atomic.Pointer[peer]], (size+peerChunk-1)/peerChunk)}
}

// get returns rank r's peer, or nil when r has not been used. r must be a
// rank of the job.
func (t *peerTable) get(r int) *peer {
	c := t.chunks[r/peerChunk].Load()
	if c == nil {
		return nil
	}
	return c[r%peerChunk].Load()
}

// make returns rank r's peer, making it if r has not been used.
func (t *peerTable) make(r int) *peer {
	slot := &t.chunks[r/peerChunk]
	c := slot.Load()
	if c == nil {
		c = new([peerChunk]atomic.Pointer[peer])
		if !slot.CompareAndSwap(nil, c) {
			c = slot.Load()
		}
	}
	p := c[r%peerChunk].Load()
	if p == nil {
		p = new(peer)
		if !c[r%peerChunk].CompareAndSwap(nil, p) {
			p = c[r%peerChunk].Load()
		}
	}
	return p
}

// each calls fn for every peer made, in rank order.
func (t *peerTable) each(fn func(r int, p *peer)) {
	for i := range t.chunks {
		c := t.chunks[i].Load()
		if c == nil {
			continue
		}
		for j := range c {
			if p := c[j].Load(); p != nil {
				fn(i*peerChunk+j, p)
			}
		}
	}
}

// isGone reports whether rank r's link has failed or closed.
func (t *peerTable) isGone(r int) bool {
	p := t.get(r)
	return p != nil && p.gone.Load()
}

// linkTo returns the link to rank r, making it on first use (connect).
func (e *Endpoint) linkTo(r int) (link, error) {
	p := e.peers.make(r)
	if l := p.linkOf(); l != nil {
		return l, nil
	}
	if e.connect == nil {
		return nil, fmt.Errorf("transport: rank %d has no link to rank %d", e.rank, r)
	}
	if err := e.connect(r); err != nil {
		return nil, err
	}
	if l := p.linkOf(); l != nil {
		return l, nil
	}
	return nil, fmt.Errorf("transport: rank %d: connecting to rank %d made no link", e.rank, r)
}

// setLink installs l as the link to rank r unless r has one, and then
// tells Handlers.PeerUp. It reports whether l was installed.
func (e *Endpoint) setLink(r int, l link) bool {
	if !e.peers.make(r).link.CompareAndSwap(nil, &linkRef{l}) {
		return false
	}
	e.mu.Lock()
	fn := e.mu.handlers.PeerUp
	e.mu.Unlock()
	if fn != nil {
		fn(r)
	}
	return true
}

// tcpLinkOf returns rank r's TCP link, or nil: none made (yet), an
// in-process link, or r is this rank.
func (e *Endpoint) tcpLinkOf(r int) *tcpLink {
	if r == e.rank {
		return nil
	}
	if p := e.peers.get(r); p != nil {
		if l, ok := p.linkOf().(*tcpLink); ok {
			return l
		}
	}
	return nil
}

// Connected reports whether this rank has a link to rank r: whether a
// frame has passed between them or a receive from r was posted here. A
// layer that tells the other ranks something (dist: that a group failed)
// tells those it is connected to, and each of them tells its own; a rank
// connected later hears it then (Handlers.PeerUp).
func (e *Endpoint) Connected(r int) bool {
	if r < 0 || r >= e.size || r == e.rank {
		return false
	}
	p := e.peers.get(r)
	return p != nil && p.linkOf() != nil
}
