package tensor

import (
	"fmt"
)

// Conv2dParams are the geometry of a 2-D convolution or pooling window.
// Zero strides and dilations mean 1.
type Conv2dParams struct {
	StrideH, StrideW     int
	PadH, PadW           int
	DilationH, DilationW int
}

func (p Conv2dParams) norm() Conv2dParams {
	if p.StrideH == 0 {
		p.StrideH = 1
	}
	if p.StrideW == 0 {
		p.StrideW = 1
	}
	if p.DilationH == 0 {
		p.DilationH = 1
	}
	if p.DilationW == 0 {
		p.DilationW = 1
	}
	return p
}

// OutSize returns the output height and width for an input of h×w and a
// kernel of kh×kw.
// A kernel wider than the padded input gives a size below 1 (rounding
// down, as PyTorch does: Go's division would round -1/2 up to 0 and make
// the size 1).
func (p Conv2dParams) OutSize(h, w, kh, kw int) (int, int) {
	p = p.norm()
	oh := floorDiv(h+2*p.PadH-p.DilationH*(kh-1)-1, p.StrideH) + 1
	ow := floorDiv(w+2*p.PadW-p.DilationW*(kw-1)-1, p.StrideW) + 1
	return oh, ow
}

func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

type convGeom struct {
	c, h, w, kh, kw, oh, ow int
	oc                      int // output channels
	p                       Conv2dParams
}

// validRange returns the output columns [lo, hi) whose input column
// j0 + oj·stride falls inside [0, w).
func validRange(j0, stride, w, ow int) (lo, hi int) {
	if j0 < 0 {
		lo = (-j0 + stride - 1) / stride
	}
	if last := w - 1 - j0; last < 0 {
		hi = 0
	} else {
		hi = min(ow, last/stride+1)
	}
	return lo, max(hi, lo)
}

// im2col writes the (c·kh·kw) × (oh·ow) patch matrix of one image x
// (c×h×w) into cols, whose rows are ld elements apart (ld ≥ oh·ow: the
// patch matrices of a batch sit side by side in one matrix).
func im2col[T float](cols, x []T, g convGeom, ld int) {
	p := g.p
	row := 0
	for c := range g.c {
		plane := x[c*g.h*g.w : (c+1)*g.h*g.w]
		for ki := range g.kh {
			for kj := range g.kw {
				out := cols[row*ld : row*ld+g.oh*g.ow]
				row++
				j0 := kj*p.DilationW - p.PadW
				lo, hi := validRange(j0, p.StrideW, g.w, g.ow)
				if p.StrideW == 1 && p.StrideH == 1 && p.DilationH == 1 {
					im2colRow1(out, plane, ki-p.PadH, j0, lo, hi, g.h, g.w, g.oh, g.ow)
					continue
				}
				for oi := range g.oh {
					ii := oi*p.StrideH - p.PadH + ki*p.DilationH
					o := out[oi*g.ow : (oi+1)*g.ow]
					if ii < 0 || ii >= g.h {
						clear(o)
						continue
					}
					src := plane[ii*g.w : (ii+1)*g.w]
					clear(o[:lo])
					clear(o[hi:])
					if p.StrideW == 1 {
						copy(o[lo:hi], src[j0+lo:j0+hi])
						continue
					}
					for oj := lo; oj < hi; oj++ {
						o[oj] = src[j0+oj*p.StrideW]
					}
				}
			}
		}
	}
}

// im2colRow1 fills one row of the patch matrix for unit strides (the
// common case) with inline loops: the image rows are short, and calls to
// memmove and memclr per row cost more than the copying.
func im2colRow1[T float](out, plane []T, i0, j0, lo, hi, h, w, oh, ow int) {
	for oi := range oh {
		o := out[oi*ow : (oi+1)*ow]
		ii := i0 + oi
		if ii < 0 || ii >= h {
			for k := range o {
				o[k] = 0
			}
			continue
		}
		for k := range lo {
			o[k] = 0
		}
		for k := hi; k < len(o); k++ {
			o[k] = 0
		}
		copy(o[lo:hi], plane[ii*w+j0+lo:ii*w+j0+hi])
	}
}

// col2im adds the patch matrix cols (rows ld apart) back into the image
// gradient dx.
func col2im[T float](dx, cols []T, g convGeom, ld int) {
	p := g.p
	row := 0
	for c := range g.c {
		plane := dx[c*g.h*g.w : (c+1)*g.h*g.w]
		for ki := range g.kh {
			for kj := range g.kw {
				in := cols[row*ld : row*ld+g.oh*g.ow]
				row++
				j0 := kj*p.DilationW - p.PadW
				lo, hi := validRange(j0, p.StrideW, g.w, g.ow)
				for oi := range g.oh {
					ii := oi*p.StrideH - p.PadH + ki*p.DilationH
					if ii < 0 || ii >= g.h {
						continue
					}
					dst := plane[ii*g.w : (ii+1)*g.w]
					src := in[oi*g.ow : (oi+1)*g.ow]
					if p.StrideW == 1 {
						d, s := dst[j0+lo:j0+hi], src[lo:hi]
						for k := range d {
							d[k] += s[k]
						}
						continue
					}
					for oj := lo; oj < hi; oj++ {
						dst[j0+oj*p.StrideW] += src[oj]
					}
				}
			}
		}
	}
}

