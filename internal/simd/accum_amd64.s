#include "textflag.h"

// func accumF64AVX2(acc *float64, x *float32, n int)
// acc[i] += float64(x[i]) for n elements, n a multiple of 16.
TEXT ·accumF64AVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   done
loop:
	VCVTPS2PD (SI), Y0
	VCVTPS2PD 16(SI), Y1
	VCVTPS2PD 32(SI), Y2
	VCVTPS2PD 48(SI), Y3
	VADDPD    (DI), Y0, Y0
	VADDPD    32(DI), Y1, Y1
	VADDPD    64(DI), Y2, Y2
	VADDPD    96(DI), Y3, Y3
	VMOVUPD   Y0, (DI)
	VMOVUPD   Y1, 32(DI)
	VMOVUPD   Y2, 64(DI)
	VMOVUPD   Y3, 96(DI)
	ADDQ      $64, SI
	ADDQ      $128, DI
	DECQ      CX
	JNZ       loop
	VZEROUPPER
done:
	RET
