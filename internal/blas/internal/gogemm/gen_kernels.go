//go:build ignore

// gen_kernels generates the amd64 SGEMM micro-kernels:
//
//	go run gen_kernels.go
//
// It writes sgemm_kern_amd64.s and sgemm_kern_amd64.go. Each kernel computes
// an mr×(nv·W) tile of C = alpha*A·B + beta*C from an A panel (k steps of mr
// contiguous floats, step stride `as` bytes) and a B panel (k steps of nv·W
// floats, step stride `bs` bytes). The last vector of every row of the tile is
// masked to `rem` lanes (1..W), both for C and (AVX-512 only) for B loads, so
// B may be read in place from an unpacked matrix. The "R" forms of each
// (AVX512R, AVX2R) read A in place from a row-major matrix instead of a
// panel: row i at a+i·as bytes, step p at +4p. A non-nil bias replaces
// beta: C = alpha*A·B + bias, the nv·W floats at bias added to every row
// (a Linear layer's bias, added as the kernel stores its tile).
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"os"
)

const (
	avx512MR = 6
	avx512NV = 4
	avx2MR   = 6
	avx2NV   = 2
)

type gen struct {
	buf bytes.Buffer
}

func (g *gen) p(format string, args ...any) {
	fmt.Fprintf(&g.buf, format, args...)
	g.buf.WriteByte('\n')
}

// args: k+0 a+8 as+16 b+24 bs+32 c+40 ldc+48 alpha+56 beta+60 rem+64 bias+72
const frame = "$0-80"

func kname(isa string, mr, nv int) string { return fmt.Sprintf("sgemmKern%s_%dx%d", isa, mr, nv) }

func (g *gen) prologue(name string) {
	g.p("// func %s(k int, a *float32, as int, b *float32, bs int, c *float32, ldc int, alpha, beta float32, rem int, bias *float32)", name)
	g.p("TEXT ·%s(SB), NOSPLIT, %s", name, frame)
}

