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

// func transpose8AVX2(dst *float32, ds int, src *float32, ss int)
//
// Writes the transpose of an 8×8 block: dst row i (at dst+i*ds bytes)
// receives column i of the src rows (at src+r*ss bytes).
TEXT ·transpose8AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ ds+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ ss+24(FP), CX
	LEAQ (CX)(CX*2), R8 // 3 rows
	LEAQ (SI)(CX*4), R9 // row 4
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(CX*1), Y1
	VMOVUPS (SI)(CX*2), Y2
	VMOVUPS (SI)(R8*1), Y3
	VMOVUPS (R9), Y4
	VMOVUPS (R9)(CX*1), Y5
	VMOVUPS (R9)(CX*2), Y6
	VMOVUPS (R9)(R8*1), Y7
	// Pairs of rows interleaved, within each 128-bit lane.
	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VUNPCKLPS Y5, Y4, Y12
	VUNPCKHPS Y5, Y4, Y13
	VUNPCKLPS Y7, Y6, Y14
	VUNPCKHPS Y7, Y6, Y15
	// Columns c | c+4 of four rows.
	VSHUFPS $0x44, Y10, Y8, Y0
	VSHUFPS $0xEE, Y10, Y8, Y1
	VSHUFPS $0x44, Y11, Y9, Y2
	VSHUFPS $0xEE, Y11, Y9, Y3
	VSHUFPS $0x44, Y14, Y12, Y4
	VSHUFPS $0xEE, Y14, Y12, Y5
	VSHUFPS $0x44, Y15, Y13, Y6
	VSHUFPS $0xEE, Y15, Y13, Y7
	// Whole columns: rows 0-3 from the first four, 4-7 from the others.
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15
	LEAQ (DX)(DX*2), R8
	LEAQ (DI)(DX*4), R9
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, (DI)(DX*1)
	VMOVUPS Y10, (DI)(DX*2)
	VMOVUPS Y11, (DI)(R8*1)
	VMOVUPS Y12, (R9)
	VMOVUPS Y13, (R9)(DX*1)
	VMOVUPS Y14, (R9)(DX*2)
	VMOVUPS Y15, (R9)(R8*1)
	VZEROUPPER
	RET
