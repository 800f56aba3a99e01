//go:build amd64

#include "textflag.h"

// func packB16AVX(dst *float32, src *float32, ldb int, k int)
//
// Copies k rows of 16 floats, row p from src+p*ldb bytes, to dst, one
// after another (an AVX2 B panel of a row-major B).
TEXT ·packB16AVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ldb+16(FP), DX
	MOVQ k+24(FP), CX
	TESTQ CX, CX
	JZ done
loop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ DX, SI
	ADDQ $64, DI
	DECQ CX
	JNZ loop
done:
	VZEROUPPER
	RET