// avx512 writes the AVX-512 kernel for an mr×(nv·16) tile. With rows, A
// is read in place from a row-major matrix (the "AVX512R" kernels), as
// avx2 does; without, from a packed panel or a transposed matrix.
func (g *gen) avx512(mr, nv int, rows bool) {
	isa := "AVX512"
	if rows {
		isa = "AVX512R"
	}
	name := kname(isa, mr, nv)
	// Register layout: accumulators Z0..Z(acc-1), B vectors from Zb, one or
	// two broadcast registers after them. The epilogue reuses Zb.. for
	// alpha, beta and a temporary.
	acc := mr * nv
	zb := acc
	bc0, bc1 := zb+nv, zb+nv+1
	if bc1 > 31 {
		bc1 = bc0
	}
	zal, zbe, ztmp := zb, zb+1, zb+2
	g.prologue(name)
	g.p("\tMOVQ rem+64(FP), CX")
	g.p("\tMOVL $1, R11")
	g.p("\tSHLL CX, R11")
	g.p("\tDECL R11")
	g.p("\tKMOVW R11, K1")
	g.p("\tMOVQ k+0(FP), CX")
	g.p("\tMOVQ a+8(FP), AX")
	g.p("\tMOVQ as+16(FP), R8")
	g.p("\tMOVQ b+24(FP), BX")
	g.p("\tMOVQ bs+32(FP), R9")
	g.p("\tMOVQ c+40(FP), DI")
	g.p("\tMOVQ ldc+48(FP), R10")
	// prefetch C
	g.p("\tMOVQ DI, R12")
	for i := 0; i < mr; i++ {
		for v := 0; v < nv; v++ {
			g.p("\tPREFETCHT0 %d(R12)", 64*v)
		}
		if i+1 < mr {
			g.p("\tADDQ R10, R12")
		}
	}
	for i := 0; i < mr*nv; i++ {
		g.p("\tVPXORD Z%d, Z%d, Z%d", i, i, i)
	}
	if rows && mr > 3 {
		g.p("\tLEAQ (AX)(R8*2), SI") // rows 3.. from SI
		g.p("\tADDQ R8, SI")
	}
	step := func(u int) {
		for v := 0; v < nv; v++ {
			if v == nv-1 {
				g.p("\tVMOVUPS.Z %d(BX), K1, Z%d", 64*v, zb+v)
			} else {
				g.p("\tVMOVUPS %d(BX), Z%d", 64*v, zb+v)
			}
		}
		for i := 0; i < mr; i++ {
			br := bc0
			if i%2 == 1 {
				br = bc1
			}
			g.p("\tVBROADCASTSS %s, Z%d", aOperand(rows, i, u), br)
			for v := 0; v < nv; v++ {
				g.p("\tVFMADD231PS Z%d, Z%d, Z%d", zb+v, br, i*nv+v)
			}
		}
		if !rows {
			g.p("\tADDQ R8, AX")
		}
		g.p("\tADDQ R9, BX")
	}
	g.p("\tMOVQ CX, R13")
	g.p("\tSHRQ $2, R13")
	g.p("\tJZ tail")
	g.p("loop4:")
	for u := 0; u < 4; u++ {
		step(u)
	}
	g.advanceRows(rows, mr, 4)
	g.p("\tDECQ R13")
	g.p("\tJNZ loop4")
	g.p("tail:")
	g.p("\tANDQ $3, CX")
	g.p("\tJZ done")
	g.p("loop1:")
	step(0)
	g.advanceRows(rows, mr, 1)
	g.p("\tDECQ CX")
	g.p("\tJNZ loop1")
	g.p("done:")
	g.p("\tVBROADCASTSS alpha+56(FP), Z%d", zal)
	g.p("\tMOVQ bias+72(FP), R12")
	g.p("\tTESTQ R12, R12")
	g.p("\tJNZ biasadd")
	g.p("\tMOVL beta+60(FP), R11")
	g.p("\tANDL $0x7fffffff, R11")
	g.p("\tJZ beta0")
	g.p("\tVBROADCASTSS beta+60(FP), Z%d", zbe)
	// The last vector of each row is masked to rem lanes (K1).
	g.storeTile(mr, nv, func(r, v int, last bool) {
		g.p("\tVMULPS Z%d, Z%d, Z%d", zal, r, r)
		if last {
			g.p("\tVMOVUPS.Z %d(DI), K1, Z%d", 64*v, ztmp)
		} else {
			g.p("\tVMOVUPS %d(DI), Z%d", 64*v, ztmp)
		}
		g.p("\tVFMADD231PS Z%d, Z%d, Z%d", ztmp, zbe, r)
		g.store512(r, v, last)
	})
	g.p("beta0:")
	g.storeTile(mr, nv, func(r, v int, last bool) {
		g.p("\tVMULPS Z%d, Z%d, Z%d", zal, r, r)
		g.store512(r, v, last)
	})
	// C = alpha·acc + bias, the same bias row (at R12) for every row:
	// the bits of a C filled with bias and beta = 1.
	g.p("biasadd:")
	g.storeTile(mr, nv, func(r, v int, last bool) {
		g.p("\tVMULPS Z%d, Z%d, Z%d", zal, r, r)
		if last {
			g.p("\tVMOVUPS.Z %d(R12), K1, Z%d", 64*v, ztmp)
			g.p("\tVADDPS Z%d, Z%d, Z%d", ztmp, r, r)
		} else {
			g.p("\tVADDPS %d(R12), Z%d, Z%d", 64*v, r, r)
		}
		g.store512(r, v, last)
	})
	g.p("")
}

// storeTile writes an epilogue: for each row i of the tile and vector v,
// vec(accumulator, v, whether v is the row's last), then DI on to the
// next row of C (stride R10); then it returns.
func (g *gen) storeTile(mr, nv int, vec func(r, v int, last bool)) {
	for i := 0; i < mr; i++ {
		for v := 0; v < nv; v++ {
			vec(i*nv+v, v, v == nv-1)
		}
		if i+1 < mr {
			g.p("\tADDQ R10, DI")
		}
	}
	g.p("\tVZEROUPPER")
	g.p("\tRET")
}

// store512 stores accumulator Zr as vector v of C's row at DI, the last
// one masked by K1.
func (g *gen) store512(r, v int, last bool) {
	if last {
		g.p("\tVMOVUPS Z%d, K1, %d(DI)", r, 64*v)
	} else {
		g.p("\tVMOVUPS Z%d, %d(DI)", r, 64*v)
	}
}

