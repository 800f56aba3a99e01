#!/usr/bin/env python3
"""Writes math_amd64.s: AVX2+FMA kernels of exp, GELU and GELU's gradient,
sigmoid and tanh, the vector forms of tensor's exp32, erf32 and tanh32.
Run: python3 gen_math.py"""
import os
import re
import struct

CONSTS = [
    ("half", 0.5), ("one", 1.0), ("log2e", 1.44269504088896341), ("c1", 0.693359375), ("c2", -2.12194440e-4),
    ("p0", 1.9875691500e-4), ("p1", 1.3981999507e-3), ("p2", 8.3334519073e-3), ("p3", 4.1665795894e-2),
    ("p4", 1.6666665459e-1), ("p5", 5.0000001201e-1),
    ("exphi", 88.3762626647949), ("explo", -87.33654),
    ("four", 4.0), ("mfour", -4.0),
    ("a13", -2.72614225801306e-10), ("a11", 2.77068142495902e-08), ("a9", -2.10102402082508e-06),
    ("a7", -5.69250639462346e-05), ("a5", -7.34990630326855e-04), ("a3", -2.95459980854025e-03),
    ("a1", -1.60960333262415e-02),
    ("b8", -1.45660718464996e-05), ("b6", -2.13374055278905e-04), ("b4", -1.68282697438203e-03),
    ("b2", -7.37332916720468e-03), ("b0", -1.42647390514189e-02),
    ("sqrthalf", 0.70710678118654752), ("invsqrt2pi", 0.3989422804014327), ("mhalf", -0.5),
    # tanh as an odd rational function p(x)/q(x) of degrees 13 and 6 (the
    # minimax fit Eigen, XLA and MLAS use), x clamped to where tanh rounds
    # to ±1 in float32.
    ("thi", 7.90531110763549805), ("tlo", -7.90531110763549805),
    ("t13", -2.76076847742355e-16), ("t11", 2.00018790482477e-13), ("t9", -8.60467152213735e-11),
    ("t7", 5.12229709037114e-08), ("t5", 1.48572235717979e-05), ("t3", 6.37261928875436e-04),
    ("t1", 4.89352455891786e-03),
    ("u6", 1.19825839466702e-06), ("u4", 1.18534705686654e-04), ("u2", 2.26843463243900e-03),
    ("u0", 4.89352518554385e-03),
    ("mone", -1.0), ("nine", 9.0),
]

off, data, o = {}, [], 0
for name, v in CONSTS:
    off[name] = o
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    for k in range(4):
        data.append(f"DATA mathc<>+{o + 8 * k}(SB)/8, $0x{bits | bits << 32:016x}")
    o += 32
for name, bits in [("i127", 127), ("absmask", 0x7fffffff), ("signmask", 0x80000000)]:
    off[name] = o
    for k in range(4):
        data.append(f"DATA mathc<>+{o + 8 * k}(SB)/8, $0x{bits | bits << 32:016x}")
    o += 32
data.append(f"GLOBL mathc<>(SB), RODATA|NOPTR, ${o}")
# The same constants 16 lanes wide, for the AVX-512 kernels: entry k of
# mathc<> (at 32k) is at 64k here.
for name, v in CONSTS:
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    for k in range(8):
        data.append(f"DATA mathz<>+{2 * off[name] + 8 * k}(SB)/8, $0x{bits | bits << 32:016x}")
for name, bits in [("i127", 127), ("absmask", 0x7fffffff), ("signmask", 0x80000000)]:
    for k in range(8):
        data.append(f"DATA mathz<>+{2 * off[name] + 8 * k}(SB)/8, $0x{bits | bits << 32:016x}")
data.append(f"GLOBL mathz<>(SB), RODATA|NOPTR, ${2 * o}")


def hreduce(op):
    """Y0's eight lanes folded by op (VMAXPS or VADDPS) into X0's lowest;
    clobbers X1."""
    s = "\tVEXTRACTF128 $1, Y0, X1\n"
    for step in ["", "\tVPERMILPS $0x4e, X0, X1\n", "\tVPERMILPS $0xb1, X0, X1\n"]:
        s += f"{step}\t{op}  X1, X0, X0\n"
    return s


def c(n):
    return f"mathc<>+{off[n]}(SB)"


def zc(n):
    return f"mathz<>+{2 * off[n]}(SB)"


