package dcp

import (
	"math/rand/v2"
	"testing"
)

// randRegion draws a rectangle or a flat range of a random global shape.
func randRegion(rng *rand.Rand, global []int) region {
	n := 1
	for _, d := range global {
		n *= d
	}
	if rng.IntN(3) == 0 {
		o := rng.IntN(n + 1)
		return region{global: global, offsets: []int{o}, lengths: []int{rng.IntN(n - o + 1)}, flat: true}
	}
	r := region{global: global, offsets: make([]int, len(global)), lengths: make([]int, len(global))}
	for i, d := range global {
		r.offsets[i] = rng.IntN(d + 1)
		r.lengths[i] = rng.IntN(d - r.offsets[i] + 1)
	}
	return r
}

// naiveIndex maps each global element of r to its index in the piece.
func naiveIndex(r region) map[int]int {
	out := map[int]int{}
	n := 1
	for _, d := range r.global {
		n *= d
	}
	if r.flat {
		for i := range r.lengths[0] {
			out[r.offsets[0]+i] = i
		}
		return out
	}
	idx := make([]int, len(r.global))
	for g := range n {
		rem, inside, local := g, true, 0
		for i := len(r.global) - 1; i >= 0; i-- {
			idx[i] = rem % r.global[i]
			rem /= r.global[i]
		}
		for i := range r.global {
			if idx[i] < r.offsets[i] || idx[i] >= r.offsets[i]+r.lengths[i] {
				inside = false
				break
			}
			local = local*r.lengths[i] + idx[i] - r.offsets[i]
		}
		if inside {
			out[g] = local
		}
	}
	return out
}

func TestOverlapMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 3000 {
		global := make([]int, rng.IntN(4))
		for i := range global {
			global[i] = rng.IntN(5) + 1
		}
		a, b := randRegion(rng, global), randRegion(rng, global)
		if err := a.check(); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		ai, bi := naiveIndex(a), naiveIndex(b)
		if len(ai) != a.count() {
			t.Fatalf("trial %d: naive %d elements, count %d", trial, len(ai), a.count())
		}
		// Every global element of a's runs, in order, once.
		var seen []int
		a.runs(func(g, n, l int) bool {
			for i := range n {
				if ai[g+i] != l+i {
					t.Fatalf("trial %d: %+v run at %d+%d local %d, naive %d", trial, a, g, i, l+i, ai[g+i])
				}
				seen = append(seen, g+i)
			}
			return true
		})
		if len(seen) != len(ai) {
			t.Fatalf("trial %d: %+v: runs cover %d elements, want %d", trial, a, len(seen), len(ai))
		}
		got := map[[2]int]bool{}
		overlap(a, b, func(n, al, bl int) {
			for i := range n {
				got[[2]int{al + i, bl + i}] = true
			}
		})
		want := 0
		for g, al := range ai {
			if bl, ok := bi[g]; ok {
				want++
				if !got[[2]int{al, bl}] {
					t.Fatalf("trial %d: a=%+v b=%+v: element %d (a %d, b %d) missing", trial, a, b, g, al, bl)
				}
			}
		}
		if len(got) != want {
			t.Fatalf("trial %d: a=%+v b=%+v: %d pairs, want %d", trial, a, b, len(got), want)
		}
	}
}
