package simd

import "fmt"

// Direct convolution. A stride-1 convolution of an image whose C planes
// lie one after another, each H×W with its rows W apart (padding already
// written in), is a product whose second operand need not be built: tap k
// = (c, ki, kj) of the kernel reads the image shifted by offs[k] = c·H·W +
// ki·W + kj, and output position p (of a grid as wide as the image, whose
// last columns are garbage to drop) is
//
//	out[o][p] = Σ_k w[o][k] · x[offs[k] + p].
//
// ConvRows computes that for a few output channels at a time and ConvDW
// the matching weight gradient Σ_p g[o][p] · x[offs[k] + p]; with the
// kernel flipped, ConvRows is the input gradient too. No patch matrix
// (im2col) is written, packed or read.

// Taps are the offsets of a convolution's taps into its input, with
// bounds on them that ConvRows and ConvDW check their reads against once
// per call. A Taps holds its own copy of the offsets, so the bounds stay
// true; Slice keeps the whole set's bounds, which hold for any part.
type Taps struct {
	offs   []int
	lo, hi int
}

// NewTaps returns the taps at offs (copied).
func NewTaps(offs []int) Taps {
	t := Taps{offs: append([]int(nil), offs...)}
	if len(offs) > 0 {
		t.lo, t.hi = offs[0], offs[0]
		for _, o := range offs[1:] {
			t.lo, t.hi = min(t.lo, o), max(t.hi, o)
		}
	}
	return t
}

// Len is the number of taps.
func (t Taps) Len() int { return len(t.offs) }

// Slice returns the taps [i, j).
func (t Taps) Slice(i, j int) Taps { return Taps{t.offs[i:j:j], t.lo, t.hi} }

// ConvRows sets out[i*ldo+p] = (Σ_k w[k*r+i] · x[offs[k]+p]) + bias[i]
// for the r ≤ 6 rows i < r and the positions p < n, offs being the taps'
// offsets (w is K×r: the r rows' weights for each tap k < K =
// taps.Len(); a nil bias is zeros). The sums may be taken in any order,
// with fused multiply-adds; the bias is added to the finished sum.
func ConvRows[T Float](out []T, ldo int, x []T, taps Taps, w, bias []T, r, n int) {
	ConvRowBlocks(out, ldo, 0, x, 0, taps, w, bias, r, n, 1)
}

// ConvRowBlocks is ConvRows blocks times, block b writing out[b*ostep:]
// from x[b*xstep:], in order (so a block may overwrite what the one
// before wrote past its positions): a convolution's output rows in one
// call.
func ConvRowBlocks[T Float](out []T, ldo, ostep int, x []T, xstep int, taps Taps, w, bias []T, r, n, blocks int) {
	if blocks < 0 || ostep < 0 || xstep < 0 {
		panic(fmt.Sprintf("simd: ConvRowBlocks of %d blocks, steps %d and %d", blocks, ostep, xstep))
	}
	if blocks == 0 {
		return
	}
	checkConvRows(len(out)-(blocks-1)*ostep, ldo, len(x)-(blocks-1)*xstep, taps, len(w), r, n)
	if bias != nil && len(bias) < r {
		panic(fmt.Sprintf("simd: ConvRows of %d rows with %d biases", r, len(bias)))
	}
	if r == 0 || n == 0 {
		return
	}
	if o32, ok := any(out).([]float32); ok && convRowsF32(o32, ldo, ostep, any(x).([]float32), xstep, taps.offs, any(w).([]float32), any(bias).([]float32), r, n, blocks) {
		return
	}
	for b := range blocks {
		convRowsGo(out[b*ostep:], ldo, x[b*xstep:], taps.offs, w, bias, r, n)
	}
}

// Float are the element types of the generic kernels.
type Float interface{ ~float32 | ~float64 }

func convRowsGo[T Float](out []T, ldo int, x []T, offs []int, w, bias []T, r, n int) {
	for i := range r {
		o := out[i*ldo : i*ldo+n]
		clear(o)
		for k, off := range offs {
			wv := w[k*r+i]
			xs := x[off : off+n]
			for p := range o {
				o[p] += wv * xs[p]
			}
		}
		if bias != nil {
			for p := range o {
				o[p] += bias[i]
			}
		}
	}
}