def exp_block():
    """x in Y0 -> e^x in Y0; clobbers Y1, Y2, Y3."""
    s = f"""\tVMOVUPS      {c('exphi')}, Y3
\tVMINPS       Y0, Y3, Y0
\tVMOVUPS      {c('explo')}, Y3
\tVMAXPS       Y0, Y3, Y0
\tVMULPS       {c('log2e')}, Y0, Y1
\tVADDPS       {c('half')}, Y1, Y1
\tVROUNDPS     $1, Y1, Y1
\tVFNMADD231PS {c('c1')}, Y1, Y0
\tVFNMADD231PS {c('c2')}, Y1, Y0
\tVMULPS       Y0, Y0, Y2
\tVMOVUPS      {c('p0')}, Y3
"""
    for p in ["p1", "p2", "p3", "p4", "p5"]:
        s += f"\tVFMADD213PS  {c(p)}, Y0, Y3\n"
    s += f"""\tVFMADD213PS  Y0, Y2, Y3
\tVADDPS       {c('one')}, Y3, Y3
\tVCVTPS2DQ    Y1, Y1
\tVPADDD       {c('i127')}, Y1, Y1
\tVPSLLD       $23, Y1, Y1
\tVMULPS       Y1, Y3, Y0
"""
    return s


def erf_block():
    """x in Y0 -> erf(x) in Y0; clobbers Y1, Y2, Y3."""
    s = f"""\tVMOVUPS      {c('four')}, Y1
\tVMINPS       Y0, Y1, Y0
\tVMOVUPS      {c('mfour')}, Y1
\tVMAXPS       Y0, Y1, Y0
\tVMULPS       Y0, Y0, Y1
\tVMOVUPS      {c('a13')}, Y2
"""
    for a in ["a11", "a9", "a7", "a5", "a3", "a1"]:
        s += f"\tVFMADD213PS  {c(a)}, Y1, Y2\n"
    s += f"\tVMULPS       Y0, Y2, Y2\n\tVMOVUPS      {c('b8')}, Y3\n"
    for b in ["b6", "b4", "b2", "b0"]:
        s += f"\tVFMADD213PS  {c(b)}, Y1, Y3\n"
    return s + "\tVDIVPS       Y3, Y2, Y0\n"


def tanh_block():
    """x in Y0 -> tanh(x) in Y0; clobbers Y1 to Y6. The rational function
    stops 4 ulp short of ±1 at the clamp; from |x| = 9 on, where tanh rounds
    to ±1, the result is ±1 exactly."""
    s = f"""\tVMOVAPS      Y0, Y4
\tVMOVUPS      {c('thi')}, Y1
\tVMINPS       Y0, Y1, Y0
\tVMOVUPS      {c('tlo')}, Y1
\tVMAXPS       Y0, Y1, Y0
\tVMULPS       Y0, Y0, Y1
\tVMOVUPS      {c('t13')}, Y2
"""
    for a in ["t11", "t9", "t7", "t5", "t3", "t1"]:
        s += f"\tVFMADD213PS  {c(a)}, Y1, Y2\n"
    s += f"\tVMULPS       Y0, Y2, Y2\n\tVMOVUPS      {c('u6')}, Y3\n"
    for b in ["u4", "u2", "u0"]:
        s += f"\tVFMADD213PS  {c(b)}, Y1, Y3\n"
    return s + f"""\tVDIVPS       Y3, Y2, Y0
\tVANDPS       {c('absmask')}, Y4, Y5
\tVCMPPS       $13, {c('nine')}, Y5, Y5
\tVANDPS       {c('signmask')}, Y4, Y6
\tVORPS        {c('one')}, Y6, Y6
\tVBLENDVPS    Y5, Y6, Y0, Y0
"""


def zmm(block):
    """The AVX-512 form of a block written for AVX2: Z registers, the
    64-byte constants, VRNDSCALEPS for VROUNDPS (the same rounding, so the
    same bits lane for lane)."""
    block = re.sub(r"\bY(\d+)\b", r"Z\1", block)
    block = re.sub(r"mathc<>\+(\d+)", lambda m: f"mathz<>+{2 * int(m.group(1))}", block)
    return block.replace("VROUNDPS    ", "VRNDSCALEPS ")


def avx512_form(kernels):
    """The AVX-512 forms of AVX2 kernels written eight floats a step: zmm's
    registers and constants, sixteen floats a step (n a multiple of 16),
    the names and labels renamed."""
    k = zmm(kernels)
    k = k.replace("AVX2(", "AVX512(").replace("SHRQ $3, CX", "SHRQ $4, CX").replace("$32, ", "$64, ")
    k = re.sub(r"\b([a-z]+)(loop|done)\b", r"\1z\2", k)
    return "// The kernels above with AVX-512: sixteen floats a step, n a multiple\n// of 16, the same operations lane for lane (the same bits).\n\n" + k


