package rpc

// The agent's client side, as net/rpc's client.go: an outgoing request is
// registered as a pending call, sent, and completed by its reply, by its
// worker's death (onPeerDown) or by its deadline (sweep).

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/godist/godist/rpc/internal/wire"
	"github.com/godist/godist/transport"
)

// call is an outgoing call waiting for its reply.
type call struct {
	dst      int
	fn       string
	deadline time.Time // zero: none
	// complete receives the reply's body (nil on failure) or the error,
	// exactly once.
	complete func(body []byte, err error)
	// unsent, when set, runs when the request is known never to have
	// left (the RRefs forked into it are unforked, and a remote call's
	// new RRef is dropped).
	unsent func()
}

// sweep fails calls past their deadline.
func (a *Agent) sweep() {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-a.stopSweep:
			return
		case now := <-t.C:
			a.mu.Lock()
			var late []*call
			for id, c := range a.mu.pending {
				if !c.deadline.IsZero() && now.After(c.deadline) {
					late = append(late, c)
					delete(a.mu.pending, id)
				}
			}
			a.mu.Unlock()
			for _, c := range late {
				c.complete(nil, fmt.Errorf("no reply within the call's timeout: %w", context.DeadlineExceeded))
			}
		}
	}
}

// send sends one request to dst and registers c to hear its reply.
func (a *Agent) send(ctx context.Context, dst int, h *head, argFP uint64, body [][]byte, c *call) {
	if deadline, ok := ctx.Deadline(); ok {
		c.deadline = deadline
	} else if a.timeout > 0 {
		c.deadline = time.Now().Add(a.timeout)
	}
	if !c.deadline.IsZero() {
		h.timeout = time.Until(c.deadline)
	}
	hb := h.encode()
	size := int64(len(hb))
	for _, p := range body {
		size += int64(len(p))
	}
	unsent := func(err error) {
		if c.unsent != nil {
			c.unsent()
		}
		c.complete(nil, err)
	}
	if dst >= 0 && dst < len(a.limits) && size > a.limits[dst] {
		unsent(fmt.Errorf("%w: a request of %d bytes, %s accepts at most %d (its Options.MaxMessage)", ErrTooLarge, size, a.name(dst), a.limits[dst]))
		return
	}
	id := a.nextID.Add(1)
	a.mu.Lock()
	if a.mu.closed {
		a.mu.Unlock()
		unsent(ErrShutdown)
		return
	}
	if err := a.mu.down[dst]; err != nil {
		a.mu.Unlock()
		c.complete(nil, err) // the RRef table forgot the dead worker already
		return
	}
	a.mu.pending[id] = c
	a.mu.Unlock()
	a.sent.Add(1)
	var err error
	if dst == a.self.ID {
		err = a.loopback(dst, key(tagRequest, id), argFP, hb, body)
	} else {
		// ctx only ends a send blocked on a full socket; the call's
		// deadline is the sweeper's, and a dead peer fails the send.
		err = a.ep.SendMessage(ctx, dst, key(tagRequest, id), argFP, append([][]byte{hb}, body...)...)
	}
	if err != nil {
		a.sent.Add(-1)
		if a.take(id) != nil {
			var perr *transport.PeerError
			if errors.As(err, &perr) || a.downErr(dst) != nil {
				// Cut short or never sent to a peer now down: the RRef
				// table hears of it from PeerDown.
				if werr := a.downErr(dst); werr != nil {
					err = werr
				}
				c.complete(nil, err)
				return
			}
			unsent(err) // the context ended before any byte left
		}
	}
}

// take removes and returns the pending call id, or nil when it is no
// longer pending (answered, failed or timed out).
func (a *Agent) take(id uint64) *call {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.mu.pending[id]
	delete(a.mu.pending, id)
	return c
}

func (a *Agent) onReply(src int, id uint64, msg []byte, size int64) {
	c := a.take(id)
	if c == nil {
		return // timed out or failed already
	}
	if c.dst != src {
		a.log.Warn("rpc: reply from the wrong worker dropped", "from", src, "call", id)
		a.mu.Lock()
		a.mu.pending[id] = c
		a.mu.Unlock()
		return
	}
	if int64(len(msg)) < size {
		c.complete(nil, fmt.Errorf("%w: a reply of %d bytes, this worker accepts at most %d (Options.MaxMessage)", ErrTooLarge, size, a.limit))
		return
	}
	if len(msg) < 8 {
		c.complete(nil, fmt.Errorf("%w: reply of %d bytes", ErrMalformed, len(msg)))
		return
	}
	body := msg[8:]
	if msg[0] == replyError {
		var we wireError
		d, err := wire.NewDecoder(body, nil)
		if err == nil {
			err = d.Decode(&we)
		}
		if err != nil {
			c.complete(nil, fmt.Errorf("%w: error reply: %v", ErrMalformed, err))
			return
		}
		c.complete(nil, we.err())
		return
	}
	c.complete(body, nil)
}

// pendingCalls lists the calls in flight, for error messages.
func (a *Agent) pendingCalls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, c := range a.mu.pending {
		out = append(out, fmt.Sprintf("%s on %s", c.fn, a.name(c.dst)))
	}
	sort.Strings(out)
	return out
}
