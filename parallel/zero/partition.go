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
	return PartitionGroups([][]int{sizes}, world)
}

// PartitionGroups is Partition over parameter groups, as PyTorch 1.13
// partitions several param_groups: group after group, each group's
// parameters largest first, each to the rank with the fewest elements so
// far counting every earlier group's. A parameter's index counts through
// the groups in order (group 1's first is len(sizes[0])). Each rank's
// indices are in group order, and within a group in the order assigned;
// appending a group leaves every earlier group's assignment as it was.
func PartitionGroups(sizes [][]int, world int) [][]int {
	if world < 1 {
		panic("zero: Partition over fewer than one rank")
	}
	per := make([][]int, world)
	load := make([]int, world)
	first := 0
	for _, gs := range sizes {
		order := make([]int, len(gs))
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return gs[order[a]] > gs[order[b]] })
		for _, i := range order {
			r := 0
			for k := 1; k < world; k++ {
				if load[k] < load[r] {
					r = k
				}
			}
			per[r] = append(per[r], first+i)
			load[r] += gs[i]
		}
		first += len(gs)
	}
	return per
}