HEAD = """// Code generated by gen_math.py; DO NOT EDIT.

#include "textflag.h"

// Vector forms of tensor's exp32 and erf32 (Cephes' expf, Eigen's
// rational erf), eight floats at a time with AVX2 and FMA. In the
// operands of an instruction, the Go order is the reverse of Intel's: a
// register or constant first is Intel's last source. exp clamps its
// argument to [-87.34, 88.38], so it never overflows to Inf or returns a
// subnormal; min and max take x as their last source, so NaN stays NaN.
"""

GELU = f"""// func geluF32AVX2(dst, x *float32, n int)
// dst = x/2·(1 + erf(x/√2))
TEXT ·geluF32AVX2(SB), NOSPLIT, $0-24
\tMOVQ dst+0(FP), DI
\tMOVQ x+8(FP), SI
\tMOVQ n+16(FP), CX
\tSHRQ $3, CX
\tJZ   geludone
geluloop:
\tVMOVUPS (SI), Y4
\tVMULPS  {c('sqrthalf')}, Y4, Y0
{erf_block()}\tVADDPS  {c('one')}, Y0, Y0
\tVMULPS  Y4, Y0, Y0
\tVMULPS  {c('half')}, Y0, Y0
\tVMOVUPS Y0, (DI)
\tADDQ    $32, DI
\tADDQ    $32, SI
\tDECQ    CX
\tJNZ     geluloop
\tVZEROUPPER
geludone:
\tRET

// func geluBackwardF32AVX2(dst, grad, x *float32, n int)
// dst = grad·(Φ(x) + x·φ(x)), Φ(x) = (1 + erf(x/√2))/2, φ(x) = e^(-x²/2)/√(2π)
TEXT ·geluBackwardF32AVX2(SB), NOSPLIT, $0-32
\tMOVQ dst+0(FP), DI
\tMOVQ grad+8(FP), DX
\tMOVQ x+16(FP), SI
\tMOVQ n+24(FP), CX
\tSHRQ $3, CX
\tJZ   gelubdone
gelubloop:
\tVMOVUPS (SI), Y4
\tVMULPS  {c('sqrthalf')}, Y4, Y0
{erf_block()}\tVADDPS  {c('one')}, Y0, Y0
\tVMULPS  {c('half')}, Y0, Y6
\tVMULPS  Y4, Y4, Y0
\tVMULPS  {c('mhalf')}, Y0, Y0
{exp_block()}\tVMULPS  {c('invsqrt2pi')}, Y0, Y0
\tVFMADD213PS Y6, Y4, Y0
\tVMULPS  (DX), Y0, Y0
\tVMOVUPS Y0, (DI)
\tADDQ    $32, DI
\tADDQ    $32, DX
\tADDQ    $32, SI
\tDECQ    CX
\tJNZ     gelubloop
\tVZEROUPPER
gelubdone:
\tRET

"""

