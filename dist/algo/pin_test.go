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