func convCheck(x, w *Tensor, p Conv2dParams) convGeom {
	if x.Dim() != 4 || w.Dim() != 4 || x.shape[1] != w.shape[1] || x.dtype != w.dtype {
		panic(fmt.Sprintf("tensor: Conv2d of input %v%v with weight %v%v", x.dtype, x.shape, w.dtype, w.shape))
	}
	p = p.norm()
	g := convGeom{c: x.shape[1], h: x.shape[2], w: x.shape[3], kh: w.shape[2], kw: w.shape[3], oc: w.shape[0], p: p}
	g.oh, g.ow = p.OutSize(g.h, g.w, g.kh, g.kw)
	if g.oh <= 0 || g.ow <= 0 {
		panic(fmt.Sprintf("tensor: Conv2d kernel %v larger than padded input %v", w.shape, x.shape))
	}
	return g
}

// Conv2d returns the cross-correlation of x (N×C×H×W) with w
// (OC×C×KH×KW), plus bias b (OC, may be nil), as torch.nn.functional.conv2d
// with groups=1.
func Conv2d(x, w, b *Tensor, p Conv2dParams) *Tensor {
	out, cols := Conv2dCols(x, w, b, p)
	cols.Release()
	return out
}

// ConvColumns are what a convolution's forward pass keeps of its input for
// the weight gradient: the im2col patch matrices, or, on the direct path
// (convdirect.go), the padded images.
type ConvColumns struct {
	t      *Tensor
	direct bool // t holds padded images
}

// Release returns the matrices' memory for reuse by later convolutions. The
// columns must not be used afterwards. Releasing is optional (the garbage
// collector reclaims unreleased columns) but saves allocating, zeroing and
// faulting in megabytes per training step. A nil *ConvColumns is a no-op.
func (c *ConvColumns) Release() {
	if c != nil && c.t != nil {
		c.t.Recycle()
		c.t = nil
	}
}

// convChunk returns how many images share one patch matrix: enough columns
// for an efficient GEMM, few enough that the matrix stays in cache while it
// is written and multiplied (about 256 KiB).
func convChunk(k, pix, n, size int) int {
	return max(1, min(n, (256<<10)/max(k*pix*size, 1)))
}

// Conv2dCols is Conv2d that also returns the patch matrices it built, which
// Conv2dBackward reuses for the weight gradient.
//
// Images are taken in chunks; the im2col matrices of a chunk's images sit
// side by side in one K × (chunk·OH·OW) matrix (K = C·KH·KW), and one GEMM,
// W (OC × K) times that matrix, convolves the whole chunk. cols holds the
// chunks' matrices one after another.
func Conv2dCols(x, w, b *Tensor, p Conv2dParams) (out *Tensor, columns *ConvColumns) {
	g := convCheck(x, w, p)
	if useDirect(g, x.dtype) {
		return directConv(x, w, b, g)
	}
	return im2colConv(x, w, b, g)
}

// useDirect reports whether a convolution takes the direct path
// (convdirect.go) rather than the patch matrices.
func useDirect(g convGeom, d DType) bool {
	return directOK(g) && (d == Float32 || d == Float64)
}

// im2colConv is Conv2dCols with patch matrices and a GEMM.
func im2colConv(x, w, b *Tensor, g convGeom) (out *Tensor, columns *ConvColumns) {
	n, oc := x.shape[0], w.shape[0]
	k, pix := g.c*g.kh*g.kw, g.oh*g.ow
	xc, wc := x.Contiguous(), w.Contiguous()
	out = Empty(x.dtype, n, oc, g.oh, g.ow) // convScatter writes every element
	cols := Empty(x.dtype, n*k*pix)         // and im2col too
	chunk := convChunk(k, pix, n, x.dtype.Size())
	prod := Empty(x.dtype, oc*chunk*pix) // every GEMM overwrites its part
	var bias *Tensor
	if b != nil && b.dtype == x.dtype {
		bias = b.Reshape(oc).Contiguous()
	}
	switch x.dtype {
	case Float32:
		var bv []float32
		if bias != nil {
			bv = bias.Float32s()
		}
		convForward(out.Float32s(), cols.Float32s(), prod.Float32s(), xc.Float32s(), wc.Float32s(), bv, g, n, oc, chunk, sgemm)
	case Float64:
		var bv []float64
		if bias != nil {
			bv = bias.Float64s()
		}
		convForward(out.Float64s(), cols.Float64s(), prod.Float64s(), xc.Float64s(), wc.Float64s(), bv, g, n, oc, chunk, dgemm)
	default:
		panic(fmt.Sprintf("tensor: Conv2d of %v tensors", x.dtype))
	}
	prod.Recycle()
	recycleCopy(xc, x)
	recycleCopy(wc, w)
	if b != nil && bias == nil {
		out.Add(out, b.Reshape(oc, 1, 1))
	}
	return out, &ConvColumns{t: cols}
}

