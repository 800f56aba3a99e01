package pipeline

import (
	"fmt"
	"slices"

	"github.com/godist/godist/nn"
)

// Split cuts a sequence of layers into stages at the given points: stage
// k runs layers[points[k-1]:points[k]] in order (with points[-1] = 0 and
// points[len] = len(layers)), as one nn.Sequential. The points must be
// increasing and inside (0, len(layers)), so no stage is empty.
func Split(layers []nn.Layer, points []int) ([]nn.Layer, error) {
	prev := 0
	for _, p := range points {
		if p <= prev || p >= len(layers) {
			return nil, fmt.Errorf("pipeline: split points %v for %d layers: want increasing points in (0, %d)", points, len(layers), len(layers))
		}
		prev = p
	}
	bounds := append(append([]int{0}, points...), len(layers))
	stages := make([]nn.Layer, len(bounds)-1)
	for k := range stages {
		stages[k] = nn.NewSequential(layers[bounds[k]:bounds[k+1]]...)
	}
	return stages, nil
}

// Balance returns the split points that cut layers into n stages whose
// largest parameter count is as small as it can be (PyTorch's split by
// parameter count; ties go to the earlier cut).
func Balance(layers []nn.Layer, n int) ([]int, error) {
	if n < 1 || n > len(layers) {
		return nil, fmt.Errorf("pipeline: %d stages for %d layers: want between 1 and the number of layers", n, len(layers))
	}
	w := make([]int, len(layers)+1) // prefix sums of parameter counts
	for i, l := range layers {
		w[i+1] = w[i] + nn.NumParameters(l)
	}
	// best[k][i]: the smallest largest stage for layers[:i] in k stages;
	// cut[k][i] the start of the last of those stages.
	const inf = int(^uint(0) >> 1)
	best := make([][]int, n+1)
	cut := make([][]int, n+1)
	for k := range best {
		best[k] = slices.Repeat([]int{inf}, len(layers)+1)
		cut[k] = make([]int, len(layers)+1)
	}
	best[0][0] = 0
	for k := 1; k <= n; k++ {
		for i := k; i <= len(layers); i++ {
			for j := k - 1; j < i; j++ {
				if best[k-1][j] == inf {
					continue
				}
				if c := max(best[k-1][j], w[i]-w[j]); c < best[k][i] {
					best[k][i], cut[k][i] = c, j
				}
			}
		}
	}
	points := make([]int, n-1)
	for k, i := n, len(layers); k > 1; k-- {
		i = cut[k][i]
		points[k-2] = i
	}
	return points, nil
}
