package tensor

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// offHeap is storage mapped outside the Go heap (NewOffHeap, NewMapped).
// Every view of the tensor points to it. It is freed by Release and by
// nothing else: a slice from Bytes or Float32s points into the mapping
// without the collector knowing, so freeing it when the tensors became
// unreachable (a cleanup, as once here) could unmap memory that such a
// slice still reads, and the process would die of SIGSEGV.
type offHeap struct {
	mem      []byte
	release  func()
	once     sync.Once
	released atomic.Bool
	by       string // who released it, for the guard's message
}

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
// The storage is freed by Release and only by Release: a tensor that
// becomes unreachable without it keeps its mapping until the process
// exits (which is right for a dataset loaded once). Tensors under 1 MiB,
// and any whose mapping fails, are allocated with New, and their Release
// does nothing.
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
// shape needs. release frees mem: it runs once, on the first Release of
// the tensor or of any view of it, and never otherwise (not when they
// become unreachable). The caller must not unmap mem before then.
func NewMapped(d DType, mem []byte, release func(), shape ...int) *Tensor {
	n := numel(shape) * d.Size()
	if d == Invalid || slices.ContainsFunc(shape, func(s int) bool { return s < 0 }) || n > len(mem) {
		panic("tensor: NewMapped: memory too small for the shape, or a bad dtype or shape")
	}
	h := &offHeap{mem: mem[:n:n], release: release}
	return &Tensor{dtype: d, shape: append([]int(nil), shape...), strides: contiguousStrides(shape), buf: h.mem, keep: h}
}

// Release frees the storage of a tensor made by NewOffHeap or NewMapped
// (and so of a shared tensor from dist's Group.NewSharedTensor), for t and
// every view of it. After Release, t, its views and every slice that Bytes,
// Float32s and the like returned must not be used: the memory is unmapped.
// Built with the tag godist_guard, a use through the tensor's methods
// panics with "tensor: use of a released tensor (released by ...)" naming
// the caller of Release and its callers; without the tag that check costs nothing and is
// not made.
//
// Release may be called any number of times, from any goroutine, but not
// while another goroutine still uses the tensor. On a tensor whose storage
// is on the Go heap it does nothing: the collector frees that.
func (t *Tensor) Release() {
	h := t.keep
	if h == nil || h.released.Load() {
		return
	}
	by := releaser()
	h.once.Do(func() {
		h.by = by
		h.released.Store(true)
		if h.release != nil {
			h.release()
		}
	})
}

// Released reports whether t's storage has been freed by Release.
func (t *Tensor) Released() bool { return t.keep != nil && t.keep.released.Load() }

// releaser names the code that called Release and its two callers (a
// release inside a library names the user's call that led to it: a
// group's Destroy).
func releaser() string {
	var pc [3]uintptr
	frames := runtime.CallersFrames(pc[:runtime.Callers(3, pc[:])])
	var out []string
	for {
		f, more := frames.Next()
		if f.Function != "" {
			fn := f.Function[strings.LastIndex(f.Function, "/")+1:]
			out = append(out, fmt.Sprintf("%s (%s:%d)", fn, shortFile(f.File), f.Line))
		}
		if !more {
			return strings.Join(out, ", called from ")
		}
	}
}

// shortFile is file's last directory and name.
func shortFile(file string) string {
	if i := strings.LastIndex(file, "/"); i > 0 {
		if j := strings.LastIndex(file[:i], "/"); j >= 0 {
			return file[j+1:]
		}
	}
	return file
}

// releasedPanic is the guard's panic (guard_on.go).
func (h *offHeap) releasedPanic() {
	panic("tensor: use of a released tensor (released by " + h.by + ")")
}
