//go:build godist_guard

package tensor

// Guarded reports whether the package was built with the tag
// godist_guard, under which using a released tensor (Tensor.Release)
// panics with a clear message instead of touching unmapped memory.
const Guarded = true

// live panics if t's storage has been released.
func (t *Tensor) live() {
	if h := t.keep; h != nil && h.released.Load() {
		h.releasedPanic()
	}
}
