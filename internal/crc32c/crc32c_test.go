package crc32c

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"testing"
)

func ref(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoliTable, p) }

// withFallback runs f with the folding kernel disabled.
func withFallback(t testing.TB, f func()) {
	t.Helper()
	old := useFold
	useFold = false
	defer func() { useFold = old }()
	f()
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// xPowModP returns x^k mod P for the unreflected 33-bit polynomial poly,
// computed by repeated multiplication by x (carry-less shift-and-reduce).
func xPowModP(k int, poly uint64) uint64 {
	v := uint64(1)
	for range k {
		v <<= 1
		if v&(1<<32) != 0 {
			v ^= poly
		}
	}
	return v
}

// foldPair returns the {lo, hi} constants folding a 128-bit lane forward by d
// bits, for the reflected CRC with unreflected 33-bit polynomial poly.
func foldPair(d int, poly uint64) [2]uint64 {
	return [2]uint64{
		uint64(bits.Reverse32(uint32(xPowModP(d+32, poly)))) << 1,
		uint64(bits.Reverse32(uint32(xPowModP(d-32, poly)))) << 1,
	}
}

func TestFoldConstants(t *testing.T) {
	// The reflected Castagnoli polynomial 0x82F63B78 reversed is the normal one.
	if bits.Reverse32(crc32.Castagnoli) != 0x1EDC6F41 {
		t.Fatal("unexpected Castagnoli polynomial")
	}
	poly := uint64(1)<<32 | uint64(bits.Reverse32(crc32.Castagnoli))

	// Sanity check the derivation against hash/crc32's published IEEE
	// PCLMULQDQ constants (crc32_amd64.s: r2r1 and r4r3).
	ieee := uint64(1)<<32 | uint64(bits.Reverse32(crc32.IEEE))
	if got, want := foldPair(512, ieee), [2]uint64{0x154442bd4, 0x1c6e41596}; got != want {
		t.Errorf("IEEE D=512: got %#x, want %#x", got, want)
	}
	if got, want := foldPair(128, ieee), [2]uint64{0x1751997d0, 0xccaa009e}; got != want {
		t.Errorf("IEEE D=128: got %#x, want %#x", got, want)
	}

	want := [12]uint64{}
	for i, d := range []int{2048, 512, 384, 256, 128} {
		pr := foldPair(d, poly)
		want[2*i], want[2*i+1] = pr[0], pr[1]
	}
	if foldConsts != want {
		t.Errorf("foldConsts = %#x\nwant        %#x", foldConsts, want)
	}
}

// clmul is a carry-less 64x64→128 multiply, returning (lo, hi).
func clmul(a, b uint64) (lo, hi uint64) {
	for i := range 64 {
		if b>>i&1 != 0 {
			lo ^= a << i
			if i > 0 {
				hi ^= a >> (64 - i)
			}
		}
	}
	return
}

type lane [2]uint64

func foldLane(x lane, k [2]uint64) lane {
	l1, h1 := clmul(x[0], k[0])
	l2, h2 := clmul(x[1], k[1])
	return lane{l1 ^ l2, h1 ^ h2}
}

// foldRef is a portable model of the assembly kernel, built only from
// carry-less multiplies and the table constants, so that the constants and
// the algorithm are checked independently of the assembly.
func foldRef(crc uint32, p []byte) uint32 {
	ld := func(b []byte) lane {
		return lane{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}
	}
	k := func(i int) [2]uint64 { return [2]uint64{foldConsts[2*i], foldConsts[2*i+1]} }
	var acc [16]lane
	for i := range acc {
		acc[i] = ld(p[16*i:])
	}
	acc[0][0] ^= uint64(crc)
	p = p[256:]
	for ; len(p) >= 256; p = p[256:] {
		for i := range acc {
			f, d := foldLane(acc[i], k(0)), ld(p[16*i:])
			acc[i] = lane{f[0] ^ d[0], f[1] ^ d[1]}
		}
	}
	for j := range 3 { // fold Z0 into Z1, Z1 into Z2, Z2 into Z3
		for l := range 4 {
			a := foldLane(acc[4*j+l], k(1))
			acc[4*(j+1)+l][0] ^= a[0]
			acc[4*(j+1)+l][1] ^= a[1]
		}
	}
	z := [4]lane(acc[12:16]) // Z3
	for ; len(p) >= 64; p = p[64:] {
		for l := range 4 {
			f, d := foldLane(z[l], k(1)), ld(p[16*l:])
			z[l] = lane{f[0] ^ d[0], f[1] ^ d[1]}
		}
	}
	x := z[3]
	for l := range 3 {
		f := foldLane(z[l], k(2+l))
		x[0] ^= f[0]
		x[1] ^= f[1]
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], x[0])
	binary.LittleEndian.PutUint64(b[8:], x[1])
	return ^ref(^uint32(0), b[:]) // raw register from zero
}

