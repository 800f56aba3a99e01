package zero

import "sort"

// Partition assigns parameters of the given element counts to world
// ranks as PyTorch 1.13's ZeroRedundancyOptimizer._partition_parameters
// does for one parameter group: the parameters are taken largest first
// (a stable sort, so equal sizes keep their order) and each goes to the
// rank with the fewest elements so far (the lowest such rank on a tie).
// It returns, for each rank, the indices of its parameters in the order
// they were assigned; that order is the rank's local optimizer's
// parameter order. It is a pure function of sizes and world.
func Partition(sizes []int, world int) [][]int {
	if world < 1 {
		panic("zero: Partition over fewer than one rank")
	}
	order := make([]int, len(sizes))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return sizes[order[a]] > sizes[order[b]] })
	per := make([][]int, world)
	load := make([]int, world)
	for _, i := range order {
		r := 0
		for k := 1; k < world; k++ {
			if load[k] < load[r] {
				r = k
			}
		}
		per[r] = append(per[r], i)
		load[r] += sizes[i]
	}
	return per
}
