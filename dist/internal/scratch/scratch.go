// Package scratch recycles the byte buffers that package dist's
// collectives work in, by size class (powers of two): a training step's
// all-reduces would otherwise allocate and zero megabytes each time (the
// schedules' receives, reduce-scatter's copies, the same-host engine's
// reductions beside their output).
package scratch

import "sync"

var pools [48]sync.Pool

func sizeClass(n int) int {
	c := 0
	for 1<<c < n {
		c++
	}
	return c
}

// Get returns a buffer of n bytes, of unspecified contents: one that Put
// recycled, or a new one.
func Get(n int) []byte {
	c := sizeClass(n)
	if b, ok := pools[c].Get().(*[]byte); ok {
		s := (*b)[:n]
		*b = nil
		headers.Put(b) // for the next Put: recycling allocates nothing
		return s
	}
	return make([]byte, n, 1<<c)
}

// headers are the slice headers the pools hold buffers by, empty.
var headers sync.Pool

// Put recycles b, which Get returned (others are dropped); b must not be
// used afterwards.
func Put(b []byte) {
	c := sizeClass(cap(b))
	if cap(b) != 1<<c {
		return
	}
	h, _ := headers.Get().(*[]byte)
	if h == nil {
		h = new([]byte)
	}
	*h = b
	pools[c].Put(h)
}

// Copy returns a buffer from Get holding a copy of b.
func Copy(b []byte) []byte {
	s := Get(len(b))
	copy(s, b)
	return s
}
