#include "textflag.h"

// func bf16ToF32AVX2(dst *float32, src *uint16, n int)
TEXT ·bf16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   done
loop:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPSLLD    $16, Y0, Y0
	VPSLLD    $16, Y1, Y1
	VMOVDQU   Y0, (DI)
	VMOVDQU   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       loop
	VZEROUPPER
done:
	RET

// func f32ToBF16AVX2(dst *uint16, src *float32, n int)
//
// Per lane, as tensor.BFloat16FromFloat32: NaN → (b>>16)|0x40, else
// (b + 0x7fff + ((b>>16)&1)) >> 16.
TEXT ·f32ToBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   done
	MOVL         $0x7fff, AX
	VMOVD        AX, X8
	VPBROADCASTD X8, Y8  // 0x7fff
	MOVL         $1, AX
	VMOVD        AX, X9
	VPBROADCASTD X9, Y9  // 1
	MOVL         $0x40, AX
	VMOVD        AX, X10
	VPBROADCASTD X10, Y10 // the quiet bit
loop:
	VMOVDQU   (SI), Y0
	VMOVDQU   32(SI), Y1
	VPSRLD    $16, Y0, Y2
	VPSRLD    $16, Y1, Y3
	VPAND     Y9, Y2, Y4
	VPAND     Y9, Y3, Y5
	VPADDD    Y8, Y4, Y4
	VPADDD    Y8, Y5, Y5
	VPADDD    Y0, Y4, Y4
	VPADDD    Y1, Y5, Y5
	VPSRLD    $16, Y4, Y4    // rounded
	VPSRLD    $16, Y5, Y5
	VPOR      Y10, Y2, Y2    // quiet NaNs
	VPOR      Y10, Y3, Y3
	VCMPPS    $3, Y0, Y0, Y6 // unordered: NaN
	VCMPPS    $3, Y1, Y1, Y7
	VPBLENDVB Y6, Y2, Y4, Y4
	VPBLENDVB Y7, Y3, Y5, Y5
	VPACKUSDW Y5, Y4, Y4     // lanes: Y4 lo, Y5 lo, Y4 hi, Y5 hi
	VPERMQ    $0xD8, Y4, Y4
	VMOVDQU   Y4, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       loop
	VZEROUPPER
done:
	RET

// func roundBF16AVX2(dst, src *float32, n int)
//
// f32ToBF16AVX2's rounding with the result left in the high half of each
// lane: NaN → (b|0x400000)&0xffff0000, else (b + 0x7fff +
// ((b>>16)&1)) & 0xffff0000.
TEXT ·roundBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   done
	MOVL         $0x7fff, AX
	VMOVD        AX, X8
	VPBROADCASTD X8, Y8  // 0x7fff
	MOVL         $1, AX
	VMOVD        AX, X9
	VPBROADCASTD X9, Y9  // 1
	MOVL         $0x400000, AX
	VMOVD        AX, X10
	VPBROADCASTD X10, Y10 // the quiet bit
	MOVL         $0xffff0000, AX
	VMOVD        AX, X11
	VPBROADCASTD X11, Y11 // the high half
loop:
	VMOVDQU   (SI), Y0
	VMOVDQU   32(SI), Y1
	VPSRLD    $16, Y0, Y2
	VPSRLD    $16, Y1, Y3
	VPAND     Y9, Y2, Y4
	VPAND     Y9, Y3, Y5
	VPADDD    Y8, Y4, Y4
	VPADDD    Y8, Y5, Y5
	VPADDD    Y0, Y4, Y4
	VPADDD    Y1, Y5, Y5     // rounded, in the high half
	VPOR      Y10, Y0, Y2    // quiet NaNs
	VPOR      Y10, Y1, Y3
	VCMPPS    $3, Y0, Y0, Y6 // unordered: NaN
	VCMPPS    $3, Y1, Y1, Y7
	VPBLENDVB Y6, Y2, Y4, Y4
	VPBLENDVB Y7, Y3, Y5, Y5
	VPAND     Y11, Y4, Y4
	VPAND     Y11, Y5, Y5
	VMOVDQU   Y4, (DI)
	VMOVDQU   Y5, 32(DI)
	ADDQ      $64, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       loop
	VZEROUPPER
done:
	RET