// recycleCopy recycles c if it is a copy that a kernel made of t
// (Contiguous of a strided t) and no longer needs.
func recycleCopy(c, t *Tensor) {
	if c != t {
		c.Recycle()
	}
}

// convForward convolves the n images of x (contiguous, C×H×W each) with
// the weights w (OC × K), chunk images at a time: their patch matrices
// side by side in cols (K × m·P for a chunk of m), one GEMM into prod,
// then scattered into out with the bias (nil: none).
func convForward[T float](out, cols, prod, x, w, bias []T, g convGeom, n, oc, chunk int, gemm gemmFn[T]) {
	k, pix, img := g.c*g.kh*g.kw, g.oh*g.ow, g.c*g.h*g.w
	for i0 := 0; i0 < n; i0 += chunk {
		m := min(chunk, n-i0)
		c := cols[i0*k*pix : (i0+m)*k*pix]
		for i := range m {
			im2col(c[i*pix:], x[(i0+i)*img:(i0+i+1)*img], g, m*pix)
		}
		pr := prod[:oc*m*pix]
		gemm(false, false, oc, m*pix, k, 1, w, k, c, m*pix, 0, pr, m*pix) // OC × m·P
		convScatter(out[i0*oc*pix:(i0+m)*oc*pix], pr, bias, oc, m, pix)
	}
}

// convScatter moves the product prod (OC × m·P) of a chunk of m images into
// their outputs out (m × OC × P), adding bias (OC, or nil) on the way.
func convScatter[T float](out, prod, bias []T, oc, m, pix int) {
	for i := range m {
		for o := range oc {
			d := out[(i*oc+o)*pix : (i*oc+o+1)*pix]
			s := prod[(o*m+i)*pix : (o*m+i+1)*pix]
			if bias == nil {
				copy(d, s)
				continue
			}
			bv := bias[o]
			s = s[:len(d)]
			for k := range d {
				d[k] = s[k] + bv
			}
		}
	}
}

// Conv2dBackward computes the gradients of Conv2d with respect to x, w and
// b into dx, dw and db, given g, the gradient of its output, and returns
// them. A nil destination is a gradient not wanted (returned nil); an
// unsized one (new(Tensor)) is allocated; a sized one must be contiguous,
// of its operand's shape and dtype, and is overwritten (autograd passes a
// parameter's gradient destination, a view into DDP's bucket). columns
// are the patch matrices that Conv2dCols returned, or nil to rebuild
// them; they are not released.
func Conv2dBackward(g, x, w *Tensor, columns *ConvColumns, p Conv2dParams, dx, dw, db *Tensor) (*Tensor, *Tensor, *Tensor) {
	geo := convCheck(x, w, p)
	n, oc := x.shape[0], w.shape[0]
	if want := []int{n, oc, geo.oh, geo.ow}; g.dtype != x.dtype || !equalInts(g.shape, want) {
		panic(fmt.Sprintf("tensor: Conv2dBackward of an output gradient %v%v for an output %v%v", g.dtype, g.shape, x.dtype, want))
	}
	if columns != nil && columns.t != nil && columns.direct != useDirect(geo, x.dtype) {
		panic("tensor: Conv2dBackward with columns of another convolution")
	}
	if useDirect(geo, x.dtype) {
		directConvBackward(g, x, w, columns, geo, dx, dw, db)
		return dx, dw, db
	}
	return im2colConvBackward(g, x, w, columns, geo, dx, dw, db)
}

