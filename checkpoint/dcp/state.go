package dcp

import (
	"fmt"
	"slices"
	"sort"

	"github.com/godist/godist/tensor"
)

// Shard is the piece of one global tensor that this rank holds.
//
// Local's shape says which kind of piece it is:
//   - a hyper-rectangle: Local has as many dimensions as Global and
//     Offset gives its first index in each (nil means all zeros: the whole
//     tensor, or a replica of it);
//   - a flat range (as FSDP shards a parameter): Local is 1-D, Offset has
//     one element, and the piece is elements [Offset[0], Offset[0] +
//     Local.Numel()) of the row-major flattening of the global tensor.
//
// For a 1-D global tensor the two coincide.
type Shard struct {
	Global []int
	Offset []int
	Local  *tensor.Tensor
}

// State maps each tensor's name to this rank's piece of it.
type State map[string]Shard

// Whole is the Shard of a tensor held whole (or replicated whole).
func Whole(t *tensor.Tensor) Shard { return Shard{Global: slices.Clone(t.Shape()), Local: t} }

// Flat is the Shard of elements [start, start + local.Numel()) of the
// flattened tensor of shape global; local must be 1-D.
func Flat(global []int, start int, local *tensor.Tensor) Shard {
	return Shard{Global: global, Offset: []int{start}, Local: local}
}

// region returns the checked region of s.
func (s Shard) region() (region, error) {
	if s.Local == nil || !s.Local.Sized() {
		return region{}, fmt.Errorf("nil or unsized local tensor")
	}
	if s.Local.DType().Size() == 0 {
		return region{}, fmt.Errorf("dtype %v", s.Local.DType())
	}
	shape := s.Local.Shape()
	off := s.Offset
	if off == nil {
		off = make([]int, len(s.Global))
	}
	r := region{global: s.Global, offsets: off, lengths: shape}
	switch {
	case len(off) == len(s.Global) && len(shape) == len(s.Global):
	case len(off) == 1 && len(shape) == 1:
		r.flat = true
	default:
		return region{}, fmt.Errorf("offset %v and local shape %v for global shape %v: want a rectangle (one offset per dimension and a local tensor of as many dimensions) or a flat range (one offset, a 1-D local tensor)", s.Offset, shape, s.Global)
	}
	if err := r.check(); err != nil {
		return region{}, err
	}
	return r, nil
}

// sortedNames returns the state's names in order.
func (s State) sortedNames() []string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