// store256 stores accumulator Yacc as vector v of C's row at DI, the last
// one masked by Y15.
func (g *gen) store256(acc, v int, last bool) {
	if last {
		g.p("\tVMASKMOVPS Y%d, Y15, %d(DI)", acc, 32*v)
	} else {
		g.p("\tVMOVUPS Y%d, %d(DI)", acc, 32*v)
	}
}

// aOperand is the memory operand of row i of step u of an unrolled block
// of A. With rows, A is row-major in place: rows 0..2 from AX and 3..5
// from SI (AX + 3·as), row stride as in R8, step u at +4u bytes. Without,
// A is a panel whose step holds the rows contiguously: row i at +4i.
func aOperand(rows bool, i, u int) string {
	if !rows {
		return fmt.Sprintf("%d(AX)", 4*i)
	}
	base := "AX"
	if i >= 3 {
		base, i = "SI", i-3
	}
	if i == 0 {
		return fmt.Sprintf("%d(%s)", 4*u, base)
	}
	return fmt.Sprintf("%d(%s)(R8*%d)", 4*u, base, i)
}

// advanceRows moves a row-major A on by steps (the panel forms advance
// per step instead).
func (g *gen) advanceRows(rows bool, mr, steps int) {
	if !rows {
		return
	}
	g.p("\tADDQ $%d, AX", 4*steps)
	if mr > 3 {
		g.p("\tADDQ $%d, SI", 4*steps)
	}
}

// avx2 kernels require B to be packed (zero padded to nv*8 floats per step):
// B loads are not masked. C accesses of the last vector use VMASKMOVPS.
// avx2 writes the AVX2 kernel for an mr×(nv·8) tile. With rows, A is
// read in place from a row-major matrix: row i of the tile at a+i*as
// bytes, step p at +4p (the "AVX2R" kernels); without, from a packed
// panel or a transposed matrix: step p at a+p*as, its mr rows contiguous.
func (g *gen) avx2(mr, nv int, rows bool) {
	isa := "AVX2"
	if rows {
		isa = "AVX2R"
	}
	name := kname(isa, mr, nv)
	g.prologue(name)
	g.p("\tMOVQ rem+64(FP), CX")
	g.p("\tSHLQ $2, CX")
	g.p("\tLEAQ sgemmMaskTab<>+32(SB), R11")
	g.p("\tSUBQ CX, R11")
	g.p("\tVMOVDQU (R11), Y15")
	g.p("\tMOVQ k+0(FP), CX")
	g.p("\tMOVQ a+8(FP), AX")
	g.p("\tMOVQ as+16(FP), R8")
	g.p("\tMOVQ b+24(FP), BX")
	g.p("\tMOVQ bs+32(FP), R9")
	g.p("\tMOVQ c+40(FP), DI")
	g.p("\tMOVQ ldc+48(FP), R10")
	g.p("\tMOVQ DI, R12")
	for i := 0; i < mr; i++ {
		g.p("\tPREFETCHT0 (R12)")
		if i+1 < mr {
			g.p("\tADDQ R10, R12")
		}
	}
	for i := 0; i < mr*nv; i++ {
		g.p("\tVXORPS Y%d, Y%d, Y%d", i, i, i)
	}
	if rows && mr > 3 {
		g.p("\tLEAQ (AX)(R8*2), SI") // rows 3.. from SI
		g.p("\tADDQ R8, SI")
	}
	step := func(u int) {
		for v := 0; v < nv; v++ {
			g.p("\tVMOVUPS %d(BX), Y%d", 32*v, 12+v)
		}
		for i := 0; i < mr; i++ {
			g.p("\tVBROADCASTSS %s, Y14", aOperand(rows, i, u))
			for v := 0; v < nv; v++ {
				g.p("\tVFMADD231PS Y%d, Y14, Y%d", 12+v, i*nv+v)
			}
		}
		if !rows {
			g.p("\tADDQ R8, AX")
		}
		g.p("\tADDQ R9, BX")
	}
	g.p("\tMOVQ CX, R13")
	g.p("\tSHRQ $2, R13")
	g.p("\tJZ tail")
	g.p("loop4:")
	for u := 0; u < 4; u++ {
		step(u)
	}
	g.advanceRows(rows, mr, 4)
	g.p("\tDECQ R13")
	g.p("\tJNZ loop4")
	g.p("tail:")
	g.p("\tANDQ $3, CX")
	g.p("\tJZ done")
	g.p("loop1:")
	step(0)
	g.advanceRows(rows, mr, 1)
	g.p("\tDECQ CX")
	g.p("\tJNZ loop1")
	g.p("done:")
	g.p("\tVBROADCASTSS alpha+56(FP), Y14")
	g.p("\tMOVQ bias+72(FP), R12")
	g.p("\tTESTQ R12, R12")
	g.p("\tJNZ biasadd")
	g.p("\tMOVL beta+60(FP), R11")
	g.p("\tANDL $0x7fffffff, R11")
	g.p("\tJZ beta0")
	g.p("\tVBROADCASTSS beta+60(FP), Y12")
	g.storeTile(mr, nv, func(acc, v int, last bool) {
		g.p("\tVMULPS Y14, Y%d, Y%d", acc, acc)
		if last {
			g.p("\tVMASKMOVPS %d(DI), Y15, Y13", 32*v)
		} else {
			g.p("\tVMOVUPS %d(DI), Y13", 32*v)
		}
		g.p("\tVFMADD231PS Y13, Y12, Y%d", acc)
		g.store256(acc, v, last)
	})
	g.p("beta0:")
	g.storeTile(mr, nv, func(acc, v int, last bool) {
		g.p("\tVMULPS Y14, Y%d, Y%d", acc, acc)
		g.store256(acc, v, last)
	})
	g.p("biasadd:") // as in avx512
	g.storeTile(mr, nv, func(acc, v int, last bool) {
		g.p("\tVMULPS Y14, Y%d, Y%d", acc, acc)
		if last {
			g.p("\tVMASKMOVPS %d(R12), Y15, Y13", 32*v)
			g.p("\tVADDPS Y13, Y%d, Y%d", acc, acc)
		} else {
			g.p("\tVADDPS %d(R12), Y%d, Y%d", 32*v, acc, acc)
		}
		g.store256(acc, v, last)
	})
	g.p("")
}

