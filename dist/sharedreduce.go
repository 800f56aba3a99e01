package dist

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/internal/simd"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// All-reduce in shared memory.
//
// When every member of a group runs on one host and each has mapped the
// others' copy of a tensor made by NewSharedTensor, an all-reduce of (a
// piece of) that tensor moves no payload over the transport: each member
// reduces its own chunk straight out of the others' memory, in place in
// its own copy (with AVG's scaling in the same pass), and writes the
// result into the others' copies. Two exchanges of small frames order the
// steps (and carry the failure detection, timeouts and desync checks of
// any other call):
//
//  1. arrive: every member's input is in place (the frame carries the
//     piece's offset in the tensor, which must be the same everywhere);
//  2. written: the member has read what it needed of the others' copies
//     and written its chunk into them; once a member has this from every
//     other, its copy holds the whole result and nobody reads it any more,
//     so the caller may write it again.
//
// Chunk q of every copy is read and written by member q alone, so nothing
// races. The results go into the others' copies with non-temporal stores
// (simd.CopyStreaming): no cache keeps those lines, so the owner's next
// writes (the next backward, for DDP's buckets) need not take them back
// from the writer's CPU. Measured on a VM whose two vCPUs the host moves
// between near and far cores: with the vCPUs far apart, reading the
// others' freshly reduced chunks instead (a third exchange, the copies
// pulled) took 200 µs for 470 KB against 33 µs near, and backward's
// writes into the lines the peer had read took 180 µs longer.
//
// Why: DDP's buckets live in such tensors. On the ring or halving-doubling
// schedules the member that finishes backward last does all of its share
// of the exchange after arriving (copy its half into a slot, reduce the
// other's half, copy the result into a slot, copy the other's result out:
// MLP, world 2, 940 KB: 250-300 µs while the other waits); here it only
// reduces its chunk and writes it out while the others do the same.
//
// Bytes moved through a peer's memory carry no checksum: they never leave
// the host's memory, as in MPI's and NCCL's shared-memory transports.

// sharedMin is the smallest all-reduce, in bytes, that goes through shared
// memory: below it the two exchanges cost more than the payload's trip
// (`godist bench --shared`, world 2, ranks arriving together, vCPUs near:
// 32 KiB 27-30 µs against recursive doubling's 18-19, 64 KiB 28-30
// against 22-26, 128 KiB 29-34 against halving-doubling's 42-50, 940 KB
// 88-97 against 126-128, 4 MiB 276-301 against 496-651; vCPUs far apart:
// 940 KB 70 against 506, 4 MiB 190 against 2150).
const sharedMin = 128 << 10

// sharedBuf is a tensor from NewSharedTensor that every member has mapped
// from every other.
type sharedBuf struct {
	pm   transport.PeerMemory // where the others' copies are mapped
	base uintptr              // this rank's copy
	n    int                  // bytes
	ids  []uint8              // region id of each member's copy, by group rank
	t    *tensor.Tensor       // the tensor NewSharedTensor returned
}

// registerShared records a shared tensor's copies.
func (g *Group) registerShared(sb *sharedBuf) {
	g.mu.Lock()
	g.mu.shared = append(g.mu.shared, sb)
	g.mu.Unlock()
}

// forgetShared forgets a shared tensor (before its memory is unmapped).
func (g *Group) forgetShared(sb *sharedBuf) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, x := range g.mu.shared {
		if x == sb {
			g.mu.shared = append(g.mu.shared[:i], g.mu.shared[i+1:]...)
			return
		}
	}
}

// releaseShared releases g's shared tensors (Destroy) once no call is in
// flight on g, waiting at most wait: a call that outlives it (stuck in
// user code, say) keeps them mapped rather than meet unmapped memory.
func (g *Group) releaseShared(wait time.Duration) {
	if !g.waitIdle(wait) {
		return
	}
	g.mu.Lock()
	shared := slices.Clone(g.mu.shared)
	g.mu.Unlock()
	for _, sb := range shared {
		sb.t.Release()
	}
}

