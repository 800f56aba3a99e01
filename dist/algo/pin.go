package algo

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Pinning: a program (or a benchmark comparing algorithms) may name the
// algorithm a collective runs, as NCCL_ALGO or Open MPI's
// coll_tuned_*_algorithm do. The Pin… functions build the named plan for
// a call, among the candidates the Choose…On functions weigh across hosts
// (the segment count, where there are several, the one m predicts
// fastest); false where the algorithm does not apply to the call (the
// leaders' algorithms above their size, two-level ones on uneven hosts,
// empty calls), and then the caller chooses as usual. Every rank passes the same name
// and arguments, so every rank builds the same plan.
//
// A pin of an algorithm that runs in segments (Segmented) may fix their
// count too, as Open MPI's coll_tuned_*_segmentsize does their size:
// "chain/4" is the chain in 4 segments (at most the algorithm's most,
// and no more than a piece's elements).

// Algorithms lists the algorithms each collective may be pinned to, by
// the collective's name as PyTorch spells it.
var Algorithms = map[string][]string{
	"all_reduce":     {"recursive-doubling", "halving-doubling", "halving-doubling-near", "ring", "two-level", "leaders"},
	"broadcast":      {"binomial", "chain", "leaders"},
	"all_gather":     {"recursive-doubling", "ring", "two-level"},
	"reduce_scatter": {"ring", "two-level"},
	"barrier":        {"dissemination", "two-level"},
	"all_to_all":     {AllToAllPairwise, AllToAllBruck},
}

// Segmented lists, by collective, the algorithms that run in segments,
// whose pins may name a segment count.
var Segmented = map[string][]string{
	"all_reduce":     {"ring", "two-level"},
	"broadcast":      {"chain"},
	"all_gather":     {"ring", "two-level"},
	"reduce_scatter": {"ring", "two-level"},
}

// splitPin splits a pin into its algorithm and segment count (0 when it
// names none).
func splitPin(pin string) (name string, segments int, err error) {
	name, n, ok := strings.Cut(pin, "/")
	if !ok {
		return pin, 0, nil
	}
	segments, err = strconv.Atoi(n)
	if err != nil || segments < 1 {
		return "", 0, fmt.Errorf("pin %q: want algorithm/segments with segments a positive integer", pin)
	}
	return name, segments, nil
}

// CheckPins returns an error naming the first collective or algorithm in
// pins (collective → algorithm) that Algorithms does not list.
func CheckPins(pins map[string]string) error {
	ops := make([]string, 0, len(pins))
	for op := range pins {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	for _, op := range ops {
		names, ok := Algorithms[op]
		if !ok {
			known := make([]string, 0, len(Algorithms))
			for k := range Algorithms {
				known = append(known, k)
			}
			slices.Sort(known)
			return fmt.Errorf("no algorithm can be pinned for %q: the collectives are %s", op, strings.Join(known, ", "))
		}
		name, segments, err := splitPin(pins[op])
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if !slices.Contains(names, name) {
			return fmt.Errorf("%s has no algorithm %q: it has %s", op, name, strings.Join(names, ", "))
		}
		if segments > 0 && !slices.Contains(Segmented[op], name) {
			return fmt.Errorf("%s's %s does not run in segments (pin %q): only %s do", op, name, pins[op], strings.Join(Segmented[op], ", "))
		}
	}
	return nil
}

// pickNamed is the fastest under m of cands named name.
func pickNamed(t Topology, m Model, elemSize int, name string, cands []Plan) (Plan, bool) {
	name, _, _ = splitPin(name)
	cands = slices.DeleteFunc(cands, func(p Plan) bool { return p.Name != name })
	switch len(cands) {
	case 0:
		return Plan{}, false
	case 1:
		return cands[0], true // no simulation: on one host of thousands of ranks it is slow
	}
	return best(t, m, elemSize, cands...), true
}

// pinnedOf is a pin's segment count, 0 when it names none (CheckPins has
// refused malformed ones).
func pinnedOf(pin string) int {
	_, segments, _ := splitPin(pin)
	return segments
}

// PinAllReduce is the all-reduce named name of count elements of elemSize
// bytes on t.
func PinAllReduce(t Topology, m Model, name string, count, elemSize int) (Plan, bool) {
	checkChoice("PinAllReduce", t.Size(), count, elemSize)
	if t.Size() == 1 || count == 0 {
		return Plan{}, false
	}
	return pickNamed(t, m, elemSize, name, allReduceCands(t, m, count, elemSize, pinnedOf(name)))
}

// PinBroadcast is the broadcast named name from root.
func PinBroadcast(t Topology, m Model, name string, root, count, elemSize int) (Plan, bool) {
	checkChoice("PinBroadcast", t.Size(), count, elemSize)
	checkRoot("PinBroadcast", root, t.Size())
	if t.Size() == 1 || count == 0 {
		return Plan{}, false
	}
	return pickNamed(t, m, elemSize, name, broadcastCands(t, m, root, count, elemSize, pinnedOf(name)))
}

// PinAllGather is the all-gather named name of chunks of counts[r]
// elements.
func PinAllGather(t Topology, m Model, name string, counts []int, elemSize int) (Plan, bool) {
	if checkCounts("PinAllGather", t.Size(), counts)[t.Size()] == 0 || t.Size() == 1 {
		return Plan{}, false
	}
	return pickNamed(t, m, elemSize, name, allGatherCands(t, counts, elemSize, pinnedOf(name)))
}

// PinReduceScatter is the reduce-scatter named name into chunks of
// counts[r] elements.
func PinReduceScatter(t Topology, m Model, name string, counts []int, elemSize int) (Plan, bool) {
	if checkCounts("PinReduceScatter", t.Size(), counts)[t.Size()] == 0 || t.Size() == 1 {
		return Plan{}, false
	}
	return pickNamed(t, m, elemSize, name, reduceScatterCands(t, counts, elemSize, pinnedOf(name)))
}

// PinBarrier is the barrier named name.
func PinBarrier(t Topology, m Model, name string) (Plan, bool) {
	return pickNamed(t, m, 1, name, barrierCands(t))
}
