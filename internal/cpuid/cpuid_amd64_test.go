//go:build amd64

package cpuid

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/cpu"
)

// TestCPUID: leaf 0 names the vendor in EBX, EDX, ECX and the highest
// leaf; leaf 1's and 7's feature bits agree with golang.org/x/sys/cpu's.
func TestCPUID(t *testing.T) {
	max, b, c, d := CPUID(0, 0)
	var v [12]byte
	binary.LittleEndian.PutUint32(v[0:], b)
	binary.LittleEndian.PutUint32(v[4:], d)
	binary.LittleEndian.PutUint32(v[8:], c)
	if max < 1 || v[0] == 0 {
		t.Fatalf("leaf 0: highest leaf %d, vendor %q", max, v[:])
	}
	t.Logf("vendor %s, highest leaf %d", v[:], max)
	_, _, ecx1, _ := CPUID(1, 0)
	if got := ecx1&(1<<20) != 0; got != cpu.X86.HasSSE42 {
		t.Errorf("SSE4.2 bit %v, x/sys/cpu says %v", got, cpu.X86.HasSSE42)
	}
	if max >= 7 {
		_, ebx7, _, _ := CPUID(7, 0)
		if ebx7&(1<<5) == 0 && cpu.X86.HasAVX2 {
			t.Error("no AVX2 bit, and x/sys/cpu says AVX2")
		}
	}
	if cpu.X86.HasAVX {
		if xcr0, _ := XGETBV(); xcr0&0x6 != 0x6 {
			t.Errorf("XCR0 %#x: the OS saves no SSE and AVX state, and x/sys/cpu says AVX", xcr0)
		}
	}
}