// transpose16 writes the transpose of a 16×16 block: dst row i (at
// dst+i*ds bytes) receives column i of the src rows (at src+r*ss bytes).
func (g *gen) transpose16() {
	g.p("// func transpose16AVX512(dst *float32, ds int, src *float32, ss int)")
	g.p("TEXT ·transpose16AVX512(SB), NOSPLIT, $0-32")
	g.p("\tMOVQ dst+0(FP), DI")
	g.p("\tMOVQ ds+8(FP), R8")
	g.p("\tMOVQ src+16(FP), SI")
	g.p("\tMOVQ ss+24(FP), R9")
	for i := 0; i < 16; i++ {
		g.p("\tVMOVUPS (SI), Z%d", i)
		if i < 15 {
			g.p("\tADDQ R9, SI")
		}
	}
	r := func(i int) int { return i }
	t := func(i int) int { return 16 + i }
	// Stage 1: interleave 32-bit elements of row pairs.
	for i := 0; i < 8; i++ {
		g.p("\tVUNPCKLPS Z%d, Z%d, Z%d", r(2*i+1), r(2*i), t(2*i))
		g.p("\tVUNPCKHPS Z%d, Z%d, Z%d", r(2*i+1), r(2*i), t(2*i+1))
	}
	// Stage 2: interleave 64-bit pairs.
	for i := 0; i < 4; i++ {
		b := 4 * i
		g.p("\tVUNPCKLPD Z%d, Z%d, Z%d", t(b+2), t(b), r(b))
		g.p("\tVUNPCKHPD Z%d, Z%d, Z%d", t(b+2), t(b), r(b+1))
		g.p("\tVUNPCKLPD Z%d, Z%d, Z%d", t(b+3), t(b+1), r(b+2))
		g.p("\tVUNPCKHPD Z%d, Z%d, Z%d", t(b+3), t(b+1), r(b+3))
	}
	// Stage 3: 128-bit lanes.
	for h := 0; h < 2; h++ {
		b := 8 * h
		for i := 0; i < 4; i++ {
			g.p("\tVSHUFF32X4 $0x88, Z%d, Z%d, Z%d", r(b+4+i), r(b+i), t(b+i))
			g.p("\tVSHUFF32X4 $0xdd, Z%d, Z%d, Z%d", r(b+4+i), r(b+i), t(b+4+i))
		}
	}
	// Stage 4.
	for i := 0; i < 8; i++ {
		g.p("\tVSHUFF32X4 $0x88, Z%d, Z%d, Z%d", t(8+i), t(i), r(i))
		g.p("\tVSHUFF32X4 $0xdd, Z%d, Z%d, Z%d", t(8+i), t(i), r(8+i))
	}
	for i := 0; i < 16; i++ {
		g.p("\tVMOVUPS Z%d, (DI)", r(i))
		if i < 15 {
			g.p("\tADDQ R8, DI")
		}
	}
	g.p("\tVZEROUPPER")
	g.p("\tRET")
	g.p("")
}

