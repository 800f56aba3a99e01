package data

import (
	"slices"
	"testing"
)

// The expected streams were printed by PyTorch 1.13:
//
//	s = DistributedSampler(range(n), num_replicas=rep, rank=r, shuffle=sh, seed=5, drop_last=drop)
//	s.set_epoch(2); list(iter(s))[:12], len(s)
func TestDistributedSamplerMatchesPyTorch(t *testing.T) {
	cases := []struct {
		n, replicas       int
		shuffle, dropLast bool
		rank, length      int
		first             []int
	}{
		{10, 3, true, false, 0, 4, []int{5, 4, 9, 2}},
		{10, 3, true, false, 1, 4, []int{0, 1, 6, 5}},
		{10, 3, true, false, 2, 4, []int{3, 7, 8, 0}},
		{10, 3, true, true, 0, 3, []int{5, 4, 9}},
		{10, 3, true, true, 1, 3, []int{0, 1, 6}},
		{10, 3, true, true, 2, 3, []int{3, 7, 8}},
		{7, 4, false, false, 0, 2, []int{0, 4}},
		{7, 4, false, false, 1, 2, []int{1, 5}},
		{7, 4, false, false, 2, 2, []int{2, 6}},
		{7, 4, false, false, 3, 2, []int{3, 0}},
		{60000, 2, true, false, 0, 30000, []int{21615, 37383, 38823, 50045, 33124, 27698, 46556, 49488, 44202, 43275, 23356, 59105}},
		{60000, 2, true, false, 1, 30000, []int{50166, 3791, 45497, 50591, 43229, 4454, 40960, 20350, 13852, 50547, 334, 28667}},
	}
	for _, c := range cases {
		s, err := NewDistributedSampler(c.n, c.replicas, c.rank, c.shuffle, 5, c.dropLast)
		if err != nil {
			t.Fatal(err)
		}
		s.SetEpoch(2)
		got := s.Indices()
		if s.Len() != c.length || len(got) != c.length || !slices.Equal(got[:len(c.first)], c.first) {
			t.Errorf("%+v: len %d, indices %v", c, s.Len(), got[:min(len(got), 12)])
		}
	}
	// Every index is covered once per epoch (without drop-last, the padding
	// repeats the first few).
	seen := map[int]int{}
	for r := range 3 {
		s, _ := NewDistributedSampler(10, 3, r, true, 1, false)
		for _, i := range s.Indices() {
			seen[i]++
		}
	}
	if len(seen) != 10 {
		t.Fatalf("covered %d of 10 indices", len(seen))
	}
}
