#include "textflag.h"

// func addF32AVX2(dst, src *float32, n int)
TEXT ·addF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $5, CX
	JZ   done
loop:
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VADDPS  (SI), Y0, Y0
	VADDPS  32(SI), Y1, Y1
	VADDPS  64(SI), Y2, Y2
	VADDPS  96(SI), Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, DI
	ADDQ    $128, SI
	DECQ    CX
	JNZ     loop
	VZEROUPPER
done:
	RET

// func sgdMomentumF32AVX2(w, grad, buf *float32, n int, lr, momentum float32)
// buf = momentum*buf + g; w = w - lr*buf; multiplies and adds rounded
// separately (no FMA), as the Go fallback.
TEXT ·sgdMomentumF32AVX2(SB), NOSPLIT, $0-40
	MOVQ         w+0(FP), DI
	MOVQ         grad+8(FP), SI
	MOVQ         buf+16(FP), DX
	MOVQ         n+24(FP), CX
	VBROADCASTSS lr+32(FP), Y14
	VBROADCASTSS momentum+36(FP), Y15
	SHRQ         $4, CX
	JZ           sgddone
sgdloop:
	VMULPS  (DX), Y15, Y0
	VMULPS  32(DX), Y15, Y1
	VADDPS  (SI), Y0, Y0
	VADDPS  32(SI), Y1, Y1
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMULPS  Y0, Y14, Y2
	VMULPS  Y1, Y14, Y3
	VMOVUPS (DI), Y4
	VMOVUPS 32(DI), Y5
	VSUBPS  Y2, Y4, Y4
	VSUBPS  Y3, Y5, Y5
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, 32(DI)
	ADDQ    $64, DI
	ADDQ    $64, SI
	ADDQ    $64, DX
	DECQ    CX
	JNZ     sgdloop
	VZEROUPPER
sgddone:
	RET

// func scaleF32AVX2(v *float32, n int, s float32)
TEXT ·scaleF32AVX2(SB), NOSPLIT, $0-20
	MOVQ         v+0(FP), DI
	MOVQ         n+8(FP), CX
	VBROADCASTSS s+16(FP), Y15
	SHRQ         $5, CX
	JZ           scaledone
scaleloop:
	VMULPS  (DI), Y15, Y0
	VMULPS  32(DI), Y15, Y1
	VMULPS  64(DI), Y15, Y2
	VMULPS  96(DI), Y15, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, DI
	DECQ    CX
	JNZ     scaleloop
	VZEROUPPER
scaledone:
	RET

// func addScaleF32AVX2(dst, src *float32, n int, s float32)
// dst = (dst + src) * s, the add and the multiply rounded separately.
TEXT ·addScaleF32AVX2(SB), NOSPLIT, $0-28
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS s+24(FP), Y15
	SHRQ         $5, CX
	JZ           asdone
asloop:
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VADDPS  (SI), Y0, Y0
	VADDPS  32(SI), Y1, Y1
	VADDPS  64(SI), Y2, Y2
	VADDPS  96(SI), Y3, Y3
	VMULPS  Y15, Y0, Y0
	VMULPS  Y15, Y1, Y1
	VMULPS  Y15, Y2, Y2
	VMULPS  Y15, Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, DI
	ADDQ    $128, SI
	DECQ    CX
	JNZ     asloop
	VZEROUPPER
asdone:
	RET

