// Package gogemm is the pure-Go GEMM behind blas.PureGo: Goto/BLIS-style
// packing and cache blocking around register-blocked micro-kernels written
// in Go assembly on amd64 (AVX-512 or AVX2+FMA, chosen at run time with
// CPUID), with a portable Go kernel elsewhere.
//
// It lives in its own package because package blas uses cgo in the openblas
// build, and cgo packages cannot contain Go assembly.
package gogemm

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

//go:generate go run gen_kernels.go

// kernelSet describes one micro-kernel family and its blocking parameters.
//
// A kernel call computes an mr×(nv·w) tile of C (the last vector of each row
// restricted to rem lanes, 1 ≤ rem ≤ w) as C = alpha*Ã·B̃ + beta*C where, for
// step p < k, Ã contributes a[p*as : p*as+mr] and B̃ contributes
// b[p*bs : p*bs+nv*w]. beta == 0 does not read C. A non-nil bias (the
// tile's columns of a bias row) replaces beta: C = alpha*Ã·B̃ + bias in
// every row, C not read.
type kernelSet struct {
	name string
	mr   int // max rows of a tile
	w    int // lanes per vector
	nv   int // max vectors per tile row
	// maskedB: the kernel reads only the first (nv-1)*w+rem floats of each B
	// step, so B may be used in place. Otherwise B must be packed and padded
	// to nv*w floats per step.
	maskedB bool
	kc      int // k block
	mc      int // m block (multiple of mr)
	nc      int // n block (multiple of nv*w)
	kern    func(mr, nv, rem, k int, a []float32, as int, b []float32, bs int, c []float32, ldc int, alpha, beta float32, bias []float32)
	// kernRows, if set, is kern reading A in place from a row-major
	// matrix: row i of the tile at a[i*as:], step p at a[i*as+p].
	kernRows func(mr, nv, rem, k int, a []float32, as int, b []float32, bs int, c []float32, ldc int, alpha, beta float32, bias []float32)
	// rowsMaxN is the widest product whose row-major A kernRows reads in
	// place; wider ones pack A (BenchmarkRowsA measures the two).
	rowsMaxN int
	// tr, if set, transposes a trN×trN block: dst[i*ds+j] = src[j*ss+i].
	tr  func(dst []float32, ds int, src []float32, ss int)
	trN int
}

// Impl is the pure-Go GEMM with one kernel set. It satisfies blas.Impl.
type Impl struct {
	ks *kernelSet
}

// Best returns the implementation with the best kernel set this CPU
// supports.
func Best() Impl { return Impl{availableKernels()[0]} }

// Variants returns one implementation per kernel set usable on this CPU,
// best first.
func Variants() []Impl {
	var out []Impl
	for _, ks := range availableKernels() {
		out = append(out, Impl{ks})
	}
	return out
}

// Name says which kernel set is used ("go-asm-avx512", "go-asm-avx2",
// "go-generic").
func (g Impl) Name() string { return g.ks.name }

// Dgemm computes C = alpha*op(A)*op(B) + beta*C in float64.
func (g Impl) Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	dgemmGo(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Sgemm computes C = alpha*op(A)*op(B) + beta*C in float32.
func (g Impl) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	Check("Sgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		ScaleS(m, n, beta, c, ldc)
		return
	}
	if m*n*k <= smallGemm {
		sgemmSmall(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, nil, c, ldc)
		return
	}
	sgemmBlocked(g.ks, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, nil, c, ldc)
}

