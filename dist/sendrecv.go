package dist

import (
	"context"
	"fmt"
	"time"

	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// Point-to-point messages are matched by source, tag and order: the n-th
// Send from a to b with tag t meets the n-th Recv on b from a with tag t.
// Their frames carry the group id with p2pBit set and, as sequence number,
// that per-(peer, tag) count; the fingerprint (dtype, element count) is
// checked as for collectives.

func (g *Group) p2pCall(op string, t *tensor.Tensor, peer, tag int, anyOK bool) (call, error) {
	if err := g.checkTensor(op, t); err != nil {
		return call{}, err
	}
	if !(anyOK && peer == AnySource) && (peer < 0 || peer >= g.Size() || peer == g.rank) {
		return call{}, &InputError{op, fmt.Sprintf("peer %d: want another rank of this group of %d (this is rank %d)", peer, g.Size(), g.rank)}
	}
	if tag < 0 || tag > 1<<31 {
		return call{}, &InputError{op, fmt.Sprintf("tag %d out of range", tag)}
	}
	return call{op: opSend, dtype: t.DType(), count: t.Numel(), root: -1}, nil
}

// Send sends t to member dst with a tag. It returns once t's bytes are
// handed to the transport (t may then be reused), not when dst has them.
func (g *Group) Send(ctx context.Context, t *tensor.Tensor, dst, tag int) error {
	return g.ISend(t, dst, tag).Wait(ctx)
}

// ISend starts a Send; t must not be modified until the Work is done.
func (g *Group) ISend(t *tensor.Tensor, dst, tag int) *Work {
	c, err := g.p2pCall("send", t, dst, tag, false)
	if err != nil {
		return doneWork(err)
	}
	now := time.Now()
	g.mu.Lock()
	id, n, out, err := g.mu.st.beginSend(c, dst, uint32(tag), now)
	g.armLocked(out.Arm, now)
	g.mu.Unlock()
	if err != nil {
		return doneWork(err)
	}
	key := transport.Key{Group: g.id | p2pBit, Seq: n, Tag: uint32(tag)}
	return goWork(func() error {
		return g.runCall(context.Background(), ticket{id, n, c}, func(ctx context.Context, _ uint64) error {
			return g.world.ep.Send(ctx, g.ranks[dst], key, c.fingerprint(), t.Bytes())
		})
	})
}

// Recv receives into t a message with tag from member src, or from any
// member when src is AnySource, and returns the sender's group rank.
func (g *Group) Recv(ctx context.Context, t *tensor.Tensor, src, tag int) (int, error) {
	w := g.IRecv(t, src, tag)
	if err := w.Wait(ctx); err != nil {
		return -1, err
	}
	return w.Source(), nil
}

// IRecv starts a Recv; t must not be read until the Work is done. The
// Work's Source is the sender.
func (g *Group) IRecv(t *tensor.Tensor, src, tag int) *Work {
	c, err := g.p2pCall("recv", t, src, tag, true)
	if err != nil {
		return doneWork(err)
	}
	peer := AnySource
	if src != AnySource {
		peer = g.ranks[src]
	}
	now := time.Now()
	g.mu.Lock()
	id, out, err := g.mu.st.beginRecv(c, src, uint32(tag), now)
	if err == nil && peer != AnySource {
		out.Arm = minTime(out.Arm, g.mu.st.wait(id, peer, now).Arm)
	}
	g.armLocked(out.Arm, now)
	g.mu.Unlock()
	if err != nil {
		return doneWork(err)
	}
	utag := uint32(tag)
	match := func(from int, h *transport.Header) bool {
		gr := g.groupRank(from)
		if gr < 0 || h.Key.Group != g.id|p2pBit || h.Key.Tag != utag {
			return false
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.mu.st.accept(gr, utag, h.Key.Seq)
	}
	r := g.world.ep.Post(peer, match, c.fingerprint(), t.Bytes())
	w := &Work{done: make(chan struct{}), src: -1}
	go func() {
		w.err = g.runCall(context.Background(), ticket{id, 0, c}, func(ctx context.Context, _ uint64) error {
			from, err := r.Wait(ctx)
			if err == nil {
				w.src = g.groupRank(from)
			}
			return err
		})
		close(w.done)
	}()
	return w
}

// minTime is the earlier of two times, zero meaning none.
func minTime(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// P2POp is one operation of BatchISendIRecv.
type P2POp struct {
	Send   bool // false: receive
	Tensor *tensor.Tensor
	Peer   int // group rank (AnySource for a receive)
	Tag    int
}

// BatchISendIRecv starts every operation in order and returns their
// Works, as torch.distributed.batch_isend_irecv.
func (g *Group) BatchISendIRecv(ops []P2POp) []*Work {
	ws := make([]*Work, len(ops))
	for i, op := range ops {
		if op.Send {
			ws[i] = g.ISend(op.Tensor, op.Peer, op.Tag)
		} else {
			ws[i] = g.IRecv(op.Tensor, op.Peer, op.Tag)
		}
	}
	return ws
}
