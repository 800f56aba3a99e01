package samehost

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"unsafe"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/dist/internal/scratch"
	"github.com/godist/godist/internal/simd"
	"github.com/godist/godist/transport"
)

// MinShared is the smallest piece of a shared tensor, in bytes, whose
// calls go through shared memory: below it the two exchanges cost more
// than the payload's trip (see the package doc).
const MinShared = 128 << 10

// Tensor is memory that every member of a group has mapped from every
// other: this member's copy, and where the others' are.
type Tensor struct {
	regions Regions
	mem     []byte  // this member's copy
	base    uintptr // its address
	ids     []uint8 // the region id of each member's copy, by group rank
	release func()
}

// Tensors are a group's shared tensors, and the collectives on pieces of
// them. It is safe for concurrent use.
type Tensors struct {
	e  *Engine
	mu struct {
		sync.Mutex
		list []*Tensor
	}
}

// Add records a shared tensor: mem is this member's copy (which stays
// mapped until Remove), ids the region id of each member's copy (by
// group rank) in regions, and release what Release calls to let go of
// it (it must call Remove).
func (ts *Tensors) Add(mem []byte, regions Regions, ids []uint8, release func()) *Tensor {
	t := &Tensor{regions: regions, mem: mem, base: uintptr(unsafe.Pointer(unsafe.SliceData(mem))), ids: ids, release: release}
	ts.mu.Lock()
	ts.mu.list = append(ts.mu.list, t)
	ts.mu.Unlock()
	return t
}

// Remove forgets t, before its memory is unmapped.
func (ts *Tensors) Remove(t *Tensor) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if i := slices.Index(ts.mu.list, t); i >= 0 {
		ts.mu.list = slices.Delete(ts.mu.list, i, i+1)
	}
}

// Release calls the release of every shared tensor (once no call uses
// them: the group's Destroy).
func (ts *Tensors) Release() {
	ts.mu.Lock()
	list := slices.Clone(ts.mu.list)
	ts.mu.Unlock()
	for _, t := range list {
		t.release()
	}
}