// im2colConvBackward is Conv2dBackward with patch matrices and GEMMs.
func im2colConvBackward(g, x, w *Tensor, columns *ConvColumns, geo convGeom, dx, dw, db *Tensor) (*Tensor, *Tensor, *Tensor) {
	n, oc := x.shape[0], w.shape[0]
	k, pix := geo.c*geo.kh*geo.kw, geo.oh*geo.ow
	wantX, wantW := dx != nil, dw != nil
	var cols *Tensor
	if wantW {
		if columns == nil || columns.t == nil {
			_, columns = im2colConv(x, w, nil, geo)
			defer columns.Release()
		}
		cols = columns.t
	}
	wc, gc := w.Contiguous(), g.Contiguous()
	defer recycleCopy(wc, w)
	defer recycleCopy(gc, g)
	if wantW {
		// The first chunk's product overwrites dw; there is none for no images.
		dw.prepareFill(w.dtype, w.shape, "Conv2dBackward", n == 0)
		if !dw.IsContiguous() {
			panic("tensor: Conv2dBackward into a non-contiguous weight gradient")
		}
		if n == 0 {
			dw.Zero()
		}
	}
	if wantX {
		fresh := !dx.Sized()
		dx.prepare(x.dtype, x.shape, "Conv2dBackward")
		if !dx.IsContiguous() {
			panic("tensor: Conv2dBackward into a non-contiguous input gradient")
		}
		if !fresh {
			dx.Zero() // col2im adds into it
		}
	}
	if wantW || wantX {
		chunk := convChunk(k, pix, n, x.dtype.Size())
		// gt and dcols are scratch: every element is written before it is read.
		gt := Empty(g.dtype, oc*chunk*pix)
		defer gt.Recycle()
		var dcols *Tensor
		if wantX {
			dcols = Empty(x.dtype, k*chunk*pix)
			defer dcols.Recycle()
		}
		switch x.dtype {
		case Float32:
			convBackward(convGrads[float32]{dx: f32data(dx), dw: f32data(dw), g: gc.Float32s(), w: wc.Float32s(), cols: f32data(cols), gt: gt.Float32s(), dcols: f32data(dcols)}, geo, n, oc, chunk, sgemm)
		case Float64:
			convBackward(convGrads[float64]{dx: f64data(dx), dw: f64data(dw), g: gc.Float64s(), w: wc.Float64s(), cols: f64data(cols), gt: gt.Float64s(), dcols: f64data(dcols)}, geo, n, oc, chunk, dgemm)
		default:
			panic(fmt.Sprintf("tensor: Conv2dBackward of %v tensors", x.dtype))
		}
	}
	if db != nil {
		perImage := new(Tensor).Sum(gc.Reshape(n, oc, pix), 2, false)
		db.Sum(perImage, 0, false)
		perImage.Recycle()
	}
	return dx, dw, db
}

// f32data and f64data are the elements of a contiguous tensor, or nil
// for none.
func f32data(t *Tensor) []float32 {
	if t == nil {
		return nil
	}
	return t.Float32s()
}

func f64data(t *Tensor) []float64 {
	if t == nil {
		return nil
	}
	return t.Float64s()
}

// convGrads are the operands of convBackward: the gradients it computes
// (dx, N×C×H×W, added into; dw, OC×K, overwritten; nil when not wanted),
// the output gradient g (N×OC×P), the weights w (OC×K), the forward pass's
// patch matrices cols (needed for dw), and scratch space for a chunk's
// output gradient (gt) and input patch gradients (dcols, needed for dx).
type convGrads[T float] struct {
	dx, dw, g, w, cols, gt, dcols []T
}

// convBackward computes the input and weight gradients of a convolution
// chunk by chunk, in the forward pass's layout: a chunk's output gradient
// as OC × m·P, the weight gradient as its product with the patch
// matrices, the patch gradients as Wᵀ times it, added back into the
// images by col2im.
func convBackward[T float](a convGrads[T], geo convGeom, n, oc, chunk int, gemm gemmFn[T]) {
	k, pix, img := geo.c*geo.kh*geo.kw, geo.oh*geo.ow, geo.c*geo.h*geo.w
	for i0 := 0; i0 < n; i0 += chunk {
		m := min(chunk, n-i0)
		gm := a.gt[:oc*m*pix] // OC × m·P: gm[o][i][p] = g[i0+i][o][p]
		for i := range m {
			for o := range oc {
				src := a.g[((i0+i)*oc+o)*pix : ((i0+i)*oc+o+1)*pix]
				copy(gm[(o*m+i)*pix:(o*m+i+1)*pix], src)
			}
		}
		if a.dw != nil {
			var beta T = 1
			if i0 == 0 {
				beta = 0
			}
			c := a.cols[i0*k*pix : (i0+m)*k*pix]                                   // K × m·P
			gemm(false, true, oc, k, m*pix, 1, gm, m*pix, c, m*pix, beta, a.dw, k) // dw += gm·cᵀ
		}
		if a.dx != nil {
			dc := a.dcols[:k*m*pix]
			gemm(true, false, k, m*pix, oc, 1, a.w, k, gm, m*pix, 0, dc, m*pix) // K × m·P = Wᵀ·gm
			for i := range m {
				col2im(a.dx[(i0+i)*img:(i0+i+1)*img], dc[i*pix:], geo, m*pix)
			}
		}
	}
}