BODY = f"""
// func expF32AVX2(dst, x *float32, n int)
TEXT ·expF32AVX2(SB), NOSPLIT, $0-24
\tMOVQ dst+0(FP), DI
\tMOVQ x+8(FP), SI
\tMOVQ n+16(FP), CX
\tSHRQ $3, CX
\tJZ   expdone
exploop:
\tVMOVUPS (SI), Y0
{exp_block()}\tVMOVUPS Y0, (DI)
\tADDQ    $32, DI
\tADDQ    $32, SI
\tDECQ    CX
\tJNZ     exploop
\tVZEROUPPER
expdone:
\tRET

{GELU}{avx512_form(GELU)}// func sigmoidF32AVX2(dst, x *float32, n int)
// dst = 1/(1 + e^-x)
TEXT ·sigmoidF32AVX2(SB), NOSPLIT, $0-24
\tMOVQ dst+0(FP), DI
\tMOVQ x+8(FP), SI
\tMOVQ n+16(FP), CX
\tSHRQ $3, CX
\tJZ   sigdone
sigloop:
\tVMOVUPS (SI), Y0
\tVMULPS  {c('mone')}, Y0, Y0
{exp_block()}\tVADDPS  {c('one')}, Y0, Y0
\tVMOVUPS {c('one')}, Y1
\tVDIVPS  Y0, Y1, Y0
\tVMOVUPS Y0, (DI)
\tADDQ    $32, DI
\tADDQ    $32, SI
\tDECQ    CX
\tJNZ     sigloop
\tVZEROUPPER
sigdone:
\tRET

// func tanhF32AVX2(dst, x *float32, n int)
TEXT ·tanhF32AVX2(SB), NOSPLIT, $0-24
\tMOVQ dst+0(FP), DI
\tMOVQ x+8(FP), SI
\tMOVQ n+16(FP), CX
\tSHRQ $3, CX
\tJZ   tanhdone
tanhloop:
\tVMOVUPS (SI), Y0
{tanh_block()}\tVMOVUPS Y0, (DI)
\tADDQ    $32, DI
\tADDQ    $32, SI
\tDECQ    CX
\tJNZ     tanhloop
\tVZEROUPPER
tanhdone:
\tRET

// func maxF32AVX2(x *float32, n int) float32
// The largest of n floats, n a positive multiple of 8. A NaN may or may
// not be returned.
TEXT ·maxF32AVX2(SB), NOSPLIT, $0-20
\tMOVQ x+0(FP), SI
\tMOVQ n+8(FP), CX
\tVMOVUPS (SI), Y0
\tADDQ    $32, SI
\tSHRQ    $3, CX
\tDECQ    CX
\tJZ      maxred
maxloop:
\tVMAXPS  (SI), Y0, Y0
\tADDQ    $32, SI
\tDECQ    CX
\tJNZ     maxloop
maxred:
{hreduce('VMAXPS')}\tVZEROUPPER
\tMOVSS   X0, ret+16(FP)
\tRET

// func expShiftSumF32AVX2(dst, x *float32, n int, m float32) float64
// dst = e^(x-m) for n floats, n a multiple of 8; returns their sum, in
// float64 (eight partial sums, added pairwise at the end).
TEXT ·expShiftSumF32AVX2(SB), NOSPLIT, $0-40
\tMOVQ dst+0(FP), DI
\tMOVQ x+8(FP), SI
\tMOVQ n+16(FP), CX
\tVBROADCASTSS m+24(FP), Y7
\tVXORPD  Y8, Y8, Y8
\tVXORPD  Y9, Y9, Y9
\tSHRQ    $3, CX
\tJZ      essdone
essloop:
\tVMOVUPS (SI), Y0
\tVSUBPS  Y7, Y0, Y0
{exp_block()}\tVMOVUPS Y0, (DI)
\tVCVTPS2PD X0, Y4
\tVEXTRACTF128 $1, Y0, X5
\tVCVTPS2PD X5, Y5
\tVADDPD  Y4, Y8, Y8
\tVADDPD  Y5, Y9, Y9
\tADDQ    $32, DI
\tADDQ    $32, SI
\tDECQ    CX
\tJNZ     essloop
essdone:
\tVADDPD  Y9, Y8, Y8
\tVEXTRACTF128 $1, Y8, X1
\tVADDPD  X1, X8, X0
\tVPERMILPD $1, X0, X1
\tVADDSD  X1, X0, X0
\tVZEROUPPER
\tMOVSD   X0, ret+32(FP)
\tRET

// func dotF32AVX2(a, b *float32, n int) float32
// Σ a[i]·b[i] over n floats, n a positive multiple of 8, in two sets of
// eight float32 partial sums.
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
\tMOVQ a+0(FP), SI
\tMOVQ b+8(FP), DX
\tMOVQ n+16(FP), CX
\tVXORPS  Y0, Y0, Y0
\tVXORPS  Y1, Y1, Y1
\tSHRQ    $3, CX
\tTESTQ   $1, CX
\tJZ      dotpairs
\tVMOVUPS (SI), Y2
\tVFMADD231PS (DX), Y2, Y0
\tADDQ    $32, SI
\tADDQ    $32, DX
dotpairs:
\tSHRQ    $1, CX
\tJZ      dotred
dotloop:
\tVMOVUPS (SI), Y2
\tVMOVUPS 32(SI), Y3
\tVFMADD231PS (DX), Y2, Y0
\tVFMADD231PS 32(DX), Y3, Y1
\tADDQ    $64, SI
\tADDQ    $64, DX
\tDECQ    CX
\tJNZ     dotloop
dotred:
\tVADDPS  Y1, Y0, Y0
{hreduce('VADDPS')}\tVZEROUPPER
\tMOVSS   X0, ret+24(FP)
\tRET

// func softmaxBwdF32AVX2(d, p *float32, n int, dot float32)
// d = p·(d − dot) for n floats, n a multiple of 8.
TEXT ·softmaxBwdF32AVX2(SB), NOSPLIT, $0-28
\tMOVQ d+0(FP), DI
\tMOVQ p+8(FP), SI
\tMOVQ n+16(FP), CX
\tVBROADCASTSS dot+24(FP), Y7
\tSHRQ    $3, CX
\tJZ      sbdone
sbloop:
\tVMOVUPS (DI), Y0
\tVSUBPS  Y7, Y0, Y0
\tVMULPS  (SI), Y0, Y0
\tVMOVUPS Y0, (DI)
\tADDQ    $32, DI
\tADDQ    $32, SI
\tDECQ    CX
\tJNZ     sbloop
\tVZEROUPPER
sbdone:
\tRET

"""

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "math_amd64.s"), "w") as f:
    f.write(HEAD + "\n" + "\n".join(data) + "\n" + BODY)
