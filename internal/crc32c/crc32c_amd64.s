//go:build amd64 && !purego

#include "textflag.h"

// func foldAVX512(crc uint32, p []byte) uint32
//
// CRC-32C by carry-less multiplication folding (Intel, "Fast CRC Computation
// for Generic Polynomials Using PCLMULQDQ Instruction"), 512-bit VPCLMULQDQ,
// four ZMM accumulators (16 x 128-bit lanes, 256 bytes per iteration).
// The final 128 bits are reduced with two SSE4.2 CRC32Q instructions.
// Requires len(p) % 64 == 0 and len(p) >= 64. crc is the raw register.
TEXT ·foldAVX512(SB), NOSPLIT, $0-36
	MOVL crc+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	LEAQ ·foldConsts(SB), DX

	VBROADCASTI32X4 0(DX), Z16  // D = 2048 constants, every lane
	VBROADCASTI32X4 16(DX), Z17 // D = 512 constants, every lane

	VMOVD AX, X5
	CMPQ  CX, $256
	JB    short

	// Load the first 256 bytes; XOR the register into the first 4 bytes.
	VMOVDQU64 0(SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VPXORQ    Z5, Z0, Z0
	ADDQ      $256, SI
	SUBQ      $256, CX

loop256:
	CMPQ CX, $256
	JB   fold4

	VPCLMULQDQ $0x00, Z16, Z0, Z4
	VPCLMULQDQ $0x11, Z16, Z0, Z0
	VPCLMULQDQ $0x00, Z16, Z1, Z5
	VPCLMULQDQ $0x11, Z16, Z1, Z1
	VPCLMULQDQ $0x00, Z16, Z2, Z6
	VPCLMULQDQ $0x11, Z16, Z2, Z2
	VPCLMULQDQ $0x00, Z16, Z3, Z7
	VPCLMULQDQ $0x11, Z16, Z3, Z3
	VPTERNLOGD $0x96, 0(SI), Z4, Z0
	VPTERNLOGD $0x96, 64(SI), Z5, Z1
	VPTERNLOGD $0x96, 128(SI), Z6, Z2
	VPTERNLOGD $0x96, 192(SI), Z7, Z3

	ADDQ $256, SI
	SUBQ $256, CX
	JMP  loop256

fold4:
	// Fold Z0 into Z1, Z1 into Z2, Z2 into Z3 (64 bytes apart each).
	VPCLMULQDQ $0x00, Z17, Z0, Z4
	VPCLMULQDQ $0x11, Z17, Z0, Z0
	VPTERNLOGD $0x96, Z4, Z0, Z1
	VPCLMULQDQ $0x00, Z17, Z1, Z4
	VPCLMULQDQ $0x11, Z17, Z1, Z1
	VPTERNLOGD $0x96, Z4, Z1, Z2
	VPCLMULQDQ $0x00, Z17, Z2, Z4
	VPCLMULQDQ $0x11, Z17, Z2, Z2
	VPTERNLOGD $0x96, Z4, Z2, Z3

	JMP loop64

short:
	// Fewer than 256 bytes: a single ZMM accumulator.
	VMOVDQU64 0(SI), Z3
	VPXORQ    Z5, Z3, Z3
	ADDQ      $64, SI
	SUBQ      $64, CX

loop64:
	CMPQ CX, $64
	JB   reduce

	VPCLMULQDQ $0x00, Z17, Z3, Z4
	VPCLMULQDQ $0x11, Z17, Z3, Z3
	VPTERNLOGD $0x96, 0(SI), Z4, Z3

	ADDQ $64, SI
	SUBQ $64, CX
	JMP  loop64

reduce:
	// Fold lanes 0..2 of Z3 onto lane 3 (distances 384, 256, 128 bits).
	VMOVDQU64       32(DX), Z18
	VPCLMULQDQ      $0x00, Z18, Z3, Z4
	VPCLMULQDQ      $0x11, Z18, Z3, Z5
	VEXTRACTI32X4   $3, Z3, X6
	VPXORQ          Z4, Z5, Z4
	VEXTRACTI64X4   $1, Z4, Y7
	VPXORQ          Y7, Y4, Y4
	VEXTRACTI128    $1, Y4, X7
	VPTERNLOGD      $0x96, X6, X7, X4

	// The 16 bytes in X4 are congruent to the whole message: run them
	// through the CRC32 instruction from a zero register.
	VMOVQ   X4, AX
	VPEXTRQ $1, X4, BX
	VZEROUPPER
	XORL    DX, DX
	CRC32Q  AX, DX
	CRC32Q  BX, DX
	MOVL    DX, ret+32(FP)
	RET
