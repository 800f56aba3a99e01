#include "textflag.h"

// func adamF32FMA(w, grad, m, v, vmax *float32, n int, c *Adam)
// Adam's update of n floats (n a multiple of 8) as adamF32Go: the three
// multiply-adds fused, every other operation rounded on its own. c points
// at Beta1, OneMinusBeta1, Beta2, OneMinusBeta2, Eps, BC2Sqrt, StepSize,
// WeightDecay (float32 each); vmax is nil without AMSGrad.
TEXT ·adamF32FMA(SB), NOSPLIT, $0-56
	MOVQ         w+0(FP), DI
	MOVQ         grad+8(FP), SI
	MOVQ         m+16(FP), DX
	MOVQ         v+24(FP), R8
	MOVQ         vmax+32(FP), R10
	MOVQ         n+40(FP), CX
	MOVQ         c+48(FP), R9
	VBROADCASTSS 0(R9), Y10  // b1
	VBROADCASTSS 4(R9), Y8   // c1
	VBROADCASTSS 8(R9), Y11  // b2
	VBROADCASTSS 12(R9), Y9  // c2
	VBROADCASTSS 16(R9), Y12 // eps
	VBROADCASTSS 20(R9), Y13 // bc2sqrt
	VBROADCASTSS 24(R9), Y14 // stepSize
	VBROADCASTSS 28(R9), Y15 // weight decay (L2)
	SHRQ         $3, CX
	JZ           done
loop:
	VMOVUPS     (DI), Y7       // w
	VMOVUPS     (SI), Y0       // g
	VFMADD231PS Y15, Y7, Y0    // g = w*wd + g
	VMULPS      (DX), Y10, Y1  // m*b1
	VFMADD231PS Y8, Y0, Y1     // m = g*c1 + m*b1
	VMOVUPS     Y1, (DX)
	VMULPS      (R8), Y11, Y3  // v*b2
	VMULPS      Y0, Y9, Y4     // c2*g
	VFMADD231PS Y4, Y0, Y3     // v = (c2*g)*g + v*b2
	VMOVUPS     Y3, (R8)
	TESTQ       R10, R10
	JZ          nomax
	VMOVUPS     (R10), Y5
	VMAXPS      Y3, Y5, Y3     // vmax > v ? vmax : v
	VMOVUPS     Y3, (R10)
	ADDQ        $32, R10
nomax:
	VSQRTPS     Y3, Y5         // sqrt(v)
	VDIVPS      Y13, Y5, Y5    // / bc2sqrt
	VADDPS      Y12, Y5, Y5    // + eps
	VMULPS      Y1, Y14, Y6    // stepSize*m
	VDIVPS      Y5, Y6, Y6     // / denom
	VSUBPS      Y6, Y7, Y7     // w - step
	VMOVUPS     Y7, (DI)
	ADDQ        $32, DI
	ADDQ        $32, SI
	ADDQ        $32, DX
	ADDQ        $32, R8
	DECQ        CX
	JNZ         loop
	VZEROUPPER
done:
	RET
