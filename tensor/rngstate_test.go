package tensor

import "testing"

// TestRNGStateReplays: an RNG set back to a saved state draws the same
// numbers again, for both kinds of generator, and leaves the saved state
// unchanged for another replay.
func TestRNGStateReplays(t *testing.T) {
	for _, g := range []*RNG{NewRNG(3), NewTorchRNG(3)} {
		g.Float64()
		s := g.State()
		draw := func() []float64 {
			out := []float64{g.Float64(), g.NormFloat64(), float64(g.IntN(1000))}
			for _, v := range Rand(g, 700).Float32s() { // past one Mersenne Twister block
				out = append(out, float64(v))
			}
			return out
		}
		first := draw()
		for range 2 {
			g.SetState(s)
			again := draw()
			for i := range first {
				if again[i] != first[i] {
					t.Fatalf("draw %d after SetState: %v, first time %v", i, again[i], first[i])
				}
			}
		}
	}
}
