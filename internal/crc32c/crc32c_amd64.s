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

// func foldAVX2(crc uint32, p []byte) uint32
//
// The same folding on 256-bit registers (AVX2 and VEX-encoded VPCLMULQDQ,
// for CPUs with carry-less multiplication on YMM registers but no AVX-512:
// Zen 3, Alder Lake), four YMM accumulators (8 x 128-bit lanes, 128 bytes
// per iteration). Constants in foldConstsY: D = 1024, 256, 128 bits.
// Requires len(p) % 32 == 0 and len(p) >= 32. crc is the raw register.
TEXT ·foldAVX2(SB), NOSPLIT, $0-36
	MOVL crc+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	LEAQ ·foldConstsY(SB), DX

	VBROADCASTI128 0(DX), Y8  // D = 1024 constants, both lanes
	VBROADCASTI128 16(DX), Y9 // D = 256 constants, both lanes

	VMOVD AX, X5 // zeroes the rest of Y5
	CMPQ  CX, $128
	JB    shortY

	// Load the first 128 bytes; XOR the register into the first 4 bytes.
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VPXOR   Y5, Y0, Y0
	ADDQ    $128, SI
	SUBQ    $128, CX

loop128:
	CMPQ CX, $128
	JB   fold4Y

	VPCLMULQDQ $0x00, Y8, Y0, Y4
	VPCLMULQDQ $0x11, Y8, Y0, Y0
	VPCLMULQDQ $0x00, Y8, Y1, Y5
	VPCLMULQDQ $0x11, Y8, Y1, Y1
	VPCLMULQDQ $0x00, Y8, Y2, Y6
	VPCLMULQDQ $0x11, Y8, Y2, Y2
	VPCLMULQDQ $0x00, Y8, Y3, Y7
	VPCLMULQDQ $0x11, Y8, Y3, Y3
	VPXOR      0(SI), Y4, Y4
	VPXOR      32(SI), Y5, Y5
	VPXOR      64(SI), Y6, Y6
	VPXOR      96(SI), Y7, Y7
	VPXOR      Y4, Y0, Y0
	VPXOR      Y5, Y1, Y1
	VPXOR      Y6, Y2, Y2
	VPXOR      Y7, Y3, Y3

	ADDQ $128, SI
	SUBQ $128, CX
	JMP  loop128

fold4Y:
	// Fold Y0 into Y1, Y1 into Y2, Y2 into Y3 (32 bytes apart each).
	VPCLMULQDQ $0x00, Y9, Y0, Y4
	VPCLMULQDQ $0x11, Y9, Y0, Y0
	VPXOR      Y4, Y0, Y0
	VPXOR      Y0, Y1, Y1
	VPCLMULQDQ $0x00, Y9, Y1, Y4
	VPCLMULQDQ $0x11, Y9, Y1, Y1
	VPXOR      Y4, Y1, Y1
	VPXOR      Y1, Y2, Y2
	VPCLMULQDQ $0x00, Y9, Y2, Y4
	VPCLMULQDQ $0x11, Y9, Y2, Y2
	VPXOR      Y4, Y2, Y2
	VPXOR      Y2, Y3, Y3

	JMP loop32

shortY:
	// Fewer than 128 bytes: a single YMM accumulator.
	VMOVDQU 0(SI), Y3
	VPXOR   Y5, Y3, Y3
	ADDQ    $32, SI
	SUBQ    $32, CX

loop32:
	CMPQ CX, $32
	JB   reduceY

	VPCLMULQDQ $0x00, Y9, Y3, Y4
	VPCLMULQDQ $0x11, Y9, Y3, Y3
	VPXOR      0(SI), Y4, Y4
	VPXOR      Y4, Y3, Y3

	ADDQ $32, SI
	SUBQ $32, CX
	JMP  loop32

reduceY:
	// Fold lane 0 of Y3 onto lane 1 (distance 128 bits).
	VMOVDQU      32(DX), X10
	VEXTRACTI128 $1, Y3, X6
	VPCLMULQDQ   $0x00, X10, X3, X4
	VPCLMULQDQ   $0x11, X10, X3, X7
	VPXOR        X4, X7, X4
	VPXOR        X6, X4, X4

	// The 16 bytes in X4 are congruent to the whole message.
	VMOVQ   X4, AX
	VPEXTRQ $1, X4, BX
	VZEROUPPER
	XORL    DX, DX
	CRC32Q  AX, DX
	CRC32Q  BX, DX
	MOVL    DX, ret+32(FP)
	RET
