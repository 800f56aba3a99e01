//go:build amd64

#include "textflag.h"

// LayerNorm's row kernels (norm_amd64.go), AVX2 and FMA, n a multiple of
// 8. Sums run in eight float32 lanes (two sets where the loop pairs
// vectors) added pairwise at the end. In the operands, the Go order is the
// reverse of Intel's: VFMADD231PS a, b, c is c += b·a.

// HSUM leaves the sum of Y0's eight lanes in X0 (clobbers X1).
#define HSUM \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS       X1, X0, X0; \
	VPERMILPS    $0x4e, X0, X1; \
	VADDPS       X1, X0, X0; \
	VPERMILPS    $0xb1, X0, X1; \
	VADDPS       X1, X0, X0

// func lnSumF32AVX2(x *float32, n int) float32
TEXT ·lnSumF32AVX2(SB), NOSPLIT, $0-20
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	SHRQ   $3, CX
	TESTQ  $1, CX
	JZ     pairs
	VADDPS (SI), Y0, Y0
	ADDQ   $32, SI

pairs:
	SHRQ $1, CX
	JZ   red

loop:
	VADDPS (SI), Y0, Y0
	VADDPS 32(SI), Y1, Y1
	ADDQ   $64, SI
	DECQ   CX
	JNZ    loop

red:
	VADDPS Y1, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS  X0, ret+16(FP)
	RET

// func lnSqDevF32AVX2(x *float32, n int, mu float32) float32
// Σ (x−mu)².
TEXT ·lnSqDevF32AVX2(SB), NOSPLIT, $0-28
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS mu+16(FP), Y7
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1
	SHRQ         $3, CX
	TESTQ        $1, CX
	JZ           pairs
	VMOVUPS      (SI), Y2
	VSUBPS       Y7, Y2, Y2
	VFMADD231PS  Y2, Y2, Y0
	ADDQ         $32, SI

pairs:
	SHRQ $1, CX
	JZ   red

loop:
	VMOVUPS     (SI), Y2
	VMOVUPS     32(SI), Y3
	VSUBPS      Y7, Y2, Y2
	VSUBPS      Y7, Y3, Y3
	VFMADD231PS Y2, Y2, Y0
	VFMADD231PS Y3, Y3, Y1
	ADDQ        $64, SI
	DECQ        CX
	JNZ         loop

red:
	VADDPS Y1, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS  X0, ret+24(FP)
	RET

// func lnNormF32AVX2(y, h, x, w, b *float32, n int, mu, is float32)
// h = (x−mu)·is; y = h·w + b.
TEXT ·lnNormF32AVX2(SB), NOSPLIT, $0-56
	MOVQ         y+0(FP), DI
	MOVQ         h+8(FP), R8
	MOVQ         x+16(FP), SI
	MOVQ         w+24(FP), R9
	MOVQ         b+32(FP), R10
	MOVQ         n+40(FP), CX
	VBROADCASTSS mu+48(FP), Y6
	VBROADCASTSS is+52(FP), Y7
	SHRQ         $3, CX
	JZ           done

loop:
	VMOVUPS     (SI), Y0
	VSUBPS      Y6, Y0, Y0
	VMULPS      Y7, Y0, Y0
	VMOVUPS     Y0, (R8)
	VMOVUPS     (R10), Y1
	VFMADD231PS (R9), Y0, Y1
	VMOVUPS     Y1, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	ADDQ        $32, R8
	ADDQ        $32, R9
	ADDQ        $32, R10
	DECQ        CX
	JNZ         loop
	VZEROUPPER

done:
	RET

// func lnBackSumsF32AVX2(grad, h, w, dw, db *float32, n int) (s1, s2 float32)
// With dh = grad·w: s1 = Σ dh, s2 = Σ dh·h; dw += grad·h; db += grad.
TEXT ·lnBackSumsF32AVX2(SB), NOSPLIT, $0-56
	MOVQ   grad+0(FP), SI
	MOVQ   h+8(FP), DX
	MOVQ   w+16(FP), R9
	MOVQ   dw+24(FP), DI
	MOVQ   db+32(FP), R8
	MOVQ   n+40(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	SHRQ   $3, CX
	JZ     red

loop:
	VMOVUPS     (SI), Y2
	VMOVUPS     (DX), Y3
	VMULPS      (R9), Y2, Y4
	VADDPS      Y4, Y0, Y0
	VFMADD231PS Y3, Y4, Y1
	VMOVUPS     (DI), Y5
	VFMADD231PS Y3, Y2, Y5
	VMOVUPS     Y5, (DI)
	VADDPS      (R8), Y2, Y5
	VMOVUPS     Y5, (R8)
	ADDQ        $32, SI
	ADDQ        $32, DX
	ADDQ        $32, R9
	ADDQ        $32, DI
	ADDQ        $32, R8
	DECQ        CX
	JNZ         loop

red:
	VMOVAPS Y1, Y8
	HSUM
	MOVSS   X0, s1+48(FP)
	VMOVAPS Y8, Y0
	HSUM
	VZEROUPPER
	MOVSS   X0, s2+52(FP)
	RET

// func lnBackDxF32AVX2(out, grad, h, w *float32, n int, a, fd, s1, s2 float32)
// out = a·(fd·grad·w − s1 − h·s2): dx.
TEXT ·lnBackDxF32AVX2(SB), NOSPLIT, $0-56
	MOVQ         out+0(FP), DI
	MOVQ         grad+8(FP), SI
	MOVQ         h+16(FP), DX
	MOVQ         w+24(FP), R9
	MOVQ         n+32(FP), CX
	VBROADCASTSS a+40(FP), Y4
	VBROADCASTSS fd+44(FP), Y5
	VBROADCASTSS s1+48(FP), Y6
	VBROADCASTSS s2+52(FP), Y7
	SHRQ         $3, CX
	JZ           done

loop:
	VMULPS       (SI), Y5, Y0
	VMULPS       (R9), Y0, Y0
	VSUBPS       Y6, Y0, Y0
	VFNMADD231PS (DX), Y7, Y0
	VMULPS       Y4, Y0, Y0
	VMOVUPS      Y0, (DI)
	ADDQ         $32, SI
	ADDQ         $32, DX
	ADDQ         $32, R9
	ADDQ         $32, DI
	DECQ         CX
	JNZ          loop
	VZEROUPPER

done:
	RET
