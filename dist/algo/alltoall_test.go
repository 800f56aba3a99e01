package algo

import (
	"math/bits"
	"testing"
)

// TestBruckAllToAll runs Bruck's all-to-all on blocks named by their
// (source, destination) and checks that every rank ends with the block
// each rank sent it, in that rank's slot, for every size up to 70.
func TestBruckAllToAll(t *testing.T) {
	type block struct{ src, dst int }
	for size := 1; size <= 70; size++ {
		out := make([][]block, size)
		for r := range size {
			out[r] = make([]block, size)
			for j := range size {
				out[r][j] = block{r, BruckSource(r, size, j)}
			}
		}
		rounds := make([][]BruckRound, size)
		for r := range size {
			rounds[r] = BruckAllToAll(r, size)
			if want := bits.Len(uint(size - 1)); size > 1 && len(rounds[r]) != want {
				t.Fatalf("size %d rank %d: %d rounds, want %d", size, r, len(rounds[r]), want)
			}
		}
		for k := range rounds[0] {
			msgs := make([][]block, size) // by receiver
			for r := range size {
				rd := rounds[r][k]
				if rounds[rd.To][k].From != r {
					t.Fatalf("size %d round %d: rank %d sends to %d, which receives from %d", size, k, r, rd.To, rounds[rd.To][k].From)
				}
				var m []block
				for lo, hi := range rd.Spans(r, size) {
					if lo < 0 || hi > size || lo >= hi {
						t.Fatalf("size %d round %d rank %d: span [%d, %d)", size, k, r, lo, hi)
					}
					for j := lo; j < hi; j++ {
						q := len(m)
						if slot, run := rd.Slot(r, size, q); slot != j || run < 1 || run > hi-j {
							t.Fatalf("size %d round %d rank %d: Slot(%d) = %d, %d; the spans say slot %d, at most %d on", size, k, r, q, slot, run, j, hi-j)
						}
						m = append(m, out[r][j])
					}
				}
				if len(m) != rd.Blocks(size) {
					t.Fatalf("size %d round %d rank %d: spans hold %d blocks, Blocks says %d", size, k, r, len(m), rd.Blocks(size))
				}
				msgs[rd.To] = m
			}
			for r := range size {
				m := msgs[r]
				for lo, hi := range rounds[r][k].Spans(r, size) {
					copy(out[r][lo:hi], m[:hi-lo])
					m = m[hi-lo:]
				}
			}
		}
		for r := range size {
			for j, b := range out[r] {
				if b != (block{j, r}) {
					t.Fatalf("size %d: rank %d slot %d holds the block from %d to %d, want from %d to %d", size, r, j, b.src, b.dst, j, r)
				}
			}
		}
	}
}

func TestChooseAllToAll(t *testing.T) {
	for _, c := range []struct {
		size, block int
		want        string
	}{
		{2, 4, AllToAllPairwise}, {7, 4, AllToAllPairwise}, {8, 4, AllToAllBruck},
		{8, 256, AllToAllBruck}, {8, 257, AllToAllPairwise}, {16384, 4, AllToAllBruck},
		{16384, 1 << 20, AllToAllPairwise},
	} {
		if got := ChooseAllToAll(c.size, c.block); got != c.want {
			t.Errorf("ChooseAllToAll(%d, %d) = %s, want %s", c.size, c.block, got, c.want)
		}
	}
}