func main() {
	var s gen
	s.p("// Code generated by gen_kernels.go; DO NOT EDIT.")
	s.p("")
	s.p("//go:build amd64")
	s.p("")
	s.p("#include \"textflag.h\"")
	s.p("")
	s.p("// 8 lanes of all-ones followed by 8 lanes of zeros: a mask for r lanes")
	s.p("// is the 32 bytes starting at offset 32-4r.")
	for i := 0; i < 8; i++ {
		s.p("DATA sgemmMaskTab<>+%d(SB)/4, $0xffffffff", 4*i)
	}
	for i := 8; i < 16; i++ {
		s.p("DATA sgemmMaskTab<>+%d(SB)/4, $0", 4*i)
	}
	s.p("GLOBL sgemmMaskTab<>(SB), RODATA|NOPTR, $64")
	s.p("")
	for _, rows := range []bool{false, true} {
		for mr := 1; mr <= avx512MR; mr++ {
			for nv := 1; nv <= avx512NV; nv++ {
				s.avx512(mr, nv, rows)
			}
		}
	}
	for _, rows := range []bool{false, true} {
		for mr := 1; mr <= avx2MR; mr++ {
			for nv := 1; nv <= avx2NV; nv++ {
				s.avx2(mr, nv, rows)
			}
		}
	}
	s.transpose16()

	var d gen
	d.p("// Code generated by gen_kernels.go; DO NOT EDIT.")
	d.p("")
	d.p("//go:build amd64")
	d.p("")
	d.p("package gogemm")
	d.p("")
	decl := func(isa string, mrMax, nvMax int) {
		for mr := 1; mr <= mrMax; mr++ {
			for nv := 1; nv <= nvMax; nv++ {
				d.p("//go:noescape")
				d.p("func %s(k int, a *float32, as int, b *float32, bs int, c *float32, ldc int, alpha, beta float32, rem int, bias *float32)", kname(isa, mr, nv))
				d.p("")
			}
		}
		d.p("var sgemmKernels%s = [%d][%d]asmKernel{", isa, mrMax, nvMax)
		for mr := 1; mr <= mrMax; mr++ {
			d.buf.WriteString("\t{")
			for nv := 1; nv <= nvMax; nv++ {
				if nv > 1 {
					d.buf.WriteString(", ")
				}
				d.buf.WriteString(kname(isa, mr, nv))
			}
			d.buf.WriteString("},\n")
		}
		d.p("}")
		d.p("")
		d.p("const (")
		d.p("\tmr%s = %d", isa, mrMax)
		d.p("\tnv%s = %d", isa, nvMax)
		d.p(")")
		d.p("")
	}
	d.p("//go:noescape")
	d.p("func transpose16AVX512(dst *float32, ds int, src *float32, ss int)")
	d.p("")
	decl("AVX512", avx512MR, avx512NV)
	decl("AVX512R", avx512MR, avx512NV)
	decl("AVX2", avx2MR, avx2NV)
	decl("AVX2R", avx2MR, avx2NV)

	if err := os.WriteFile("sgemm_kern_amd64.s", s.buf.Bytes(), 0o644); err != nil {
		panic(err)
	}
	src, err := format.Source(d.buf.Bytes())
	if err != nil {
		panic(err)
	}
	if err := os.WriteFile("sgemm_kern_amd64.go", src, 0o644); err != nil {
		panic(err)
	}
}
