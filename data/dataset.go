package data

import (
	"fmt"
	"slices"

	"github.com/godist/godist/tensor"
)

// Dataset is a finite, indexed collection of examples, as
// torch.utils.data.Dataset with __len__ and __getitem__.
//
// Get returns example i (0 <= i < Len()) as a tuple of tensors, for example
// an image and its label. The tensors may share storage with the dataset:
// the caller must treat them as read-only. Get panics if i is out of range.
//
// A Loader with Prefetch > 0 calls Get (or Batch) from a background
// goroutine, one call at a time; a Dataset used that way must not be
// modified by others during the pass.
type Dataset interface {
	Len() int
	Get(i int) []*tensor.Tensor
}

// Batcher is an optional fast path for a Dataset: Batch gathers the examples
// at indices into one tensor per tuple element, stacked along a new
// dimension 0 (of length len(indices)). The returned tensors are new and
// belong to the caller; indices is only read. Batch panics if an index is
// out of range. The Loader uses Batch instead of Get when the dataset has
// it.
type Batcher interface {
	Batch(indices []int) []*tensor.Tensor
}

// TensorDataset is a Dataset over tensors that share dimension 0, as
// torch.utils.data.TensorDataset: example i is (t[0][i], t[1][i], ...).
type TensorDataset struct {
	ts []*tensor.Tensor // contiguous, all with the same Size(0)
	n  int
}

var (
	_ Dataset = (*TensorDataset)(nil)
	_ Batcher = (*TensorDataset)(nil)
)

// NewTensorDataset returns a dataset over ts. Each tensor must have at least
// one dimension, and all must have the same length of dimension 0; it panics
// otherwise. Contiguous tensors are used as they are (the dataset keeps
// them and shares their storage); others are copied once.
func NewTensorDataset(ts ...*tensor.Tensor) *TensorDataset {
	if len(ts) == 0 {
		panic("data: NewTensorDataset of no tensors")
	}
	d := &TensorDataset{ts: make([]*tensor.Tensor, len(ts))}
	for i, t := range ts {
		if t == nil || !t.Sized() || t.Dim() == 0 {
			panic(fmt.Sprintf("data: NewTensorDataset: tensor %d has no dimension 0", i))
		}
		if i > 0 && t.Size(0) != ts[0].Size(0) {
			panic(fmt.Sprintf("data: NewTensorDataset: size mismatch between tensors: tensor 0 has %d rows, tensor %d has %d", ts[0].Size(0), i, t.Size(0)))
		}
		d.ts[i] = t.Contiguous()
	}
	d.n = ts[0].Size(0)
	return d
}

// Len returns the number of examples (the length of dimension 0).
func (d *TensorDataset) Len() int { return d.n }

// Tensors returns the dataset's tensors. The slice and the tensors belong to
// the dataset: do not modify them.
func (d *TensorDataset) Tensors() []*tensor.Tensor { return d.ts }

// Get returns views of row i of each tensor (sharing storage; read-only).
func (d *TensorDataset) Get(i int) []*tensor.Tensor {
	d.check(i)
	out := make([]*tensor.Tensor, len(d.ts))
	for k, t := range d.ts {
		out[k] = t.Select(0, i)
	}
	return out
}

// Batch gathers rows indices of each tensor into new tensors by copying
// each row's bytes.
func (d *TensorDataset) Batch(indices []int) []*tensor.Tensor {
	return d.BatchInto(nil, indices)
}

// BatchInto is Batch writing into reuse's tensors where they have the
// batch's dtype and shape (a training loop passes the previous step's
// batch, which it no longer needs, and allocates nothing per step);
// others are allocated anew. It returns the batch.
func (d *TensorDataset) BatchInto(reuse []*tensor.Tensor, indices []int) []*tensor.Tensor {
	for _, i := range indices {
		d.check(i)
	}
	out := make([]*tensor.Tensor, len(d.ts))
	for k, t := range d.ts {
		var b *tensor.Tensor
		if k < len(reuse) && fits(reuse[k], t, len(indices)) {
			b = reuse[k]
		} else {
			b = tensor.New(t.DType(), append([]int{len(indices)}, t.Shape()[1:]...)...)
		}
		src, dst := t.Bytes(), b.Bytes()
		rb := rowBytes(t)
		for j, i := range indices {
			copy(dst[j*rb:(j+1)*rb], src[i*rb:(i+1)*rb])
		}
		out[k] = b
	}
	return out
}

// fits reports whether b can hold a batch of n rows of t.
func fits(b, t *tensor.Tensor, n int) bool {
	if b == nil || b.DType() != t.DType() || !b.IsContiguous() || b.Dim() != t.Dim() || b.Size(0) != n {
		return false
	}
	return slices.Equal(b.Shape()[1:], t.Shape()[1:])
}

func (d *TensorDataset) check(i int) {
	if i < 0 || i >= d.n {
		panic(fmt.Sprintf("data: index %d out of range for a dataset of %d examples", i, d.n))
	}
}

// rowBytes is the number of bytes of one slice t[i] of a contiguous tensor.
func rowBytes(t *tensor.Tensor) int {
	n := t.DType().Size()
	for _, s := range t.Shape()[1:] {
		n *= s
	}
	return n
}

// stack joins tensors of one dtype and shape along a new dimension 0 into
// a new contiguous tensor, copying each one's bytes. It panics on a
// mismatch or an empty list.
func stack(ts []*tensor.Tensor) *tensor.Tensor {
	if len(ts) == 0 {
		panic("data: stack of no tensors")
	}
	first := ts[0]
	shape := append([]int{len(ts)}, first.Shape()...)
	out := tensor.New(first.DType(), shape...)
	dst := out.Bytes()
	at := 0
	for i, t := range ts {
		if t.DType() != first.DType() || !tensor.SameShape(t, first) {
			panic(fmt.Sprintf("data: cannot stack example %d (%v%v) with example 0 (%v%v)", i, t.DType(), t.Shape(), first.DType(), first.Shape()))
		}
		at += copy(dst[at:], t.Contiguous().Bytes())
	}
	return out
}

// collate stacks a list of examples (tuples of equal arity) into one batch.
func collate(examples [][]*tensor.Tensor) []*tensor.Tensor {
	arity := len(examples[0])
	out := make([]*tensor.Tensor, arity)
	col := make([]*tensor.Tensor, len(examples))
	for k := range arity {
		for j, ex := range examples {
			if len(ex) != arity {
				panic(fmt.Sprintf("data: example %d of a batch has %d tensors, example 0 has %d", j, len(ex), arity))
			}
			col[j] = ex[k]
		}
		out[k] = stack(col)
	}
	return out
}
