#include "textflag.h"

// func adamF32AVX2(w, grad, m, v *float32, n int, b1, b2, eps, bc2sqrt, stepSize float32)
// Adam's update of n floats (n a multiple of 8), each multiply, add,
// square root and division rounded on its own, as adamF32Go.
TEXT ·adamF32AVX2(SB), NOSPLIT, $0-60
	MOVQ         w+0(FP), DI
	MOVQ         grad+8(FP), SI
	MOVQ         m+16(FP), DX
	MOVQ         v+24(FP), R8
	MOVQ         n+32(FP), CX
	VBROADCASTSS b1+40(FP), Y10
	VBROADCASTSS b2+44(FP), Y11
	VBROADCASTSS eps+48(FP), Y12
	VBROADCASTSS bc2sqrt+52(FP), Y13
	VBROADCASTSS stepSize+56(FP), Y14
	// c1 = 1-b1 in Y8, c2 = 1-b2 in Y9.
	MOVL         $0x3f800000, AX
	MOVL         AX, X15
	VBROADCASTSS X15, Y15
	VSUBPS       Y10, Y15, Y8
	VSUBPS       Y11, Y15, Y9
	SHRQ         $3, CX
	JZ           done
loop:
	VMOVUPS (SI), Y0          // g
	VMULPS  (DX), Y10, Y1     // m*b1
	VMULPS  Y0, Y8, Y2        // c1*g
	VADDPS  Y2, Y1, Y1        // m
	VMOVUPS Y1, (DX)
	VMULPS  (R8), Y11, Y3     // v*b2
	VMULPS  Y0, Y9, Y4        // c2*g
	VMULPS  Y0, Y4, Y4        // (c2*g)*g
	VADDPS  Y4, Y3, Y3        // v
	VMOVUPS Y3, (R8)
	VSQRTPS Y3, Y5            // sqrt(v)
	VDIVPS  Y13, Y5, Y5       // / bc2sqrt
	VADDPS  Y12, Y5, Y5       // + eps
	VMULPS  Y1, Y14, Y6       // stepSize*m
	VDIVPS  Y5, Y6, Y6        // / denom
	VMOVUPS (DI), Y7
	VSUBPS  Y6, Y7, Y7        // w - step
	VMOVUPS Y7, (DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, R8
	DECQ    CX
	JNZ     loop
	VZEROUPPER
done:
	RET
