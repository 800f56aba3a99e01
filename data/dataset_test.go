package data

import (
	"testing"

	"github.com/godist/godist/tensor"
)

// toy returns a TensorDataset of n examples: x[i] is a 2×3 float32 block
// filled with i*10+j, y[i] = i as int64.
func toy(n int) *TensorDataset {
	xs := make([]float32, n*6)
	for i := range xs {
		xs[i] = float32(i/6*10 + i%6)
	}
	ys := make([]int64, n)
	for i := range ys {
		ys[i] = int64(i)
	}
	return NewTensorDataset(tensor.FromFloat32(xs, n, 2, 3), tensor.FromInt64(ys, n))
}

// getOnly hides a dataset's Batcher, forcing the Get + stack path.
type getOnly struct{ Dataset }

func TestTensorDatasetGetAndBatch(t *testing.T) {
	ds := toy(5)
	if ds.Len() != 5 {
		t.Fatalf("Len = %d, want 5", ds.Len())
	}
	ex := ds.Get(3)
	if len(ex) != 2 || !equalInts(ex[0].Shape(), []int{2, 3}) || ex[1].Dim() != 0 {
		t.Fatalf("Get(3) = %v", ex)
	}
	if ex[0].At(1, 2) != 35 || ex[1].Item() != 3 {
		t.Fatalf("Get(3) = %v %v", ex[0], ex[1])
	}
	idx := []int{4, 0, 4, 2}
	fast := ds.Batch(idx)
	slow := collate([][]*tensor.Tensor{ds.Get(4), ds.Get(0), ds.Get(4), ds.Get(2)})
	for k := range fast {
		if !tensor.Equal(fast[k], slow[k]) {
			t.Fatalf("Batch element %d = %v, Get+stack gives %v", k, fast[k], slow[k])
		}
	}
	if !equalInts(fast[0].Shape(), []int{4, 2, 3}) || !equalInts(fast[1].Shape(), []int{4}) {
		t.Fatalf("batch shapes %v %v", fast[0].Shape(), fast[1].Shape())
	}
	// The batch is a copy: writing it leaves the dataset alone.
	fast[0].Fill(-1)
	if ds.Get(4)[0].At(0, 0) != 40 {
		t.Fatal("Batch shares storage with the dataset")
	}
}

func TestTensorDatasetNonContiguous(t *testing.T) {
	// A transposed tensor: rows of the view are columns of the storage.
	base := tensor.FromFloat32([]float32{0, 1, 2, 3, 4, 5}, 2, 3)
	ds := NewTensorDataset(base.T()) // 3×2: [[0 3] [1 4] [2 5]]
	b := ds.Batch([]int{2, 0})
	want := tensor.FromFloat32([]float32{2, 5, 0, 3}, 2, 2)
	if !tensor.Equal(b[0], want) {
		t.Fatalf("Batch = %v, want %v", b[0], want)
	}
}

func TestTensorDatasetPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"mismatch":  func() { NewTensorDataset(tensor.New(tensor.Float32, 3, 2), tensor.New(tensor.Int64, 4)) },
		"scalar":    func() { NewTensorDataset(tensor.Scalar(1)) },
		"none":      func() { NewTensorDataset() },
		"get range": func() { toy(2).Get(2) },
		"batch neg": func() { toy(2).Batch([]int{0, -1}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}

func TestStackMismatchPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	stack([]*tensor.Tensor{tensor.New(tensor.Float32, 2), tensor.New(tensor.Float32, 3)})
}

func equalInts(a, b []int) bool {
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

// TestBatchInto: a batch of the same shape lands in the given tensors (no
// allocation); one of another size (the last, partial batch) gets new ones.
func TestBatchInto(t *testing.T) {
	ds := toy(5)
	first := ds.BatchInto(nil, []int{0, 1})
	second := ds.BatchInto(first, []int{3, 4})
	for k := range second {
		if second[k] != first[k] {
			t.Fatalf("tensor %d was not reused", k)
		}
		if !tensor.Equal(second[k], ds.Batch([]int{3, 4})[k]) {
			t.Fatalf("tensor %d = %v, want rows 3 and 4", k, second[k])
		}
	}
	last := ds.BatchInto(second, []int{2})
	if last[0] == second[0] || !equalInts(last[0].Shape(), []int{1, 2, 3}) || last[0].At(0, 1, 2) != 25 {
		t.Fatalf("partial batch %v (shape %v) reused or wrong", last[0], last[0].Shape())
	}
	if second[0].At(0, 0, 0) != 30 {
		t.Fatal("a partial batch wrote into the tensors it could not reuse")
	}
	if n := testing.AllocsPerRun(100, func() { ds.BatchInto(second, []int{1, 2}) }); n > 1 {
		t.Errorf("BatchInto with reusable tensors allocates %v times (want only the result slice)", n)
	}
}
