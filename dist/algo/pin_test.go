package algo

import (
	"fmt"
	"strings"
	"testing"
)

// TestPins: every algorithm a collective may be pinned to, on one host
// and across even and uneven hosts, gives a plan of that name that the
// simulator runs to the collective's result, or says it does not apply
// (then the usual choice runs); a name of another collective never
// applies.
func TestPins(t *testing.T) {
	layouts := [][]int{{0, 0, 0, 0}, {0, 0, 1, 1}, {0, 0, 1, 1, 2, 2}, {0, 1, 1}, {0, 1, 2}}
	applied := map[string]bool{}
	for _, hostOf := range layouts {
		topo := NewTopology(hostOf)
		size := topo.Size()
		m := DefaultModel
		for _, count := range []int{1, 5, 3000} {
			counts := uniform(size, count)
			for op, names := range Algorithms {
				for _, name := range append(names, "no-such") {
					desc := fmt.Sprintf("%s %s on %v, %d", op, name, hostOf, count)
					var p Plan
					var ok bool
					switch op {
					case "all_reduce":
						if p, ok = PinAllReduce(topo, m, name, count, 8); ok {
							checkAllReduce(t, desc, size, count, opSum, p.Schedule)
						}
					case "broadcast":
						if p, ok = PinBroadcast(topo, m, name, size-1, count, 8); ok {
							checkBroadcast(t, desc, size, size-1, count, p.Schedule)
						}
					case "all_gather":
						if p, ok = PinAllGather(topo, m, name, counts, 8); ok {
							checkAllGather(t, desc, size, counts, p.Schedule)
						}
					case "reduce_scatter":
						if p, ok = PinReduceScatter(topo, m, name, counts, 8); ok {
							checkReduceScatter(t, desc, size, counts, opSum, p.Schedule)
						}
					case "barrier":
						p, ok = PinBarrier(topo, m, name)
					default:
						continue // all_to_all: dist's own executor
					}
					if ok && p.Name != name {
						t.Fatalf("%s: the plan is %s", desc, p.Name)
					}
					if ok && name == "no-such" {
						t.Fatalf("%s: applies", desc)
					}
					if ok {
						applied[op+"/"+name] = true
					}
				}
			}
		}
	}
	for op, names := range Algorithms {
		for _, name := range names {
			if !applied[op+"/"+name] && op != "all_to_all" {
				t.Errorf("%s %s never applied", op, name)
			}
		}
	}
	if err := CheckPins(map[string]string{"all_reduce": "ring", "barrier": "two-level"}); err != nil {
		t.Errorf("CheckPins of valid pins: %v", err)
	}
	for _, bad := range []map[string]string{{"allreduce": "ring"}, {"all_reduce": "chain"}} {
		err := CheckPins(bad)
		if err == nil || !strings.Contains(err.Error(), "ring") && !strings.Contains(err.Error(), "all_reduce") {
			t.Errorf("CheckPins(%v) = %v, want an error naming the choices", bad, err)
		}
	}
}

// TestPinSegments: a pin may fix the segment count of an algorithm that
// runs in segments, and the plan runs to the collective's result in that
// many (fewer where a piece has fewer elements); CheckPins refuses a
// count for an algorithm without segments and a count that is not a
// positive integer.
func TestPinSegments(t *testing.T) {
	topo := NewTopology([]int{0, 0, 1, 1})
	size, m := topo.Size(), DefaultModel
	for _, tc := range []struct {
		count, pinned, want int
	}{{3000, 4, 4}, {3000, 3, 3}, {3000, 1000, 0}, {2, 8, 0}} {
		counts := uniform(size, tc.count)
		check := func(op string, p Plan, ok bool, most, elems int) {
			t.Helper()
			want := tc.want
			if want == 0 {
				want = max(1, min(tc.pinned, most, elems))
			}
			if !ok || p.Segments != want {
				t.Errorf("%s pinned to %d segments, %d elements: %v %d segments, want %d", op, tc.pinned, tc.count, ok, p.Segments, want)
			}
		}
		pin := func(name string) string { return fmt.Sprintf("%s/%d", name, tc.pinned) }
		for _, name := range Segmented["all_reduce"] {
			p, ok := PinAllReduce(topo, m, pin(name), tc.count, 4)
			check("all_reduce "+name, p, ok, maxRingSegments, tc.count/size)
			if ok {
				checkAllReduce(t, pin(name), size, tc.count, opSum, p.Schedule)
			}
		}
		p, ok := PinBroadcast(topo, m, pin("chain"), 1, tc.count, 4)
		check("broadcast chain", p, ok, maxChainSegments, tc.count)
		if ok {
			checkBroadcast(t, pin("chain"), size, 1, tc.count, p.Schedule)
		}
		for _, name := range Segmented["all_gather"] {
			p, ok := PinAllGather(topo, m, pin(name), counts, 4)
			check("all_gather "+name, p, ok, maxRingSegments, tc.count)
			if ok {
				checkAllGather(t, pin(name), size, counts, p.Schedule)
			}
		}
		for _, name := range Segmented["reduce_scatter"] {
			p, ok := PinReduceScatter(topo, m, pin(name), counts, 4)
			check("reduce_scatter "+name, p, ok, maxRingSegments, tc.count)
			if ok {
				checkReduceScatter(t, pin(name), size, counts, opSum, p.Schedule)
			}
		}
	}
	if err := CheckPins(map[string]string{"broadcast": "chain/4", "all_reduce": "two-level/2"}); err != nil {
		t.Errorf("CheckPins of valid segment pins: %v", err)
	}
	for pin, want := range map[string]string{"binomial/4": "does not run in segments", "chain/0": "positive integer", "chain/x": "positive integer", "chain/": "positive integer"} {
		if err := CheckPins(map[string]string{"broadcast": pin}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckPins(broadcast=%s) = %v, want an error saying %q", pin, err, want)
		}
	}
	if _, ok := PinBroadcast(topo, m, "chain/x", 0, 3000, 4); ok {
		t.Errorf("a malformed pin applied")
	}
}
