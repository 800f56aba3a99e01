//go:build !godist_guard

package tensor

// Guarded reports whether the package was built with the tag
// godist_guard, under which using a released tensor (Tensor.Release)
// panics with a clear message instead of touching unmapped memory.
const Guarded = false

// live checks that t's storage has not been released; without the tag
// godist_guard it checks nothing and compiles away.
func (t *Tensor) live() {}
