package tensor

import (
	"math"
	"testing"
	"unsafe"
)

// reusedDirty recycles a NaN-filled tensor of shape and returns whether the
// pool hands its buffer to the next Empty of that size. sync.Pool may drop
// what it is given (it does so at random under the race detector), so
// tests that need the dirty buffer ask a few times.
func reusedDirty(t *testing.T, shape ...int) {
	t.Helper()
	if numel(shape)*4 < poolMin {
		t.Fatalf("shape %v is too small for the pool", shape)
	}
	for range 20 {
		x := Full(Float32, math.NaN(), shape...)
		p := unsafe.SliceData(x.buf)
		x.Recycle()
		y := Empty(Float32, shape...)
		same := unsafe.SliceData(y.buf) == p
		y.Recycle()
		if same {
			x = Full(Float32, math.NaN(), shape...) // for the operation to find
			x.Recycle()
			return
		}
	}
	t.Skip("the pool never handed a recycled buffer back (race detector?)")
}

func TestRecycledStorageIsReused(t *testing.T) {
	reusedDirty(t, 8, 16)
	// New clears what it reuses; Empty need not.
	if z := New(Float32, 8, 16); z.Values()[0] != 0 || z.Values()[127] != 0 {
		t.Fatalf("New of a recycled buffer is not zero: %v", z)
	}
}

// TestOperationsOverwriteDirtyStorage runs the operations whose new
// destinations are not cleared on a recycled buffer full of NaNs: each
// must write every element.
func TestOperationsOverwriteDirtyStorage(t *testing.T) {
	big := func() *Tensor { // 64 × 8: over poolMin bytes
		x := New(Float32, 64, 8)
		for i, v := range x.Float32s() {
			x.Float32s()[i] = float32(i%7) - 3 + 0*v
		}
		return x
	}
	x, w := big(), FromFloat32(make([]float32, 8*8), 8, 8)
	for i := range w.Float32s() {
		w.Float32s()[i] = float32(i%5) - 2
	}
	cases := map[string]func() *Tensor{
		"MatMul":     func() *Tensor { return new(Tensor).MatMul(x, w) },
		"Add":        func() *Tensor { return new(Tensor).Add(x, x) },
		"Relu":       func() *Tensor { return new(Tensor).Relu(x) },
		"AddScaled":  func() *Tensor { return new(Tensor).AddScaled(x, 2, x) },
		"LogSoftmax": func() *Tensor { return new(Tensor).LogSoftmax(x, 1) },
		"Sum":        func() *Tensor { return new(Tensor).Sum(x.Reshape(8, 64), 0, false) },
		"Clone":      func() *Tensor { return x.T().Clone() },
		"Copy":       func() *Tensor { return new(Tensor).Copy(x.T()) },
		"Cat":        func() *Tensor { return Cat(0, x, x) },
	}
	for name, op := range cases {
		want := op().Values()
		out := op()
		reusedDirty(t, out.Shape()...)
		got := op().Values()
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s on a dirty buffer: element %d is %v, want %v", name, i, got[i], want[i])
			}
		}
	}
	// The convolution and pooling kernels write their outputs whole too.
	img := big().Reshape(2, 1, 16, 16)
	k := FromFloat32([]float32{1, 0, -1, 2, 0, -2, 1, 0, -1}, 1, 1, 3, 3)
	want := Conv2d(img, k, nil, Conv2dParams{PadH: 1, PadW: 1}).Values()
	reusedDirty(t, 2, 1, 16, 16)
	if got := Conv2d(img, k, nil, Conv2dParams{PadH: 1, PadW: 1}).Values(); !equalFloats(got, want) {
		t.Fatal("Conv2d on a dirty buffer differs")
	}
	pw, _ := MaxPool2d(img, 2, 2, Conv2dParams{StrideH: 2, StrideW: 2})
	reusedDirty(t, 2, 1, 8, 8)
	if pg, _ := MaxPool2d(img, 2, 2, Conv2dParams{StrideH: 2, StrideW: 2}); !equalFloats(pg.Values(), pw.Values()) {
		t.Fatal("MaxPool2d on a dirty buffer differs")
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRecycleOnlyPooledStorageOnce(t *testing.T) {
	// The caller's memory is never the pool's.
	data := make([]float32, 1024)
	u := FromFloat32(data, 32, 32)
	if u.Recyclable() {
		t.Fatal("a tensor over the caller's slice is recyclable")
	}
	u.Recycle()
	if !u.Sized() || &u.Float32s()[0] != &data[0] {
		t.Fatal("Recycle of the caller's memory changed the tensor")
	}
	// A view outlives its base: recycling it too gives nothing back twice.
	x := New(Float32, 32, 32)
	v := x.Narrow(0, 4, 8)
	if !v.Recyclable() {
		t.Fatal("a view of pooled storage is not recyclable")
	}
	x.Recycle()
	if x.Sized() || v.Recyclable() {
		t.Fatal("after Recycle the tensor is sized or its view still recyclable")
	}
	v.Recycle() // a stale view: nothing happens
	a, b := Empty(Float32, 32, 32), Empty(Float32, 32, 32)
	if SharesStorage(a, b) {
		t.Fatal("one recycled buffer was handed out twice")
	}
}

func TestRecyclerKeepsSharedStorage(t *testing.T) {
	var r Recycler
	x, y, z := New(Float32, 64), New(Float32, 64), New(Float32, 64)
	r.Drop(x)
	r.Drop(x.Reshape(8, 8)) // the same storage twice
	r.Drop(y)
	r.Keep(y.Narrow(0, 0, 4)) // a kept view keeps y's storage
	r.Keep(z)
	if got := r.Recycle(); got != 64*4 {
		t.Fatalf("Recycle gave back %d bytes, want %d (x once)", got, 64*4)
	}
	if x.Recyclable() || !y.Recyclable() || !z.Recyclable() {
		t.Fatal("wrong storage recycled")
	}
	r.Drop(y) // a new round: the old keep is forgotten
	if got := r.Recycle(); got != 64*4 {
		t.Fatalf("second round gave back %d bytes, want %d", got, 64*4)
	}
}

func TestUseOfRecycledTensorPanicsWhenGuarded(t *testing.T) {
	if !Guarded {
		t.Skip("built without godist_guard")
	}
	x := New(Float32, 64)
	v := x.Reshape(8, 8)
	x.Recycle()
	defer func() {
		if recover() == nil {
			t.Fatal("reading a view of a recycled tensor did not panic")
		}
	}()
	v.At(0, 0)
}