// SgemmBias computes C = alpha*op(A)*op(B) + bias in float32, bias (n
// floats) added to every row of C; C is written and not read. Its bits are
// those of C filled with bias rows and Sgemm with beta = 1, one pass over
// C fewer: the kernels add the bias as they store their tiles.
func (g Impl) SgemmBias(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, bias []float32, c []float32, ldc int) {
	Check("SgemmBias", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return
	}
	if len(bias) < n {
		panic(fmt.Sprintf("blas.SgemmBias: bias of %d floats for n=%d", len(bias), n))
	}
	bias = bias[:n:n]
	if k == 0 || alpha == 0 {
		for i := range m {
			copy(c[i*ldc:i*ldc+n], bias)
		}
		return
	}
	if m*n*k <= smallGemm {
		sgemmSmall(transA, transB, m, n, k, alpha, a, lda, b, ldb, 1, bias, c, ldc)
		return
	}
	sgemmBlocked(g.ks, transA, transB, m, n, k, alpha, a, lda, b, ldb, 1, bias, c, ldc)
}

// smallGemm: products with m*n*k at most this use a plain loop.
const smallGemm = 512

// parallelGemm: products with m*n*k at least this (128 MFLOP, some
// 0.6 ms on one core) spread their tiles over Threads() goroutines.
// Measured on a 2-vCPU Zen guest (best of 5, two goroutines against
// one): 2^23-2^24 products 5-20% slower (the goroutines' wake-ups and
// joins, one a k block), 2^26 1.2×, 2^27 1.1-1.5×, 2^30 1.45×.
var parallelGemm = 1 << 26 // a variable: tests lower it

// threads is SetThreads' setting: 0 for the default.
var threads atomic.Int32

// SetThreads sets how many goroutines one large product may use: n ≤ 0
// for the default (GOMAXPROCS, at most the CPUs the process may run on),
// 1 for one.
func SetThreads(n int) { threads.Store(int32(max(n, 0))) }

// Threads is how many goroutines one large product uses.
func Threads() int {
	if n := int(threads.Load()); n > 0 {
		return n
	}
	// No more than the CPUs the process may run on: a process given more
	// Ps than CPUs (so that its communication runs beside its compute)
	// would only switch between a product's goroutines.
	return min(runtime.GOMAXPROCS(0), runtime.NumCPU())
}

// parallelPanels runs fn over [0, n) cut into t contiguous runs, one
// goroutine a run (the caller's the first), and returns when all have.
func parallelPanels(t, n int, fn func(lo, hi int)) {
	var wg sync.WaitGroup
	for i := 1; i < t; i++ {
		wg.Go(func() { fn(i*n/t, (i+1)*n/t) })
	}
	fn(0, n/t)
	wg.Wait()
}

// Check panics on invalid sizes, leading dimensions or short slices (fn names
// the caller in the message).
func Check(fn string, tA, tB bool, m, n, k, la, lda, lb, ldb, lc, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("blas.%s: negative dimension m=%d n=%d k=%d", fn, m, n, k))
	}
	ar, ac := m, k
	if tA {
		ar, ac = k, m
	}
	br, bc := k, n
	if tB {
		br, bc = n, k
	}
	if lda < max(1, ac) || ldb < max(1, bc) || ldc < max(1, n) {
		panic(fmt.Sprintf("blas.%s: bad leading dimension lda=%d ldb=%d ldc=%d for m=%d n=%d k=%d transA=%v transB=%v", fn, lda, ldb, ldc, m, n, k, tA, tB))
	}
	need := func(rows, cols, ld int) int {
		if rows == 0 || cols == 0 {
			return 0
		}
		return (rows-1)*ld + cols
	}
	if la < need(ar, ac, lda) || lb < need(br, bc, ldb) || lc < need(m, n, ldc) {
		panic(fmt.Sprintf("blas.%s: slice too short: len(a)=%d len(b)=%d len(c)=%d for m=%d n=%d k=%d lda=%d ldb=%d ldc=%d transA=%v transB=%v", fn, la, lb, lc, m, n, k, lda, ldb, ldc, tA, tB))
	}
}

