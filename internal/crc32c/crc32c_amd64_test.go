//go:build amd64 && !purego

package crc32c

import (
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"testing"
)

func TestFoldConstantsY(t *testing.T) {
	poly := uint64(1)<<32 | uint64(bits.Reverse32(crc32.Castagnoli))
	var want [6]uint64
	for i, d := range []int{1024, 256, 128} {
		pr := foldPair(d, poly)
		want[2*i], want[2*i+1] = pr[0], pr[1]
	}
	if foldConstsY != want {
		t.Errorf("foldConstsY = %#x\nwant         %#x", foldConstsY, want)
	}
}

// TestFoldAVX2 runs the 256-bit kernel directly (Update takes the 512-bit
// one where the CPU has both) on every length it accepts up to 4 KiB, and
// a long one, from every register.
func TestFoldAVX2(t *testing.T) {
	if !hasY {
		t.Skip("no AVX2 with VPCLMULQDQ on this CPU")
	}
	r := rand.New(rand.NewPCG(11, 12))
	buf := randBytes(r, 1<<20+64)
	check := func(n, off int) {
		p := buf[off : off+n]
		crc := r.Uint32()
		if got, want := ^foldAVX2(^crc, p), ref(crc, p); got != want {
			t.Fatalf("len %d off %d: foldAVX2 %#08x, want %#08x", n, off, got, want)
		}
	}
	for n := 32; n <= 4096; n += 32 {
		check(n, r.IntN(64))
	}
	check(1<<20, 0)
	check(1<<20-32, 7)
}