// Piece returns the shared tensor that holds all of b, and b's offset in
// it, when b is at least MinShared bytes; else nil.
func (ts *Tensors) Piece(b []byte) (*Tensor, int) {
	if len(b) < MinShared {
		return nil, 0
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.mu.list {
		if p >= t.base && p+uintptr(len(b)) <= t.base+uintptr(len(t.mem)) {
			return t, int(p - t.base)
		}
	}
	return nil, 0
}

// call runs the body of call c over shared memory: every member
// announces where its piece of n bytes lies in its copy of t (this
// member's at off), then body runs with the others' copies of their
// pieces mapped (others[q], by group rank; nil for this member), then
// every member says it is done with the others' memory. With sameOffset
// the pieces must lie at the same offset everywhere (else an
// *OffsetError). body may read the others' pieces and write the parts of
// them that this member alone writes (see each collective).
//
// The first exchange orders every member's inputs before anyone reads
// them; the second keeps each member's inputs and outputs untouched by
// the others once its call returns.
func (ts *Tensors) call(ctx context.Context, c Call, t *Tensor, off, n int, sameOffset bool, body func(others [][]byte) error) error {
	e := ts.e
	e.calls.Add(1)
	size := len(e.ranks)
	ins := make([][]byte, size)
	var at [8]byte
	binary.LittleEndian.PutUint64(at[:], uint64(off))
	if err := e.g.Exchange(ctx, c, 0, at[:], ins); err != nil {
		return err
	}
	offs := make([]int, size)
	for q := range size {
		offs[q] = off
		if q == e.rank {
			continue
		}
		theirs := binary.LittleEndian.Uint64(ins[q])
		if sameOffset && int(theirs) != off {
			return &OffsetError{Peer: e.ranks[q], Mine: off, Theirs: int(theirs)}
		}
		if theirs > uint64(len(t.mem)) || uint64(len(t.mem))-theirs < uint64(n) {
			return &OffsetError{Peer: e.ranks[q], Mine: off, Theirs: int(min(theirs, 1<<62))}
		}
		offs[q] = int(theirs)
	}
	err := t.regions.UsePeerRegions(func(region func(int, uint8) []byte) error {
		others := make([][]byte, size)
		for q := range size {
			if q == e.rank {
				continue
			}
			mem := region(e.ranks[q], t.ids[q])
			if len(mem) < offs[q]+n {
				return &transport.PeerError{Rank: e.ranks[q], Err: errTensorUnmapped}
			}
			others[q] = mem[offs[q] : offs[q]+n]
		}
		return body(others)
	})
	if err != nil {
		return err
	}
	return e.g.Exchange(ctx, c, 1, nil, ins)
}

// AllReduce all-reduces b, a piece of a shared tensor (the same piece on
// every member), of elements of es bytes, with r: this member reduces
// its chunk of every copy, the others' in rank order, into its own copy,
// then writes the result into theirs.
func (ts *Tensors) AllReduce(ctx context.Context, c Call, b []byte, es int, r Reduction) error {
	t, off := ts.Piece(b)
	if t == nil {
		return ErrReleased
	}
	me, size := ts.e.rank, len(ts.e.ranks)
	offs, lens := algo.Chunks(len(b)/es, size)
	chunk := func(mem []byte, q int) []byte { return mem[offs[q]*es : (offs[q]+lens[q])*es] }
	return ts.call(ctx, c, t, off, len(b), true, func(others [][]byte) error {
		mine, last := chunk(b, me), size-1
		if last == me {
			last--
		}
		for q := range size {
			if q == me {
				continue
			}
			if q == last && r.Final != nil {
				r.Final(mine, chunk(others[q], me))
			} else {
				r.Reduce(mine, chunk(others[q], me))
			}
		}
		if r.Final == nil && r.Scale != nil {
			r.Scale(mine)
		}
		for q := range size {
			if q != me {
				simd.CopyStreaming(chunk(others[q], me), mine)
			}
		}
		return nil
	})
}

// Broadcast copies root's b, a piece of a shared tensor (the same piece
// on every member), into every member's: each member but root copies
// root's piece straight into its own, one copy where a transfer makes
// two.
func (ts *Tensors) Broadcast(ctx context.Context, c Call, b []byte, root int) error {
	t, off := ts.Piece(b)
	if t == nil {
		return ErrReleased
	}
	return ts.call(ctx, c, t, off, len(b), true, func(others [][]byte) error {
		if ts.e.rank != root {
			copy(b, others[root])
		}
		return nil
	})
}

// AllGather gathers every member's in, a piece of its shared tensor
// (anywhere in it: the others' pieces may lie elsewhere in theirs, such
// as their own chunk of a shared out), into out, member q's at
// q·len(in): each member copies the others' pieces straight into its
// out. out may be anything; in may be this member's chunk of it.
func (ts *Tensors) AllGather(ctx context.Context, c Call, out, in []byte) error {
	t, off := ts.Piece(in)
	if t == nil {
		return ErrReleased
	}
	me, n := ts.e.rank, len(in)
	mine := out[me*n : (me+1)*n]
	if !overlap(mine, in) || unsafe.SliceData(mine) != unsafe.SliceData(in) {
		copy(mine, in)
	}
	return ts.call(ctx, c, t, off, n, false, func(others [][]byte) error {
		for q, theirs := range others {
			if q != me {
				copy(out[q*n:(q+1)*n], theirs)
			}
		}
		return nil
	})
}

// ReduceScatter reduces chunk r (of len(out) bytes) of every member's
// in, a piece of its shared tensor (anywhere in it), into member r's
// out, with red: each member reduces its chunk of every member's in, its
// own first and then the others' in rank order, straight out of their
// memory. in is not modified unless out is a part of it.
func (ts *Tensors) ReduceScatter(ctx context.Context, c Call, out, in []byte, r Reduction) error {
	t, off := ts.Piece(in)
	if t == nil {
		return ErrReleased
	}
	me, n := ts.e.rank, len(out)
	own := in[me*n : (me+1)*n]
	dst := out
	inPlace := unsafe.SliceData(out) == unsafe.SliceData(own)
	if !inPlace && overlap(out, in) {
		dst = scratch.Copy(own) // out overlaps what the others read: reduce aside
		defer scratch.Put(dst)
	}
	return ts.call(ctx, c, t, off, len(in), false, func(others [][]byte) error {
		if !inPlace && &dst[0] == &out[0] {
			copy(dst, own)
		}
		for q, theirs := range others {
			if q != me {
				r.Reduce(dst, theirs[me*n:(me+1)*n])
			}
		}
		if r.Scale != nil {
			r.Scale(dst)
		}
		if &dst[0] != &out[0] {
			copy(out, dst)
		}
		return nil
	})
}

// overlap reports whether a and b share memory.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}
