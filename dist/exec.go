package dist

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/transport"
)

// space is the memory a schedule runs over: element ranges map to bytes.
type space interface {
	at(off, n int) []byte
}

// flat is one contiguous buffer.
type flat struct {
	b  []byte
	es int
}

func (f flat) at(off, n int) []byte { return f.b[off*f.es : (off+n)*f.es] }

// parts is a buffer made of separate chunks laid out by offsets (gather
// and scatter, whose transfers never cross a chunk).
type parts struct {
	bufs [][]byte
	offs []int // element offset of each chunk
	es   int
}

func (p parts) at(off, n int) []byte {
	if n == 0 {
		return nil
	}
	for i, o := range p.offs {
		if off >= o && (off+n)*p.es <= o*p.es+len(p.bufs[i]) {
			lo := (off - o) * p.es
			return p.bufs[i][lo : lo+n*p.es]
		}
	}
	panic(fmt.Sprintf("dist: transfer [%d, %d) crosses chunks %v", off, off+n, p.offs))
}

// execute runs a schedule over the transport.
//
// It follows the schedule's semantics (rounds in order; a round's sends
// read the buffer as the earlier rounds left it) without running the ranks
// in lock step: receives are posted at least lookahead rounds early (up to
// maxAhead while their scratch space stays within scratchBudget: a peer
// whose sends do not block runs ahead, and a frame with no receive posted
// costs an allocation and a copy), and a round's sends wait only for
// earlier receives that write what they read.
// So a ring's pieces stream back to back, and frames find their receive
// already posted (and land in place) instead of being copied on arrival.
// A receive lands in place (a reducing one reduces piece by piece as it
// is read) when nothing still to be sent reads its range and no earlier
// receive writes it; snapshot rounds' receives and the others land in
// scratch space and are applied in posting order. red reduces a reducing
// receive; final, when not nil, replaces it on the receives marked
// algo.Xfer.Final (an averaging all-reduce's last sum, see avgFinal).
func (g *Group) execute(ctx context.Context, seq uint64, c call, sched algo.Schedule, buf space, es int, red, final reducer) error {
	const (
		lookahead     = 2
		maxAhead      = 8
		scratchBudget = 16 << 20
	)
	ep := g.world.ep
	fp := c.fingerprint()
	sent, recvd := make([]uint32, len(g.ranks)), make([]uint32, len(g.ranks))
	type inflight struct {
		r     *transport.Receive
		x     algo.Xfer
		tmp   []byte // nil: the frame lands in place
		round int
	}
	var pending []inflight
	var free [][]byte
	scratchInUse := 0 // bytes of pending receives' scratch
	scratch := func(n int) []byte {
		for i, b := range free {
			if cap(b) >= n {
				free = append(free[:i], free[i+1:]...)
				return b[:n]
			}
		}
		return getScratch(n)
	}
	defer func() {
		for _, b := range free {
			putScratch(b)
		}
	}()
	// reduceWith is the kernel of a reducing receive: final for one that
	// completes its range, when the caller gave one.
	reduceWith := func(x algo.Xfer) reducer {
		if x.Final && final != nil {
			return final
		}
		return red
	}
	fail := func(err error) error {
		withdraw(pending, func(p inflight) *transport.Receive { return p.r })
		return err
	}
	// completeFront waits for the oldest receive and applies it.
	completeFront := func() error {
		p := pending[0]
		if err := g.await(ctx, p.r, g.ranks[p.x.Peer], seq); err != nil {
			return err
		}
		pending = pending[1:]
		if p.tmp != nil {
			dst := buf.at(p.x.Off, p.x.Len)
			if p.x.Reduce {
				reduceWith(p.x)(dst, p.tmp)
			} else {
				copy(dst, p.tmp)
			}
			free = append(free, p.tmp)
			scratchInUse -= len(p.tmp)
		}
		return nil
	}
	overlaps := func(a, b algo.Xfer) bool {
		return a.Len > 0 && b.Len > 0 && a.Off < b.Off+b.Len && b.Off < a.Off+a.Len
	}
	// A receive that could land in place but for a send of an earlier
	// round not yet made (which reads the same bytes) waits here until that
	// send is out, rather than landing in scratch and being copied.
	type later struct {
		x     algo.Xfer
		tag   uint32
		round int
	}
	var deferred []later
	// place posts receive x of round j (with its tag), given that the sends
	// of the rounds before current have been made. It reports false when x
	// must wait for those sends.
	place := func(x algo.Xfer, tag uint32, j, current int, mayWait bool) bool {
		dst := buf.at(x.Off, x.Len)
		// In place (a reducing receive reduces each piece into dst as it
		// is read, while the piece is in cache) unless its round reads a
		// snapshot, an earlier receive still writes there, or a send of
		// the rounds before it (not yet sent) reads there.
		inPlace := !sched[j].Snapshot
		for _, p := range pending {
			if inPlace && p.round < j && overlaps(p.x, x) {
				inPlace = false
			}
		}
		for _, d := range deferred {
			if inPlace && d.round < j && overlaps(d.x, x) {
				inPlace = false
			}
		}
		if inPlace {
			for k := current; k < j; k++ {
				for _, y := range sched[k].Sends {
					if overlaps(x, y) {
						if mayWait {
							return false
						}
						inPlace = false
					}
				}
			}
		}
		var tmp []byte
		if !inPlace {
			tmp = scratch(len(dst))
			dst = tmp
			scratchInUse += len(tmp)
		}
		peer := g.ranks[x.Peer]
		key := transport.Key{Group: g.id, Seq: seq, Tag: tag}
		var r *transport.Receive
		if x.Reduce && inPlace {
			rx := reduceWith(x)
			r = ep.PostSink(peer, transport.ExactMatch(peer, key), fp, len(dst), func(off int, b []byte) {
				rx(dst[off:off+len(b)], b)
			})
		} else {
			r = ep.Post(peer, transport.ExactMatch(peer, key), fp, dst)
		}
		f := inflight{r, x, tmp, j}
		// Keep pending in round order: receives are applied oldest first.
		at := len(pending)
		for at > 0 && pending[at-1].round > j {
			at--
		}
		pending = slices.Insert(pending, at, f)
		return true
	}
	post := func(j, current int) {
		for _, x := range sched[j].Recvs {
			tag := recvd[x.Peer]
			recvd[x.Peer]++
			if !place(x, tag, j, current, true) {
				deferred = append(deferred, later{x, tag, j})
			}
		}
	}
	// retry posts the deferred receives whose sends are out.
	retry := func(current int) {
		kept := deferred[:0]
		for _, d := range deferred {
			if !place(d.x, d.tag, d.round, current, d.round > current) {
				kept = append(kept, d)
			}
		}
		deferred = kept
	}
	posted := 0
	for i, round := range sched {
		if len(deferred) > 0 {
			retry(i)
		}
		for ; posted < len(sched) && (posted <= i+lookahead || posted <= i+maxAhead && scratchInUse < scratchBudget); posted++ {
			post(posted, i)
		}
		for _, x := range round.Sends {
			// Apply the earlier rounds' receives that write what this
			// send reads (in order).
			for {
				need := false
				for _, p := range pending {
					// An empty transfer carries no data, only order (a
					// barrier's): it waits for every earlier receive.
					if p.round < i && (x.Len == 0 || p.x.Len == 0 || overlaps(p.x, x)) {
						need = true
						break
					}
				}
				if !need {
					break
				}
				if err := completeFront(); err != nil {
					return fail(err)
				}
			}
			tag := sent[x.Peer]
			sent[x.Peer]++
			key := transport.Key{Group: g.id, Seq: seq, Tag: tag}
			if err := ep.Send(ctx, g.ranks[x.Peer], key, fp, buf.at(x.Off, x.Len)); err != nil {
				return fail(err)
			}
		}
	}
	for len(pending) > 0 {
		if err := completeFront(); err != nil {
			return fail(err)
		}
	}
	return nil
}

// Scratch buffers for receives are recycled across calls by size class
// (powers of two): a training step's all-reduces would otherwise allocate
// and zero megabytes each time.
var scratchPools [48]sync.Pool

func sizeClass(n int) int {
	c := 0
	for 1<<c < n {
		c++
	}
	return c
}

func getScratch(n int) []byte {
	c := sizeClass(n)
	if b, ok := scratchPools[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<c)
}

func putScratch(b []byte) {
	c := sizeClass(cap(b))
	if cap(b) != 1<<c {
		return
	}
	scratchPools[c].Put(&b)
}

// withdraw cancels posted receives that will not be waited for.
func withdraw[T any](ps []T, r func(T) *transport.Receive) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, p := range ps {
		r(p).Wait(ctx)
	}
}