func checkConvRows(nout, ldo, nx int, taps Taps, nw, r, n int) {
	if r < 0 || r > 6 || n < 0 || nw < taps.Len()*r || r > 1 && ldo < n {
		panic(fmt.Sprintf("simd: ConvRows of %d rows of %d (ld %d) with %d weights for %d taps", r, n, ldo, nw, taps.Len()))
	}
	if r == 0 || n == 0 {
		return
	}
	if (r-1)*ldo+n > nout {
		panic(fmt.Sprintf("simd: ConvRows of %d rows of %d (ld %d) into %d elements", r, n, ldo, nout))
	}
	if taps.Len() > 0 && (taps.lo < 0 || taps.hi+n > nx) {
		panic(fmt.Sprintf("simd: ConvRows reads [%d, %d) of %d elements", taps.lo, taps.hi+n, nx))
	}
}

// ConvDW adds to dw[i*ldw+j], for the ro ≤ 4 channels i < ro and the
// rk = taps.Len() ≤ 4 taps j < rk (ro·rk ≤ 12), the sum over the images
// m < nimg and the positions p < n of g[m*gimg+i*ldg+p] ·
// x[m*ximg+offs[j]+p]. The sums may be taken in any order, with fused
// multiply-adds.
func ConvDW[T Float](dw []T, ldw int, g []T, ldg, gimg int, x []T, ximg int, taps Taps, ro, nimg, n int) {
	offs := taps.offs
	rk := len(offs)
	if ro < 0 || ro > 4 || rk > 4 || ro*rk > 12 || nimg < 0 || n < 0 {
		panic(fmt.Sprintf("simd: ConvDW tile of %d×%d over %d images of %d", ro, rk, nimg, n))
	}
	if ro == 0 || rk == 0 || nimg == 0 || n == 0 {
		return
	}
	if (ro-1)*ldw+rk > len(dw) || (nimg-1)*gimg+(ro-1)*ldg+n > len(g) {
		panic(fmt.Sprintf("simd: ConvDW tile of %d×%d (ld %d) into %d elements from %d (ld %d, image %d) of %d", ro, rk, ldw, len(dw), n, ldg, gimg, len(g)))
	}
	if taps.lo < 0 || (nimg-1)*ximg+taps.hi+n > len(x) {
		panic(fmt.Sprintf("simd: ConvDW reads [%d, %d) of %d elements", taps.lo, (nimg-1)*ximg+taps.hi+n, len(x)))
	}
	if d32, ok := any(dw).([]float32); ok && convDWF32(d32, ldw, any(g).([]float32), ldg, gimg, any(x).([]float32), ximg, offs, ro, nimg, n) {
		return
	}
	convDWGo(dw, ldw, g, ldg, gimg, x, ximg, offs, ro, nimg, n)
}

func convDWGo[T Float](dw []T, ldw int, g []T, ldg, gimg int, x []T, ximg int, offs []int, ro, nimg, n int) {
	for i := range ro {
		for j, off := range offs {
			var s T
			for m := range nimg {
				gs := g[m*gimg+i*ldg : m*gimg+i*ldg+n]
				xs := x[m*ximg+off : m*ximg+off+n]
				for p := range gs {
					s += gs[p] * xs[p]
				}
			}
			dw[i*ldw+j] += s
		}
	}
}

// MaxPool2x2F32 takes the maxima of the 2×2 windows, stride 2, of the
// first 2·rows rows of the plane x (rows w wide): out[i*ow+j] is the
// largest of x[2i·w+2j], x[2i·w+2j+1], x[(2i+1)·w+2j] and
// x[(2i+1)·w+2j+1] and idx[i*ow+j] its index in x, the first of them in
// that order, or the last NaN among them (as PyTorch's max_pool2d). It
// does the leading rows it can and returns how many; the caller does the
// rest (rows of fewer than 8 windows read 16 elements of each row and
// write 8 outputs, past the row: into later rows and planes, which x, out
// and idx may hold and which are written after, but not past the slices).
func MaxPool2x2F32(out []float32, idx []int64, x []float32, rows, w, ow int) int {
	if rows < 0 || ow < 0 || 2*ow > w || len(out) < rows*ow || len(idx) < rows*ow || 2*rows*w > len(x) {
		panic(fmt.Sprintf("simd: MaxPool2x2F32 of %d rows of %d (plane %d wide, %d elements) into %d and %d", rows, ow, w, len(x), len(out), len(idx)))
	}
	if ow == 0 || rows == 0 {
		return rows
	}
	n := rows
	if ow < 8 {
		// Row pair i reads to (2i+1)·w+16 and writes to i·ow+8.
		for n > 0 && ((2*n-1)*w+16 > len(x) || (n-1)*ow+8 > min(len(out), len(idx))) {
			n--
		}
	}
	return maxPool2x2F32(out, idx, x, n, w, ow)
}