// ScaleS sets C = beta*C (C = 0 without reading it when beta == 0).
func ScaleS(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// sgemmSmall is a direct loop for tiny products. A non-nil bias is C's
// value before the product (beta is then 1).
func sgemmSmall(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, bias []float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			for p := 0; p < k; p++ {
				var x, y float32
				if tA {
					x = a[p*lda+i]
				} else {
					x = a[i*lda+p]
				}
				if tB {
					y = b[j*ldb+p]
				} else {
					y = b[p*ldb+j]
				}
				s += x * y
			}
			s *= alpha
			switch {
			case bias != nil:
				s += bias[j]
			case beta != 0:
				s += beta * c[i*ldc+j]
			}
			c[i*ldc+j] = s
		}
	}
}

// Packing buffers are pooled (one pool for A blocks, one for B blocks) so
// concurrent callers never share one.
var aPool, bPool sync.Pool

func getBuf(pool *sync.Pool, n int) *[]float32 {
	if p, ok := pool.Get().(*[]float32); ok {
		if cap(*p) >= n {
			*p = (*p)[:n]
			return p
		}
	}
	s := make([]float32, n, n+n/4)
	return &s
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// sgemmBlocked is C = alpha*op(A)*op(B) + beta*C, or with a non-nil bias
// C = alpha*op(A)*op(B) + bias (the first k block stores the bias with
// its products; the later ones add to C).
func sgemmBlocked(ks *kernelSet, tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, bias []float32, c []float32, ldc int) {
	MR, W, NV := ks.mr, ks.w, ks.nv
	NR := W * NV
	// Split k evenly into blocks no larger than ks.kc.
	kc := ceilDiv(k, ceilDiv(k, ks.kc))
	mc := min(ks.mc, m)
	if m > ks.mc {
		// Split m evenly, in multiples of MR.
		mc = ceilDiv(ceilDiv(m, ceilDiv(m, ks.mc)), MR) * MR
	}
	nc := min(ks.nc, n)

	// Pack B unless it can be read in place and is reused little.
	packB := tB || !ks.maskedB || m > 64*MR
	// A is packed unless it is reused little: stored transposed (its
	// columns are contiguous runs of mr floats) with n ≤ 2·NR, or stored
	// by rows with n ≤ ks.rowsMaxN and a kernel that reads rows in place.
	// Packing costs a pass over the block, which pays only when the block
	// meets many tiles of B.
	rowsA := !tA && ks.kernRows != nil && n <= ks.rowsMaxN
	packA := (tA && n > 2*NR) || (!tA && !rowsA)

	var ap, bp []float32
	if packA {
		buf := getBuf(&aPool, mc*kc)
		defer aPool.Put(buf)
		ap = *buf
	}
	if packB {
		buf := getBuf(&bPool, kc*ceilDiv(nc, W)*W)
		defer bPool.Put(buf)
		bp = *buf
	}

	// block computes the tiles of the ic block (mcur rows) in panels
	// [jr0, jr1) (in columns, multiples of NR) for the k block at pc,
	// packing A into ap first when packA.
	block := func(ap, bp []float32, jc, ncur, pc, kcur int, be float32, bi []float32, ic, mcur, jr0, jr1 int) {
		if packA {
			packABlock(ap, tA, a, lda, ic, pc, mcur, kcur, MR)
		}
		for jr := jr0; jr < jr1; jr += NR {
			w := min(NR, ncur-jr)
			nv := ceilDiv(w, W)
			rem := w - (nv-1)*W
			var tb []float32 // the tile's bias columns
			if bi != nil {
				tb = bi[jc+jr : jc+jr+w]
			}
			var bs []float32
			var bst int
			if packB {
				bst = nv * W
				bs = bp[jr*kcur : jr*kcur+kcur*bst]
			} else {
				bst = ldb
				bs = b[pc*ldb+jc+jr:]
				bs = bs[:(kcur-1)*ldb+w]
			}
			for ir := 0; ir < mcur; ir += MR {
				mr := min(MR, mcur-ir)
				var as []float32
				var ast int
				cs := c[(ic+ir)*ldc+jc+jr:]
				cs = cs[:(mr-1)*ldc+w]
				switch {
				case packA:
					ast = mr
					as = ap[ir*kcur : ir*kcur+kcur*mr]
				case rowsA:
					as = a[(ic+ir)*lda+pc:]
					as = as[:(mr-1)*lda+kcur]
					ks.kernRows(mr, nv, rem, kcur, as, lda, bs, bst, cs, ldc, alpha, be, tb)
					continue
				default:
					ast = lda
					as = a[pc*lda+ic+ir:]
					as = as[:(kcur-1)*lda+mr]
				}
				ks.kern(mr, nv, rem, kcur, as, ast, bs, bst, cs, ldc, alpha, be, tb)
			}
		}
	}

	threads := 1
	if m*n*k >= parallelGemm {
		threads = Threads()
	}
	for jc := 0; jc < n; jc += nc {
		ncur := min(nc, n-jc)
		for pc := 0; pc < k; pc += kc {
			kcur := min(kc, k-pc)
			be, bi := beta, bias
			if pc > 0 {
				be, bi = 1, nil
			}
			if packB {
				packBBlock(bp, tB, b, ldb, pc, jc, kcur, ncur, W, NR, ks.tr, ks.trN)
			}
			// The tiles, panel by panel: (ic block, NR columns).
			nIC, nJR := ceilDiv(m, mc), ceilDiv(ncur, NR)
			t := min(threads, nIC*nJR)
			if t <= 1 {
				for ic := 0; ic < m; ic += mc {
					block(ap, bp, jc, ncur, pc, kcur, be, bi, ic, min(mc, m-ic), 0, ncur)
				}
				continue
			}
			// Across t goroutines, each a contiguous run of the panels in
			// (ic, jr) order, packing its own copy of A where its run
			// enters an ic block. Every tile is the same kernel call on
			// the same data as in one goroutine, so the bits are too;
			// the k blocks stay in order (one join per block).
			parallelPanels(t, nIC*nJR, func(lo, hi int) {
				var myA []float32
				if packA {
					buf := getBuf(&aPool, mc*kc)
					defer aPool.Put(buf)
					myA = *buf
				}
				for q := lo; q < hi; {
					i := q / nJR
					last := min(hi, (i+1)*nJR) // this ic block's panels in the run
					ic := i * mc
					block(myA, bp, jc, ncur, pc, kcur, be, bi, ic, min(mc, m-ic), (q-i*nJR)*NR, min(ncur, (last-i*nJR)*NR))
					q = last
				}
			})
		}
	}
}

// packABlock packs rows [ic, ic+mcur) and columns [pc, pc+kcur) of op(A) into
// dst as consecutive panels of MR rows (the last one possibly shorter). Panel
// q starts at q*MR*kcur and stores, for each step p, its mr row values.
func packABlock(dst []float32, tA bool, a []float32, lda, ic, pc, mcur, kcur, MR int) {
	for ir := 0; ir < mcur; ir += MR {
		mr := min(MR, mcur-ir)
		d := dst[ir*kcur : ir*kcur+mr*kcur]
		row := ic + ir
		if tA {
			// op(A)[i][p] = a[p*lda+i]: each step is a contiguous run.
			if mr == 6 {
				for p := 0; p < kcur; p++ {
					src := a[(pc+p)*lda+row:][:6:6]
					e := d[p*6 : p*6+6 : p*6+6]
					e[0], e[1], e[2], e[3], e[4], e[5] = src[0], src[1], src[2], src[3], src[4], src[5]
				}
				continue
			}
			for p := 0; p < kcur; p++ {
				src := a[(pc+p)*lda+row:][:mr]
				copy(d[p*mr:p*mr+mr], src)
			}
			continue
		}
		switch mr {
		case 6:
			r0 := a[(row+0)*lda+pc:][:kcur]
			r1 := a[(row+1)*lda+pc:][:kcur]
			r2 := a[(row+2)*lda+pc:][:kcur]
			r3 := a[(row+3)*lda+pc:][:kcur]
			r4 := a[(row+4)*lda+pc:][:kcur]
			r5 := a[(row+5)*lda+pc:][:kcur]
			for p := range r0 {
				e := d[p*6 : p*6+6 : p*6+6]
				e[0] = r0[p]
				e[1] = r1[p]
				e[2] = r2[p]
				e[3] = r3[p]
				e[4] = r4[p]
				e[5] = r5[p]
			}
		case 4:
			r0 := a[(row+0)*lda+pc:][:kcur]
			r1 := a[(row+1)*lda+pc:][:kcur]
			r2 := a[(row+2)*lda+pc:][:kcur]
			r3 := a[(row+3)*lda+pc:][:kcur]
			for p := range r0 {
				e := d[p*4 : p*4+4 : p*4+4]
				e[0] = r0[p]
				e[1] = r1[p]
				e[2] = r2[p]
				e[3] = r3[p]
			}
		default:
			for i := 0; i < mr; i++ {
				r := a[(row+i)*lda+pc:][:kcur]
				for p, v := range r {
					d[p*mr+i] = v
				}
			}
		}
	}
}

// packBBlock packs rows [pc, pc+kcur) and columns [jc, jc+ncur) of op(B) into
// dst as consecutive panels of NR columns. Panel q starts at q*NR*kcur and
// stores, for each step p, its columns padded with zeros to a multiple of W.
func packBBlock(dst []float32, tB bool, b []float32, ldb, pc, jc, kcur, ncur, W, NR int, tr func(dst []float32, ds int, src []float32, ss int), trN int) {
	for jr := 0; jr < ncur; jr += NR {
		w := min(NR, ncur-jr)
		st := ceilDiv(w, W) * W
		d := dst[jr*kcur : jr*kcur+kcur*st]
		col := jc + jr
		if !tB && st == 16 && w == 16 {
			// A whole AVX2 panel: a 64-byte move per step, which copy
			// would make a call to memmove.
			packB16(d, b[pc*ldb+col:], ldb, kcur)
			continue
		}
		if !tB {
			for p := 0; p < kcur; p++ {
				e := d[p*st : p*st+st]
				copy(e, b[(pc+p)*ldb+col:][:w])
				clear(e[w:])
			}
			continue
		}
		// op(B)[p][j] = b[j*ldb+p].
		// Whole trN×trN blocks by the kernel set's transpose, the edges
		// in Go.
		kt, wt := 0, 0
		if tr != nil {
			kt, wt = kcur/trN*trN, w/trN*trN
			for p0 := 0; p0 < kt; p0 += trN {
				for j := 0; j < wt; j += trN {
					tr(d[p0*st+j:], st, b[(col+j)*ldb+pc+p0:], ldb)
				}
			}
		}
		packBTGo(d, st, b, ldb, col, pc, 0, kcur, wt, w)
		packBTGo(d, st, b, ldb, col, pc, kt, kcur, 0, wt)
		if w < st {
			for p := 0; p < kcur; p++ {
				clear(d[p*st+w : p*st+st])
			}
		}
	}
}

// packBTGo packs steps [p0, p1) and columns [j0, j1) of a transposed B
// panel (op(B)[p][j] = b[j*ldb+p], column offset col, step offset pc) into d
// with row stride st.
func packBTGo(d []float32, st int, b []float32, ldb, col, pc, p0, p1, j0, j1 int) {
	if p0 >= p1 || j0 >= j1 {
		return
	}
	// Blocks of 16 steps keep the destination rows in L1.
	for q0 := p0; q0 < p1; q0 += 16 {
		pn := min(16, p1-q0)
		j := j0
		for ; j+4 <= j1; j += 4 {
			s0 := b[(col+j+0)*ldb+pc+q0:][:pn]
			s1 := b[(col+j+1)*ldb+pc+q0:][:pn]
			s2 := b[(col+j+2)*ldb+pc+q0:][:pn]
			s3 := b[(col+j+3)*ldb+pc+q0:][:pn]
			for p := range s0 {
				o := (q0+p)*st + j
				e := d[o : o+4 : o+4]
				e[0] = s0[p]
				e[1] = s1[p]
				e[2] = s2[p]
				e[3] = s3[p]
			}
		}
		for ; j < j1; j++ {
			s := b[(col+j)*ldb+pc+q0:][:pn]
			for p, v := range s {
				d[(q0+p)*st+j] = v
			}
		}
	}
}

// kernelGeneric is the portable micro-kernel: 4×4 tiles in plain Go.
var kernelGeneric = &kernelSet{
	name:    "go-generic",
	mr:      4,
	w:       4,
	nv:      1,
	maskedB: true,
	kc:      256,
	mc:      4 * 64,
	nc:      4 * 512,
	kern:    genericKernel,
}

func genericKernel(mr, nv, rem, k int, a []float32, as int, b []float32, bs int, c []float32, ldc int, alpha, beta float32, bias []float32) {
	nr := (nv-1)*4 + rem
	if bias != nil {
		// C = bias, then the product added with beta 1: the same bits.
		for i := 0; i < mr; i++ {
			copy(c[i*ldc:i*ldc+nr], bias[:nr])
		}
		beta = 1
	}
	if mr == 4 && nr == 4 {
		var c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33 float32
		for p := 0; p < k; p++ {
			ap := a[p*as : p*as+4 : p*as+4]
			bp := b[p*bs : p*bs+4 : p*bs+4]
			a0, a1, a2, a3 := ap[0], ap[1], ap[2], ap[3]
			b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
			c00 += a0 * b0
			c01 += a0 * b1
			c02 += a0 * b2
			c03 += a0 * b3
			c10 += a1 * b0
			c11 += a1 * b1
			c12 += a1 * b2
			c13 += a1 * b3
			c20 += a2 * b0
			c21 += a2 * b1
			c22 += a2 * b2
			c23 += a2 * b3
			c30 += a3 * b0
			c31 += a3 * b1
			c32 += a3 * b2
			c33 += a3 * b3
		}
		storeRow4(c[0*ldc:0*ldc+4], alpha, beta, c00, c01, c02, c03)
		storeRow4(c[1*ldc:1*ldc+4], alpha, beta, c10, c11, c12, c13)
		storeRow4(c[2*ldc:2*ldc+4], alpha, beta, c20, c21, c22, c23)
		storeRow4(c[3*ldc:3*ldc+4], alpha, beta, c30, c31, c32, c33)
		return
	}
	var acc [4][4]float32
	for p := 0; p < k; p++ {
		ap := a[p*as : p*as+mr]
		bp := b[p*bs : p*bs+nr]
		for i, x := range ap {
			row := &acc[i]
			for j, y := range bp {
				row[j] += x * y
			}
		}
	}
	for i := 0; i < mr; i++ {
		cr := c[i*ldc : i*ldc+nr]
		for j := range cr {
			v := alpha * acc[i][j]
			if beta != 0 {
				v += beta * cr[j]
			}
			cr[j] = v
		}
	}
}

func storeRow4(c []float32, alpha, beta float32, x0, x1, x2, x3 float32) {
	c = c[:4:4]
	if beta == 0 {
		c[0], c[1], c[2], c[3] = alpha*x0, alpha*x1, alpha*x2, alpha*x3
		return
	}
	c[0] = alpha*x0 + beta*c[0]
	c[1] = alpha*x1 + beta*c[1]
	c[2] = alpha*x2 + beta*c[2]
	c[3] = alpha*x3 + beta*c[3]
}
