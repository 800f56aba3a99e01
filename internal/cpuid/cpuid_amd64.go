//go:build amd64

package cpuid

// CPUID returns the four registers of the CPUID instruction for leaf
// eaxArg and subleaf ecxArg.
//
//go:noescape
func CPUID(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)

// XGETBV returns XCR0, the state components the OS saves (bits 1-2: SSE
// and AVX; 5-7: AVX-512). Call it only where CPUID leaf 1 reports OSXSAVE.
func XGETBV() (eax, edx uint32)
