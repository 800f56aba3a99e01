//go:build !godist_guard

package tensor

// Guarded reports whether the package was built with the tag
// godist_guard, under which using a released tensor (Tensor.Release)
// panics with a clear message instead of touching unmapped memory, and
// using a recycled one (Tensor.Recycle) panics instead of reading the
// buffer's next owner, whose memory is poisoned with NaNs on recycling.
const Guarded = false

// live checks that t's storage has not been released; without the tag
// godist_guard it checks nothing and compiles away.
func (t *Tensor) live() {}
