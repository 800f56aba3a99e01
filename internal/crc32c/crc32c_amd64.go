//go:build amd64 && !purego

package crc32c

import (
	"github.com/godist/godist/internal/cpuid"
	"golang.org/x/sys/cpu"
)

// hasZ: the 512-bit kernel (AVX-512 with VPCLMULQDQ).
var hasZ = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL &&
	cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE42

// hasY: the 256-bit kernel (AVX2 with VPCLMULQDQ on YMM registers).
// golang.org/x/sys/cpu reports the VPCLMULQDQ bit only with AVX-512, so
// it is read here (CPUID leaf 7, ECX bit 10); HasAVX2 says the OS saves
// YMM registers.
var hasY = cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE42 && vpclmulqdq()

var hasFold = hasZ || hasY

// foldMin is minFold for the kernel this CPU runs.
var foldMin = func() int {
	if hasZ {
		return 64
	}
	return 1024
}()

func vpclmulqdq() bool {
	if max, _, _, _ := cpuid.CPUID(0, 0); max < 7 {
		return false
	}
	_, _, ecx, _ := cpuid.CPUID(7, 0)
	return ecx&(1<<10) != 0
}

// foldAVX512 returns the CRC register (not inverted) after processing p,
// starting from register crc. len(p) must be a multiple of 64 and >= 64.
//
//go:noescape
func foldAVX512(crc uint32, p []byte) uint32

// foldAVX2 is foldAVX512 on 256-bit registers. len(p) must be a multiple
// of 32 and >= 32.
//
//go:noescape
func foldAVX2(crc uint32, p []byte) uint32

func foldUpdate(crc uint32, p []byte) uint32 {
	if hasZ {
		return foldAVX512(crc, p)
	}
	return foldAVX2(crc, p)
}
