package dcp

import (
	"fmt"
	"math"
	"slices"
)

// A region is the part of a global tensor one piece covers, in the
// tensor's row-major element numbering. It is either a hyper-rectangle
// (offsets and lengths per dimension, the piece stored row-major with
// shape lengths) or, when flat, the range [offsets[0], offsets[0] +
// lengths[0]) of the flattened tensor (the piece stored 1-D).
type region struct {
	global  []int
	offsets []int
	lengths []int
	flat    bool
}

// maxElems bounds a tensor's element count, so that byte sizes of any
// dtype fit an int64.
const maxElems = math.MaxInt64 / 16

// numel returns the product of dims, or an error if a dim is negative or
// the product exceeds maxElems.
func numel(dims []int) (int, error) {
	n := 1
	for _, d := range dims {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in %v", dims)
		}
		if d != 0 && n > maxElems/d {
			return 0, fmt.Errorf("shape %v has more than %d elements", dims, maxElems)
		}
		n *= d
	}
	return n, nil
}

// check validates r: the global shape, and the piece inside it.
func (r region) check() error {
	total, err := numel(r.global)
	if err != nil {
		return err
	}
	if r.flat {
		if len(r.offsets) != 1 || len(r.lengths) != 1 {
			return fmt.Errorf("flat piece with offsets %v and lengths %v: want one of each", r.offsets, r.lengths)
		}
		o, l := r.offsets[0], r.lengths[0]
		if o < 0 || l < 0 || o > total || l > total-o {
			return fmt.Errorf("flat range [%d, %d+%d) outside the %d elements of shape %v", o, o, l, total, r.global)
		}
		return nil
	}
	if len(r.offsets) != len(r.global) || len(r.lengths) != len(r.global) {
		return fmt.Errorf("offsets %v and lengths %v for shape %v: want one of each per dimension", r.offsets, r.lengths, r.global)
	}
	for i, g := range r.global {
		o, l := r.offsets[i], r.lengths[i]
		if o < 0 || l < 0 || o > g || l > g-o {
			return fmt.Errorf("offsets %v lengths %v outside shape %v (dimension %d)", r.offsets, r.lengths, r.global, i)
		}
	}
	return nil
}

// localShape is the shape the piece is stored with.
func (r region) localShape() []int {
	if r.flat {
		return []int{r.lengths[0]}
	}
	return slices.Clone(r.lengths)
}

// count is the number of elements of the piece (r checked).
func (r region) count() int {
	n, _ := numel(r.lengths)
	return n
}

// span returns the first and one past the last global element the piece
// touches (lo == hi when it is empty).
func (r region) span() (lo, hi int) {
	if r.count() == 0 {
		return 0, 0
	}
	if r.flat {
		return r.offsets[0], r.offsets[0] + r.lengths[0]
	}
	stride := 1
	for i := len(r.global) - 1; i >= 0; i-- {
		lo += r.offsets[i] * stride
		hi += (r.offsets[i] + r.lengths[i] - 1) * stride
		stride *= r.global[i]
	}
	return lo, hi + 1
}

// runs calls fn for each contiguous run of the piece in global order: its
// first global element, its length, and its first element in the piece's
// own row-major numbering. Trailing dimensions the piece spans whole are
// merged into one run. It stops when fn returns false.
func (r region) runs(fn func(global, n, local int) bool) {
	if r.count() == 0 {
		return
	}
	if r.flat {
		fn(r.offsets[0], r.lengths[0], 0)
		return
	}
	d := len(r.global)
	if d == 0 {
		fn(0, 1, 0)
		return
	}
	// Dimensions k+1.. are whole: a run spans lengths[k] of dimension k.
	k := d - 1
	for k > 0 && r.lengths[k] == r.global[k] {
		k--
	}
	stride := make([]int, d) // global row-major strides
	s := 1
	for i := d - 1; i >= 0; i-- {
		stride[i] = s
		s *= r.global[i]
	}
	run := r.lengths[k] * stride[k]
	idx := make([]int, k) // index within the piece of dimensions 0..k-1
	local := 0
	for {
		g := r.offsets[k] * stride[k]
		for i := range k {
			g += (r.offsets[i] + idx[i]) * stride[i]
		}
		if !fn(g, run, local) {
			return
		}
		local += run
		i := k - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < r.lengths[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return
		}
	}
}

// overlap calls fn for each stretch of global elements both pieces cover
// (same global shape): its length and where it starts in each piece's
// own numbering.
func overlap(a, b region, fn func(n, aLocal, bLocal int)) {
	alo, ahi := a.span()
	blo, bhi := b.span()
	if alo >= bhi || blo >= ahi {
		return
	}
	// Both run sequences are sorted and disjoint: collect b's runs inside
	// a's span, then walk a's runs along them.
	type run struct{ g, n, l int }
	var bs []run
	b.runs(func(g, n, l int) bool {
		if g+n <= alo {
			return true
		}
		if g >= ahi {
			return false
		}
		bs = append(bs, run{g, n, l})
		return true
	})
	j := 0
	a.runs(func(g, n, l int) bool {
		if g+n <= blo {
			return true
		}
		for j < len(bs) && bs[j].g+bs[j].n <= g {
			j++
		}
		for k := j; k < len(bs) && bs[k].g < g+n; k++ {
			lo := max(g, bs[k].g)
			hi := min(g+n, bs[k].g+bs[k].n)
			fn(hi-lo, l+lo-g, bs[k].l+lo-bs[k].g)
		}
		return j < len(bs)
	})
}
