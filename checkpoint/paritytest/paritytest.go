// Package paritytest compares godist's tensors with reference values that
// PyTorch computed (the scripts under testdata/parity write them as
// safetensors files, so tests need no PyTorch).
package paritytest

import (
	"math"
	"sync"
	"testing"

	"github.com/godist/godist/checkpoint"
	"github.com/godist/godist/tensor"
)

// Ref is one reference file, loaded on first use.
type Ref struct {
	Path string
	once sync.Once
	m    map[string]*tensor.Tensor
	err  error
}

// All returns every tensor of the file, failing t if it cannot be read.
func (r *Ref) All(t testing.TB) map[string]*tensor.Tensor {
	t.Helper()
	r.once.Do(func() { r.m, _, r.err = checkpoint.LoadFile(r.Path) })
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.m
}

// Get returns the named tensor, failing t if the file lacks it.
func (r *Ref) Get(t testing.TB, name string) *tensor.Tensor {
	t.Helper()
	v, ok := r.All(t)[name]
	if !ok {
		t.Fatalf("%s has no %q", r.Path, name)
	}
	return v
}

// Expect fails t unless got has the reference tensor's shape and its
// largest elementwise difference, relative to the reference's largest
// magnitude, is at most tol; it logs the error either way.
func (r *Ref) Expect(t testing.TB, what string, got *tensor.Tensor, name string, tol float64) {
	t.Helper()
	want := r.Get(t, name)
	if got == nil {
		t.Fatalf("%s: no value (want %s)", what, name)
	}
	if !tensor.SameShape(got, want) {
		t.Fatalf("%s: shape %v, PyTorch %v", what, got.Shape(), want.Shape())
	}
	e := RelErr(got, want)
	t.Logf("%s: relative error %.2g", what, e)
	if !(e <= tol) {
		t.Fatalf("%s: relative error %.3g against PyTorch exceeds %g", what, e, tol)
	}
}

// ExpectValues is Expect for values in the reference tensor's row-major
// order.
func (r *Ref) ExpectValues(t testing.TB, what string, got []float64, name string, tol float64) {
	t.Helper()
	want := r.Get(t, name).Values()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, PyTorch %d", what, len(got), len(want))
	}
	e := RelErrValues(got, want)
	t.Logf("%s: relative error %.2g", what, e)
	if !(e <= tol) {
		t.Fatalf("%s: relative error %.3g against PyTorch exceeds %g\n got %v\nwant %v", what, e, tol, got, want)
	}
}

// RelErr returns max|got-want| / max|want| (max|got-want| when want is
// all zero) over two tensors of the same shape.
func RelErr(got, want *tensor.Tensor) float64 { return RelErrValues(got.Values(), want.Values()) }

// RelErrValues is RelErr over values.
func RelErrValues(got, want []float64) float64 {
	var diff, scale float64
	for i := range want {
		diff = math.Max(diff, math.Abs(got[i]-want[i]))
		scale = math.Max(scale, math.Abs(want[i]))
	}
	if scale == 0 {
		return diff
	}
	return diff / scale
}
