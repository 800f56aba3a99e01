package tensor

import (
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
)

// offHeap is storage mapped outside the Go heap (NewOffHeap). Every tensor
// sharing the storage points to it, so the mapping is released only once
// none of them is reachable. It holds a pointer so that the allocator
// gives it a block of its own: a cleanup attached to an object batched
// with others in one tiny block runs only when all of them are dead.
type offHeap struct{ mem []byte }

// offHeapBytes counts the bytes mapped by NewOffHeap and not yet released.
var offHeapBytes atomic.Int64

// offHeapMin is the smallest tensor NewOffHeap maps; smaller ones are
// cheap on the heap.
const offHeapMin = 1 << 20

// NewOffHeap is New for a large tensor that lives long, such as a dataset:
// its storage is an anonymous mapping outside the Go heap. The garbage
// collector lets the heap grow to (1+GOGC/100) times what is live before it
// collects, and every allocation until then touches pages never used
// before; a 200 MB dataset on the heap makes that 400 MB of page faults
// through the first epoch of training, where off the heap the steps reuse
// a few megabytes that stay faulted in and in cache.
//
// The storage is released when t and every view of it are unreachable. A
// slice from Float32s and the like does not keep it alive: use such a
// slice only while the tensor is in use (runtime.KeepAlive(t) where it
// would otherwise be dead). Tensors under 1 MiB, and any whose mapping
// fails, are allocated with New.
func NewOffHeap(d DType, shape ...int) *Tensor {
	n := numel(shape) * d.Size()
	if n < offHeapMin || d == Invalid || slices.ContainsFunc(shape, func(s int) bool { return s < 0 }) {
		return New(d, shape...)
	}
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return New(d, shape...)
	}
	offHeapBytes.Add(int64(n))
	return NewMapped(d, mem, func() {
		offHeapBytes.Add(-int64(n))
		syscall.Munmap(mem)
	}, shape...)
}

// NewMapped returns a tensor whose storage is mem, memory the caller has
// mapped outside the Go heap (shared memory, say), at least as long as the
// shape needs. release runs once neither the tensor nor any view of it is
// reachable; the caller must not unmap mem before then.
func NewMapped(d DType, mem []byte, release func(), shape ...int) *Tensor {
	n := numel(shape) * d.Size()
	if d == Invalid || slices.ContainsFunc(shape, func(s int) bool { return s < 0 }) || n > len(mem) {
		panic("tensor: NewMapped: memory too small for the shape, or a bad dtype or shape")
	}
	h := &offHeap{mem: mem[:n:n]}
	runtime.AddCleanup(h, func(f func()) { f() }, release)
	return &Tensor{dtype: d, shape: append([]int(nil), shape...), strides: contiguousStrides(shape), buf: h.mem, keep: h}
}
