package tensor

import "sync"

// Large scratch buffers (im2col matrices) are recycled instead of being
// allocated, zeroed and faulted in again on every training step: at batch
// 64 they are most of what a CNN step allocates.

var scratchPools sync.Map // byte size -> *sync.Pool of []byte

// scratch returns a contiguous tensor whose elements are NOT initialised.
// The caller must write every element before reading any.
func scratch(d DType, shape ...int) *Tensor {
	n := numel(shape) * d.Size()
	if p, ok := scratchPools.Load(n); ok {
		if b, ok := p.(*sync.Pool).Get().([]byte); ok {
			return &Tensor{dtype: d, shape: append([]int(nil), shape...), strides: contiguousStrides(shape), buf: b}
		}
	}
	return New(d, shape...)
}

// recycle gives t's buffer back for reuse. t and every view of it must not
// be used afterwards.
func recycle(t *Tensor) {
	n := len(t.buf)
	if n < 64<<10 || t.keep != nil {
		return // small buffers are cheap; leave them to the allocator
	}
	p, _ := scratchPools.LoadOrStore(n, new(sync.Pool))
	p.(*sync.Pool).Put(t.buf)
	t.buf = nil
}
