//go:build godist_guard

package tensor

// Guarded reports whether the package was built with the tag
// godist_guard, under which using a released tensor (Tensor.Release)
// panics with a clear message instead of touching unmapped memory, and
// using a recycled one (Tensor.Recycle) panics instead of reading the
// buffer's next owner, whose memory is poisoned with NaNs on recycling.
const Guarded = true

// live panics if t's storage has been released or recycled.
func (t *Tensor) live() {
	if h := t.keep; h != nil && h.released.Load() {
		h.releasedPanic()
	}
	if p := t.pool; p != nil && (t.buf == nil || p.gen.Load() != t.gen) {
		panic("tensor: use of a recycled tensor (Tensor.Recycle gave its storage back; a view of it outlived it)")
	}
}