func TestFoldRef(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{256, 320, 384, 448, 512, 576, 1024, 4096 + 192} {
		p := randBytes(r, n)
		crc := r.Uint32()
		if got, want := ^foldRef(^crc, p), ref(crc, p); got != want {
			t.Errorf("n=%d: foldRef %#08x, want %#08x", n, got, want)
		}
	}
}

func checkAll(t *testing.T, name string) {
	r := rand.New(rand.NewPCG(3, 4))
	buf := randBytes(r, 2048+64)
	for n := 0; n <= 2048; n++ {
		off := r.IntN(64)
		p := buf[off : off+n]
		crc := r.Uint32()
		if got, want := Update(crc, p), ref(crc, p); got != want {
			t.Fatalf("%s: Update(%#x, len %d off %d) = %#08x, want %#08x", name, crc, n, off, got, want)
		}
		if got, want := Checksum(p), crc32.Checksum(p, castagnoliTable); got != want {
			t.Fatalf("%s: Checksum(len %d off %d) = %#08x, want %#08x", name, n, off, got, want)
		}
	}
}

func TestLengths(t *testing.T) {
	if !useFold {
		t.Log("folding kernel not available on this CPU; testing fallback only")
	}
	checkAll(t, "fold")
}

func TestFallback(t *testing.T) {
	withFallback(t, func() { checkAll(t, "fallback") })
}

func TestAlignments(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	buf := randBytes(r, 8192+64)
	for _, n := range []int{minFold, minFold + 1, 1000, 4096, 4096 + 63, 8192} {
		for off := range 64 {
			p := buf[off : off+n]
			crc := r.Uint32()
			if got, want := Update(crc, p), ref(crc, p); got != want {
				t.Fatalf("len %d off %d: got %#08x, want %#08x", n, off, got, want)
			}
		}
	}
}

func TestLarge(t *testing.T) {
	sizes := []int{1 << 20, 1<<20 + 7}
	if !testing.Short() {
		sizes = append(sizes, 64<<20+7)
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range sizes {
		p := randBytes(r, n)
		for _, crc := range []uint32{0, r.Uint32()} {
			if got, want := Update(crc, p), ref(crc, p); got != want {
				t.Errorf("len %d crc %#x: got %#08x, want %#08x", n, crc, got, want)
			}
		}
	}
}

func TestChaining(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	p := randBytes(r, 10000)
	want := ref(0, p)
	for range 300 {
		crc := uint32(0)
		q := p
		for len(q) > 0 {
			var n int
			switch r.IntN(3) {
			case 0:
				n = r.IntN(64)
			case 1:
				n = r.IntN(1024)
			default:
				n = r.IntN(5000)
			}
			n = min(n, len(q))
			crc = Update(crc, q[:n])
			q = q[n:]
		}
		if crc != want {
			t.Fatalf("chained %#08x, want %#08x", crc, want)
		}
	}
	if got := Update(Update(0, p[:4321]), p[4321:]); got != want {
		t.Fatalf("split: %#08x, want %#08x", got, want)
	}
}

func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), []byte("hello"), 0)
	f.Add(uint32(0xdeadbeef), make([]byte, 1000), 3)
	f.Fuzz(func(t *testing.T, crc uint32, p []byte, rep int) {
		// Repeat the input to reach the folding kernel's sizes.
		rep = rep & 7
		q := append([]byte(nil), p...)
		for range rep {
			q = append(q, q...)
			if len(q) > 1<<16 {
				break
			}
		}
		if got, want := Update(crc, q), ref(crc, q); got != want {
			t.Fatalf("len %d: got %#08x, want %#08x", len(q), got, want)
		}
	})
}

func BenchmarkUpdate(b *testing.B) {
	for _, n := range []int{1 << 10, 64 << 10, 1 << 20, 64 << 20} {
		p := randBytes(rand.New(rand.NewPCG(1, 1)), n)
		name := fmt.Sprintf("%dKiB", n>>10)
		b.Run(name+"/crc32c", func(b *testing.B) {
			b.SetBytes(int64(n))
			crc := uint32(0)
			for b.Loop() {
				crc = Update(crc, p)
			}
		})
		b.Run(name+"/hash-crc32", func(b *testing.B) {
			b.SetBytes(int64(n))
			crc := uint32(0)
			for b.Loop() {
				crc = crc32.Update(crc, castagnoliTable, p)
			}
		})
	}
}
