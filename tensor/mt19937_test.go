package tensor

import (
	"math"
	"slices"
	"testing"
)

// The expected values were printed by PyTorch 1.13:
//
//	g = torch.Generator(); g.manual_seed(0); torch.randperm(10, generator=g)
//	torch.manual_seed(0); torch.empty(5).uniform_(-1, 1)
//	torch.manual_seed(0); nn.Linear(3, 2).weight, .bias
func TestTorchRNGMatchesPyTorch(t *testing.T) {
	if got := NewTorchRNG(0).Perm(10); !slices.Equal(got, []int{4, 1, 7, 5, 3, 9, 0, 8, 6, 2}) {
		t.Fatalf("randperm(10) = %v", got)
	}
	if got := NewTorchRNG(0).Perm(60000)[:8]; !slices.Equal(got, []int{36044, 10678, 57327, 55074, 21567, 15479, 9481, 43095}) {
		t.Fatalf("randperm(60000)[:8] = %v", got)
	}
	u := Zeros(5).Uniform(NewTorchRNG(0), -1, 1).Values()
	want := []float64{-0.007486820220947266, 0.5364435911178589, -0.8230451345443726, -0.7359390258789062, -0.3851543664932251}
	for i := range want {
		if u[i] != want[i] {
			t.Fatalf("uniform_(-1, 1) = %v, want %v", u, want)
		}
	}
	g := NewTorchRNG(0)
	w := Zeros(2, 3).KaimingUniform(g, math.Sqrt(5)).Values()
	bound := 1 / math.Sqrt(3)
	b := Zeros(2).Uniform(g, -bound, bound).Values()
	wantW := []float64{-0.004322517663240433, 0.3097158372402191, -0.4751853346824646, -0.4248946011066437, -0.2223689705133438, 0.15482072532176971}
	wantB := []float64{-0.011439144611358643, 0.45777493715286255}
	for i := range wantW {
		if w[i] != wantW[i] {
			t.Fatalf("Linear(3, 2) weight %v, want %v", w, wantW)
		}
	}
	for i := range wantB {
		if b[i] != wantB[i] {
			t.Fatalf("Linear(3, 2) bias %v, want %v", b, wantB)
		}
	}
}
