package tensor

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// The storage pool. Every buffer of poolMin bytes or more that the package
// allocates for a tensor (New, Empty, Clone, an unsized destination, the
// results of Conv2d and the like) is taken from a pool of buffers of that
// exact size when the pool has one, and Recycle gives it back. A training
// step allocates the same sizes every time, so once the first step's
// buffers have been recycled the next steps find them there: the Go heap
// stops growing, the collector has nothing to do, and no page is faulted
// in twice. Who may recycle what is the caller's contract (autograd's
// engine recycles the intermediate tensors of a backward pass; see its
// package documentation); this package only makes a mistake visible: a
// recycled tensor's views are stale, and built with the tag godist_guard,
// using one panics and the recycled memory is poisoned with NaNs.
//
// The pool is sync.Pools, one per size: buffers nobody asks for again are
// dropped by the garbage collector's next cycles, as any sync.Pool's.

// poolMin is the smallest buffer that is pooled: smaller ones cost less to
// allocate than to look up.
const poolMin = 256

// pooled is a buffer of the pool. Every tensor whose storage it is points
// to it and holds the generation it was handed out in; Recycle moves the
// generation on, so that a stale view (of a tensor already recycled) is
// told apart from the buffer's next owner and cannot recycle it twice.
type pooled struct {
	buf []byte
	gen atomic.Uint32
}

var pools struct {
	mu sync.RWMutex
	m  map[int]*sync.Pool // byte size -> *pooled of that size
}

// poolFor returns the pool of n-byte buffers, making it when make is set
// (else it may return nil).
func poolFor(n int, make bool) *sync.Pool {
	pools.mu.RLock()
	p := pools.m[n]
	pools.mu.RUnlock()
	if p != nil || !make {
		return p
	}
	pools.mu.Lock()
	defer pools.mu.Unlock()
	if p = pools.m[n]; p == nil {
		if pools.m == nil {
			pools.m = map[int]*sync.Pool{}
		}
		p = new(sync.Pool)
		pools.m[n] = p
	}
	return p
}

// getPooled returns a buffer of n ≥ poolMin bytes, 8-byte aligned: a
// recycled one when the pool has one (cleared if zero is set, else holding
// what it held), else a new, zeroed one.
func getPooled(n int, zero bool) *pooled {
	if p := poolFor(n, false); p != nil {
		if b, ok := p.Get().(*pooled); ok {
			if zero {
				clear(b.buf)
			}
			return b
		}
	}
	words := make([]uint64, (n+7)/8)
	return &pooled{buf: unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)}
}

// Empty returns a contiguous tensor of the given dtype and shape whose
// elements are unspecified, as torch.empty: the caller must write every
// element before reading any. Its storage may be a recycled buffer, which
// saves clearing memory that is about to be overwritten.
func Empty(d DType, shape ...int) *Tensor {
	t := &Tensor{}
	t.initFill(d, shape, false)
	return t
}

// Recycle gives t's storage back to the pool for later tensors to reuse.
// Neither t nor any view of its storage may be used afterwards: the next
// tensor handed the buffer overwrites it. Recycling storage that someone
// still reads is the one way to corrupt results silently, so recycle only
// what is provably dead (the package documentation of autograd says what
// its engine recycles and why that is safe).
//
// Recycle does nothing for storage the package did not take from its pool:
// tensors that use the caller's memory (FromFloat32 and the other From
// functions that take a slice, Alias), mapped ones (NewOffHeap, NewMapped),
// and ones under poolMin bytes. Recycling a second view of storage already recycled does
// nothing either. t itself becomes unsized.
func (t *Tensor) Recycle() {
	p := t.pool
	if p == nil || t.buf == nil {
		return
	}
	t.buf = nil
	if !p.gen.CompareAndSwap(t.gen, t.gen+1) {
		return // a stale view: the storage went back already
	}
	if Guarded {
		for i := range p.buf {
			p.buf[i] = 0xff // NaN in every float type, -1 in the integers
		}
	}
	poolFor(len(p.buf), true).Put(p)
}

// Recyclable reports whether Recycle would give t's storage back to the
// pool: the package allocated it, and it has not been recycled.
func (t *Tensor) Recyclable() bool {
	return t.pool != nil && t.buf != nil && t.pool.gen.Load() == t.gen
}

// A Recycler gathers tensors that die together and recycles their storage
// at once, except storage that a tensor it was told to keep shares: a
// backward pass drops every intermediate gradient and keeps the ones that
// became a parameter's gradient, whatever view of which buffer each is.
// Order does not matter: a storage kept before or after it is dropped is
// kept. The zero value is ready; a Recycler is used by one goroutine.
type Recycler struct {
	drop []*Tensor
	keep map[*pooled]struct{}
}

// Drop marks t's storage for recycling by Recycle (unless it is kept).
func (r *Recycler) Drop(t *Tensor) {
	if t != nil && t.Recyclable() {
		r.drop = append(r.drop, t)
	}
}

// Keep keeps t's storage from being recycled by this round.
func (r *Recycler) Keep(t *Tensor) {
	if t == nil || t.pool == nil {
		return
	}
	if r.keep == nil {
		r.keep = map[*pooled]struct{}{}
	}
	r.keep[t.pool] = struct{}{}
}

// Recycle recycles the storage of every dropped tensor that no kept
// tensor shares, each buffer once, and starts a new round (keeping its own
// memory for it). It returns the bytes it gave back.
func (r *Recycler) Recycle() int {
	n := 0
	for _, t := range r.drop {
		if _, kept := r.keep[t.pool]; !kept && t.Recyclable() {
			n += len(t.pool.buf)
			t.Recycle()
		}
	}
	r.Reset()
	return n
}

// Reset forgets the round without recycling anything.
func (r *Recycler) Reset() {
	clear(r.drop)
	r.drop = r.drop[:0]
	clear(r.keep)
}