// sharedFor returns the shared tensor that holds all of b, and b's offset
// in it, when an all-reduce of b goes through shared memory (b is at least
// sharedMin bytes); else nil.
func (g *Group) sharedFor(b []byte) (*sharedBuf, int) {
	if len(b) < sharedMin {
		return nil, 0
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, sb := range g.mu.shared {
		if p >= sb.base && p+uintptr(len(b)) <= sb.base+uintptr(sb.n) {
			return sb, int(p - sb.base)
		}
	}
	return nil, 0
}

// SharedAllReduceApplies reports whether an all-reduce of t on g goes
// through shared memory: t is a piece of at least 128 KiB of a tensor from
// g's NewSharedTensor, and every member has mapped every other's copy. The
// same holds for a broadcast of t, and for an all-gather or a
// reduce-scatter whose input is t.
func SharedAllReduceApplies(g *Group, t *tensor.Tensor) bool {
	if !t.IsContiguous() {
		return false
	}
	sb, _ := g.sharedFor(t.Bytes())
	return sb != nil
}

// explainShared says what a frame of the wrong length at the start of a
// collective means when one side went through shared memory and the other
// did not (shared: this rank did): the first frame of a shared all-reduce
// carries 8 bytes, the piece's offset.
func explainShared(err error, shared bool) error {
	var le *transport.LengthError
	if err == nil || !errors.As(err, &le) || le.Key.Tag != 0 || (le.Got == 8) == shared {
		return err
	}
	if shared {
		return fmt.Errorf("%w: rank %d passed an ordinary tensor where this rank passed a piece of a shared one (Group.NewSharedTensor); every member must pass the same piece of its own shared tensor", err, le.Src)
	}
	return fmt.Errorf("%w: rank %d passed a piece of a shared tensor (Group.NewSharedTensor) where this rank passed an ordinary one; every member must pass the same piece of its own shared tensor", err, le.Src)
}

// OffsetMismatchError reports that members passed different pieces of a
// shared tensor to the same call (all_reduce and broadcast need the same
// piece everywhere), or a piece that does not fit in the tensor.
type OffsetMismatchError struct {
	Op           string // the collective, as PyTorch names it
	Rank, Peer   int    // global ranks
	Mine, Theirs int    // byte offsets in the shared tensor
}

func (e *OffsetMismatchError) Error() string {
	return fmt.Sprintf("dist: %s: rank %d passed the piece at byte %d of a shared tensor, rank %d the piece at byte %d; every member must pass the same piece of its copy", e.Op, e.Rank, e.Mine, e.Peer, e.Theirs)
}

// sharedCall runs the body of a collective over shared memory: every
// member announces where its piece of n bytes lies in its shared tensor
// sb (this rank's at off), then body runs with the others' copies of
// their pieces mapped (others[q], by group rank; nil for this rank),
// then every member says it is done with the others' memory. With
// sameOffset the pieces must lie at the same offset everywhere (else an
// *OffsetMismatchError). body may read the others' pieces and write
// the parts of them that this rank alone writes (see each collective).
//
// The first exchange orders every member's inputs before anyone reads
// them; the second keeps each member's inputs and outputs untouched by
// the others once its call returns.
func (g *Group) sharedCall(ctx context.Context, seq uint64, c call, sb *sharedBuf, off, n int, sameOffset bool, body func(others [][]byte) error) error {
	g.sharedCalls.Add(1)
	ep := g.world.ep
	fp := c.fingerprint()
	size := g.Size()
	// exchange sends msg to every other member under tag and receives
	// theirs into ins (by group rank).
	ins := make([][]byte, size)
	recvs := make([]*transport.Receive, size)
	exchange := func(tag uint32, msg []byte) error {
		key := transport.Key{Group: g.id, Seq: seq, Tag: tag}
		for q := range size {
			if q != g.rank {
				peer := g.ranks[q]
				ins[q] = make([]byte, len(msg))
				recvs[q] = ep.Post(peer, transport.ExactMatch(peer, key), fp, ins[q])
			}
		}
		var err error
		for q := range size {
			if q != g.rank && err == nil {
				err = ep.Send(ctx, g.ranks[q], key, fp, msg)
			}
		}
		for q := range size {
			if q == g.rank || recvs[q] == nil {
				continue
			}
			if err == nil {
				err = g.await(ctx, recvs[q], g.ranks[q], seq)
			} else {
				withdraw([]*transport.Receive{recvs[q]}, func(r *transport.Receive) *transport.Receive { return r })
			}
			recvs[q] = nil
		}
		return err
	}
	var at [8]byte
	binary.LittleEndian.PutUint64(at[:], uint64(off))
	if err := exchange(0, at[:]); err != nil {
		return err
	}
	offs := make([]int, size)
	for q := range size {
		offs[q] = off
		if q == g.rank {
			continue
		}
		theirs := binary.LittleEndian.Uint64(ins[q])
		if sameOffset && int(theirs) != off {
			return &OffsetMismatchError{Op: c.op.String(), Rank: g.world.rank, Peer: g.ranks[q], Mine: off, Theirs: int(theirs)}
		}
		if theirs > uint64(sb.n) || uint64(sb.n)-theirs < uint64(n) {
			return &OffsetMismatchError{Op: c.op.String(), Rank: g.world.rank, Peer: g.ranks[q], Mine: off, Theirs: int(min(theirs, 1<<62))}
		}
		offs[q] = int(theirs)
	}
	err := sb.pm.UsePeerRegions(func(region func(int, uint8) []byte) error {
		others := make([][]byte, size)
		for q := range size {
			if q == g.rank {
				continue
			}
			mem := region(g.ranks[q], sb.ids[q])
			if len(mem) < offs[q]+n {
				return &transport.PeerError{Rank: g.ranks[q], Err: fmt.Errorf("its shared tensor is no longer mapped (connection ended)")}
			}
			others[q] = mem[offs[q] : offs[q]+n]
		}
		return body(others)
	})
	if err != nil {
		return err
	}
	return exchange(1, nil)
}

// allReduceShared all-reduces b, which lies at off in shared tensor sb
// (see the comment at the top of this file): this rank reduces its chunk
// of every copy, the others' in rank order, into its own copy, then
// writes the result into theirs.
func (g *Group) allReduceShared(ctx context.Context, seq uint64, c call, b []byte, es int, sb *sharedBuf, off int, red, final reducer, op ReduceOp) error {
	size := g.Size()
	offs, lens := algo.Chunks(len(b)/es, size)
	chunk := func(mem []byte, q int) []byte { return mem[offs[q]*es : (offs[q]+lens[q])*es] }
	return g.sharedCall(ctx, seq, c, sb, off, len(b), true, func(others [][]byte) error {
		mine, last := chunk(b, g.rank), size-1
		if last == g.rank {
			last--
		}
		for q := range size {
			if q == g.rank {
				continue
			}
			if q == last && final != nil {
				final(mine, chunk(others[q], g.rank))
			} else {
				red(mine, chunk(others[q], g.rank))
			}
		}
		if op == Avg && final == nil {
			finishAvg(mine, c.dtype, size)
		}
		for q := range size {
			if q != g.rank {
				simd.CopyStreaming(chunk(others[q], g.rank), mine)
			}
		}
		return nil
	})
}

// broadcastShared broadcasts b, which lies at off in shared tensor sb:
// every member but root copies root's piece straight into its own, one
// copy where a transfer makes two.
func (g *Group) broadcastShared(ctx context.Context, seq uint64, c call, b []byte, sb *sharedBuf, off, root int) error {
	return g.sharedCall(ctx, seq, c, sb, off, len(b), true, func(others [][]byte) error {
		if g.rank != root {
			copy(b, others[root])
		}
		return nil
	})
}

// allGatherShared gathers every member's in, a piece of its shared tensor
// sb (this rank's at off; the others' anywhere in theirs, such as their
// own chunk of a shared out), into out: each member copies the others'
// pieces straight into its out. out may be anything, in may be this
// rank's chunk of it.
func (g *Group) allGatherShared(ctx context.Context, seq uint64, c call, out, in []byte, sb *sharedBuf, off int) error {
	n := len(in)
	mine := out[g.rank*n : (g.rank+1)*n]
	if !overlapMem(mine, in) || unsafe.SliceData(mine) != unsafe.SliceData(in) {
		copy(mine, in)
	}
	return g.sharedCall(ctx, seq, c, sb, off, n, false, func(others [][]byte) error {
		for q, theirs := range others {
			if q != g.rank {
				copy(out[q*n:(q+1)*n], theirs)
			}
		}
		return nil
	})
}

// reduceScatterShared reduce-scatters in, a piece of this rank's shared
// tensor sb at off (the others' anywhere in theirs), into out: each
// member reduces its chunk of every member's in, its own first and then
// the others' in rank order, straight out of their memory. in is not
// modified unless out is a part of it.
func (g *Group) reduceScatterShared(ctx context.Context, seq uint64, c call, out, in []byte, sb *sharedBuf, off int, red reducer, op ReduceOp) error {
	n := len(out)
	own := in[g.rank*n : (g.rank+1)*n]
	dst := out
	inPlace := unsafe.SliceData(out) == unsafe.SliceData(own)
	if !inPlace && overlapMem(out, in) {
		dst = scratchCopy(own) // out overlaps what the others read: reduce aside
		defer putScratch(dst)
	}
	return g.sharedCall(ctx, seq, c, sb, off, len(in), false, func(others [][]byte) error {
		if !inPlace && &dst[0] == &out[0] {
			copy(dst, own)
		}
		for q, theirs := range others {
			if q != g.rank {
				red(dst, theirs[g.rank*n:(g.rank+1)*n])
			}
		}
		if op == Avg {
			finishAvg(dst, c.dtype, g.Size())
		}
		if &dst[0] != &out[0] {
			copy(out, dst)
		}
		return nil
	})
}
