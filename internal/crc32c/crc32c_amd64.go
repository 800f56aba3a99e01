//go:build amd64 && !purego

package crc32c

import "golang.org/x/sys/cpu"

var hasFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL &&
	cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE42

// foldAVX512 returns the CRC register (not inverted) after processing p,
// starting from register crc. len(p) must be a multiple of 64 and >= 64.
//
//go:noescape
func foldAVX512(crc uint32, p []byte) uint32

func foldUpdate(crc uint32, p []byte) uint32 { return foldAVX512(crc, p) }
