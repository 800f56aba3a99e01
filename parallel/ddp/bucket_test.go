package ddp

import (
	"fmt"
	"slices"
	"testing"
)

func TestPlanBuckets(t *testing.T) {
	sizes := []int64{40, 10, 30, 30, 100, 5}
	order := []int{5, 4, 3, 2, 1, 0}
	got := PlanBuckets(order, sizes, 20, 60)
	want := [][]int{{5}, {4}, {3, 2}, {1, 0}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	// Every parameter exactly once, order kept, caps respected.
	for _, cap := range []int64{1, 25, 50, 1000} {
		plan := PlanBuckets(order, sizes, cap/2+1, cap)
		var flat []int
		for b, ps := range plan {
			var n int64
			for _, p := range ps {
				n += sizes[p]
			}
			limit := cap
			if b == 0 {
				limit = cap/2 + 1
			}
			if n > limit && len(ps) > 1 {
				t.Fatalf("cap %d: bucket %d has %d bytes in %d parameters", cap, b, n, len(ps))
			}
			flat = append(flat, ps...)
		}
		if !slices.Equal(flat, order) {
			t.Fatalf("cap %d: plan %v loses the order %v", cap, plan, order)
		}
	}
	if len(PlanBuckets(nil, nil, 1, 1)) != 0 {
		t.Fatal("empty plan has buckets")
	}
}
