package data

import (
	"slices"
	"testing"
)

func TestSequentialSampler(t *testing.T) {
	s := SequentialSampler{N: 4}
	if got := s.Indices(); !slices.Equal(got, []int{0, 1, 2, 3}) || s.Len() != 4 {
		t.Fatalf("Indices = %v, Len = %d", got, s.Len())
	}
	if got := (SequentialSampler{}).Indices(); len(got) != 0 {
		t.Fatalf("empty sampler gives %v", got)
	}
}

func isPerm(p []int, n int) bool {
	if len(p) != n {
		return false
	}
	s := slices.Clone(p)
	slices.Sort(s)
	for i, v := range s {
		if v != i {
			return false
		}
	}
	return true
}

func TestRandomSampler(t *testing.T) {
	const n = 50
	a, b := NewRandomSampler(n, 7), NewRandomSampler(n, 7)
	a1, a2 := a.Indices(), a.Indices()
	b1, b2 := b.Indices(), b.Indices()
	if !isPerm(a1, n) || !isPerm(a2, n) {
		t.Fatalf("not permutations: %v %v", a1, a2)
	}
	if !slices.Equal(a1, b1) || !slices.Equal(a2, b2) {
		t.Fatal("same seed, different sequences of orders")
	}
	if slices.Equal(a1, a2) {
		t.Fatal("two passes gave the same order")
	}
	if slices.Equal(a1, NewRandomSampler(n, 8).Indices()) {
		t.Fatal("seeds 7 and 8 gave the same order")
	}
}

func TestRandomSamplerSetEpoch(t *testing.T) {
	const n = 50
	a, b := NewRandomSampler(n, 3), NewRandomSampler(n, 3)
	b.Indices() // b's free-running stream has moved on; epochs must not care
	a.SetEpoch(2)
	b.SetEpoch(2)
	e2 := a.Indices()
	if !slices.Equal(e2, b.Indices()) || !slices.Equal(e2, a.Indices()) {
		t.Fatal("the order is not a function of (seed, epoch)")
	}
	a.SetEpoch(3)
	if slices.Equal(e2, a.Indices()) {
		t.Fatal("epochs 2 and 3 gave the same order")
	}
	a.SetEpoch(2)
	if !slices.Equal(e2, a.Indices()) {
		t.Fatal("returning to epoch 2 changed its order")
	}
}