// func copyNT(dst, src *byte, n int)
// Copies n bytes, n a multiple of 128, dst 32-byte aligned, with
// non-temporal stores, then SFENCE.
TEXT ·copyNT(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $7, CX
	JZ   ntdone
ntloop:
	VMOVDQU  (SI), Y0
	VMOVDQU  32(SI), Y1
	VMOVDQU  64(SI), Y2
	VMOVDQU  96(SI), Y3
	VMOVNTDQ Y0, (DI)
	VMOVNTDQ Y1, 32(DI)
	VMOVNTDQ Y2, 64(DI)
	VMOVNTDQ Y3, 96(DI)
	ADDQ     $128, DI
	ADDQ     $128, SI
	DECQ     CX
	JNZ      ntloop
	VZEROUPPER
ntdone:
	SFENCE
	RET

// func reluF32AVX2(dst, x *float32, n int)
// dst = max(x, 0) as Go's max: NaN stays, -0 becomes +0 (VMAXPS gives its
// second operand, +0, for a NaN or two zeros; the NaNs are blended back).
TEXT ·reluF32AVX2(SB), NOSPLIT, $0-24
	MOVQ   dst+0(FP), DI
	MOVQ   x+8(FP), SI
	MOVQ   n+16(FP), CX
	SHRQ   $5, CX
	JZ     reludone
	VXORPS Y15, Y15, Y15
reluloop:
	VMOVUPS   (SI), Y0
	VMOVUPS   32(SI), Y1
	VMOVUPS   64(SI), Y2
	VMOVUPS   96(SI), Y3
	VMAXPS    Y15, Y0, Y4
	VMAXPS    Y15, Y1, Y5
	VMAXPS    Y15, Y2, Y6
	VMAXPS    Y15, Y3, Y7
	VCMPPS    $3, Y0, Y0, Y8
	VCMPPS    $3, Y1, Y1, Y9
	VCMPPS    $3, Y2, Y2, Y10
	VCMPPS    $3, Y3, Y3, Y11
	VBLENDVPS Y8, Y0, Y4, Y4
	VBLENDVPS Y9, Y1, Y5, Y5
	VBLENDVPS Y10, Y2, Y6, Y6
	VBLENDVPS Y11, Y3, Y7, Y7
	VMOVUPS   Y4, (DI)
	VMOVUPS   Y5, 32(DI)
	VMOVUPS   Y6, 64(DI)
	VMOVUPS   Y7, 96(DI)
	ADDQ      $128, DI
	ADDQ      $128, SI
	DECQ      CX
	JNZ       reluloop
	VZEROUPPER
reludone:
	RET

// func reluBackwardF32AVX2(dst, grad, y *float32, n int)
// dst = grad where y (a ReLU output) is not ±0, else +0: a mask of y ≠ 0
// (true for NaN) ANDed with grad's bits.
TEXT ·reluBackwardF32AVX2(SB), NOSPLIT, $0-32
	MOVQ   dst+0(FP), DI
	MOVQ   grad+8(FP), SI
	MOVQ   y+16(FP), DX
	MOVQ   n+24(FP), CX
	SHRQ   $5, CX
	JZ     relubdone
	VXORPS Y15, Y15, Y15
relubloop:
	VMOVUPS (DX), Y0
	VMOVUPS 32(DX), Y1
	VMOVUPS 64(DX), Y2
	VMOVUPS 96(DX), Y3
	VCMPPS  $4, Y15, Y0, Y0
	VCMPPS  $4, Y15, Y1, Y1
	VCMPPS  $4, Y15, Y2, Y2
	VCMPPS  $4, Y15, Y3, Y3
	VANDPS  (SI), Y0, Y0
	VANDPS  32(SI), Y1, Y1
	VANDPS  64(SI), Y2, Y2
	VANDPS  96(SI), Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, DI
	ADDQ    $128, SI
	ADDQ    $128, DX
	DECQ    CX
	JNZ     relubloop
	VZEROUPPER
relubdone:
	RET

// func copyRowsF32AVX2(dst *float32, ldd int, src *float32, lds int, rows, w int)
// Copies rows rows of w ≥ 8 floats, ldd and lds bytes apart: whole vectors,
// then the row's last eight again (overlapping) when w is not a multiple
// of 8.
TEXT ·copyRowsF32AVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ lds+24(FP), R9
	MOVQ rows+32(FP), R10
	MOVQ w+40(FP), R11
	TESTQ R10, R10
	JZ   crdone
	LEAQ -32(R11*4), R12 // the last vector's offset in a row
crrow:
	MOVQ R11, CX
	SHRQ $3, CX
	XORQ AX, AX
crloop:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ    $32, AX
	DECQ    CX
	JNZ     crloop
	VMOVUPS (SI)(R12*1), Y0
	VMOVUPS Y0, (DI)(R12*1)
	ADDQ    R8, DI
	ADDQ    R9, SI
	DECQ    R10
	JNZ     crrow
	VZEROUPPER
crdone:
	RET

// func sumF32AVX2(x *float32, n int) float64
// The sum of n floats (n a multiple of 16) in float64: four vectors of
// four float64 partial sums, added pairwise at the end.
TEXT ·sumF32AVX2(SB), NOSPLIT, $0-24
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	SHRQ   $4, CX
	JZ     sumreduce
sumloop:
	VCVTPS2PD (SI), Y4
	VCVTPS2PD 16(SI), Y5
	VCVTPS2PD 32(SI), Y6
	VCVTPS2PD 48(SI), Y7
	VADDPD    Y4, Y0, Y0
	VADDPD    Y5, Y1, Y1
	VADDPD    Y6, Y2, Y2
	VADDPD    Y7, Y3, Y3
	ADDQ      $64, SI
	DECQ      CX
	JNZ       sumloop
sumreduce:
	VADDPD       Y1, Y0, Y0
	VADDPD       Y3, Y2, Y2
	VADDPD       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD       X1, X0, X0
	VHADDPD      X0, X0, X0
	VMOVSD       X0, ret+16(FP)
	VZEROUPPER
	RET