// MaxPool2x2BackwardF32 writes the gradient of 2×2, stride-2 pooling of a
// plane w wide into the first 2·ow columns of its first 2·rows rows of dx:
// each window's four inputs get 0+g[i*ow+j] at idx[i*ow+j] and +0
// elsewhere, without zeroing dx first or scattering. It reports false,
// having written part of dx, if an index lies outside its own window
// (pooling of another geometry, whose gradients may add up: the caller
// then zeroes dx and scatters); windows that do not overlap make the dense
// writes equal to the scatter. Rows of fewer than 8 windows are written
// 16 elements long, into the columns after 2·ow or the rows after, which
// the caller writes afterwards (dx may hold later planes; not past it).
func MaxPool2x2BackwardF32(dx, g []float32, idx []int64, rows, w, ow int) bool {
	if rows < 0 || ow < 0 || 2*ow > w || len(g) < rows*ow || len(idx) < rows*ow || 2*rows*w > len(dx) {
		panic(fmt.Sprintf("simd: MaxPool2x2BackwardF32 of %d rows of %d (plane %d wide, %d elements) from %d and %d", rows, ow, w, len(dx), len(g), len(idx)))
	}
	if rows == 0 || ow == 0 {
		return true
	}
	n := rows
	if ow < 8 {
		for n > 0 && (2*n-1)*w+16 > len(dx) { // row pair i writes to (2i+1)·w+16
			n--
		}
	}
	if ok, done := maxPool2x2BackF32(dx, g, idx, n, w, ow); !ok {
		return false
	} else if !done {
		n = 0
	}
	return maxPool2x2BackGo(dx[2*n*w:], g[n*ow:], idx[n*ow:], rows-n, w, ow, 2*n*w)
}

// maxPool2x2BackGo is MaxPool2x2BackwardF32's Go code for rows whose
// indices count from base.
func maxPool2x2BackGo(dx, g []float32, idx []int64, rows, w, ow, base int) bool {
	for i := range rows {
		r0, r1 := dx[2*i*w:2*i*w+2*ow], dx[(2*i+1)*w:(2*i+1)*w+2*ow]
		for j := range ow {
			v, rel := 0+g[i*ow+j], idx[i*ow+j]-int64(base+2*i*w+2*j) // 0+g: +0 for -0, as the scatter
			var a, b, c, d float32
			switch rel {
			case 0:
				a = v
			case 1:
				b = v
			case int64(w):
				c = v
			case int64(w) + 1:
				d = v
			default:
				return false
			}
			r0[2*j], r0[2*j+1], r1[2*j], r1[2*j+1] = a, b, c, d
		}
	}
	return true
}

// CopyRows copies rows rows of w elements from src, whose rows are lds
// apart, into dst, whose rows are ldd apart: the strided copies of a
// convolution's padded planes and grids, short rows for which a call of
// the built-in copy per row costs more than the copying. dst and src must
// not overlap.
func CopyRows[T Float](dst []T, ldd int, src []T, lds int, rows, w int) {
	if rows < 0 || w < 0 || rows > 1 && (ldd < w || lds < w) {
		panic(fmt.Sprintf("simd: CopyRows of %d rows of %d (ld %d and %d)", rows, w, ldd, lds))
	}
	if rows == 0 || w == 0 {
		return
	}
	if (rows-1)*ldd+w > len(dst) || (rows-1)*lds+w > len(src) {
		panic(fmt.Sprintf("simd: CopyRows of %d rows of %d (ld %d and %d) between %d and %d elements", rows, w, ldd, lds, len(dst), len(src)))
	}
	if d32, ok := any(dst).([]float32); ok && copyRowsF32(d32, ldd, any(src).([]float32), lds, rows, w) {
		return
	}
	for i := range rows {
		copy(dst[i*ldd:i*ldd+w], src[i*lds:i*lds+w])
	}
}
