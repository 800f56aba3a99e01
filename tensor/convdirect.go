package tensor

import "github.com/godist/godist/internal/simd"

// Direct convolution: the stride-1 path of Conv2d and Conv2dBackward, for
// the small images and few channels of a LeNet, without patch matrices.
//
// The input is copied once into planes with the padding written in (xpad:
// each image C×HP×WP, HP = H+2·PadH, WP = W+2·PadW). Tap k = (c, ki, kj) of
// the kernel then reads that image shifted by offs[k] = c·HP·WP +
// ki·DH·WP + kj·DW, and the outputs, taken on a grid of rows WP wide (the
// last WP-OW columns of each row are garbage and dropped), are
// out[o][p] = Σ_k w[o][k]·xpad[offs[k]+p]: simd.ConvRows. The weight
// gradient is Σ_p g[o][p]·xpad[offs[k]+p] with g written onto the same
// grid, zeros in the garbage columns: simd.ConvDW. The input gradient is
// the convolution of g, padded by DH·(KH-1)-PadH rows and DW·(KW-1)-PadW
// columns, with the kernel flipped and its channels swapped: ConvRows
// again. The padded input (about KH·KW times smaller than the patch
// matrices) is what the forward pass keeps for the weight gradient.

// directMaxPlane bounds the elements of one padded image (input, or output
// gradient for the input gradient) the direct path takes: beyond it the
// taps' reads leave the caches and the patch-matrix GEMM is the better
// plan.
const directMaxPlane = 1 << 16

// directGeom is the layout of a direct convolution.
type directGeom struct {
	convGeom
	hp, wp int       // padded input plane
	img    int       // elements of one padded image, C·HP·WP
	taps   simd.Taps // offsets into a padded image, in (c, ki, kj) order
	grid   int       // output positions computed per channel: (OH-1)·WP+OW rounded up to 16
	row    int       // or, when byRow, per output row: OW rounded up to 16
	byRow  bool      // compute each output row on its own (straight into out)
	slack  int       // elements after the last image that the taps read past it
}

// directOK reports whether the convolution g takes the direct path: unit
// strides, padding no wider than the kernel's reach (so the input
// gradient's padding is not negative), and small padded images, of the
// input and of the output gradient as directInputGrad pads it.
func directOK(g convGeom) bool {
	p := g.p
	if g.c == 0 || g.oc == 0 || g.kh == 0 || g.kw == 0 || p.StrideH != 1 || p.StrideW != 1 || p.PadH > p.DilationH*(g.kh-1) || p.PadW > p.DilationW*(g.kw-1) {
		return false
	}
	hp, wp := g.h+2*p.PadH, g.w+2*p.PadW
	hg, wg := g.oh+2*(p.DilationH*(g.kh-1)-p.PadH), g.ow+2*(p.DilationW*(g.kw-1)-p.PadW)
	return g.c*hp*wp <= directMaxPlane && g.oc*hg*wg <= directMaxPlane
}

func newDirectGeom(g convGeom) directGeom {
	p := g.p
	d := directGeom{convGeom: g, hp: g.h + 2*p.PadH, wp: g.w + 2*p.PadW}
	d.img = g.c * d.hp * d.wp
	offs := tapOffsets(g.c, g.kh, g.kw, d.hp, d.wp, p.DilationH, p.DilationW)
	d.taps = simd.NewTaps(offs)
	d.grid = roundUp((g.oh-1)*d.wp+g.ow, 16)
	d.row = roundUp(g.ow, 16)
	// Rows on their own need no copy out of the grid; take them when they
	// compute no more positions.
	d.byRow = g.oh*d.row <= d.grid
	d.slack = max(0, offs[len(offs)-1]+max(d.grid, (g.oh-1)*d.wp+d.row)-d.img)
	return d
}

// tapOffsets returns the offsets of the taps (c, ki, kj) of a kh×kw kernel
// over c planes of h×w, in that order.
func tapOffsets(c, kh, kw, h, w, dh, dw int) []int {
	offs := make([]int, 0, c*kh*kw)
	for ci := range c {
		for ki := range kh {
			for kj := range kw {
				offs = append(offs, ci*h*w+ki*dh*w+kj*dw)
			}
		}
	}
	return offs
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// padImages writes the n images of x (C×H×W each) into xpad as d lays them
// out, zeros around them and in the slack after the last.
func padImages[T float](xpad, x []T, d directGeom, n int) {
	p := d.p
	if p.PadH == 0 && p.PadW == 0 {
		copy(xpad, x[:n*d.img])
		clear(xpad[n*d.img:])
		return
	}
	clear(xpad)
	for pl := range n * d.c {
		dst := xpad[pl*d.hp*d.wp+p.PadH*d.wp+p.PadW : (pl+1)*d.hp*d.wp]
		simd.CopyRows(dst, d.wp, x[pl*d.h*d.w:(pl+1)*d.h*d.w], d.w, d.h, d.w)
	}
}

// groups splits n into the fewest parts of at most m, as even as possible,
// and returns where each starts (and n last).
func groups(n, m int) []int {
	parts := (n + m - 1) / m
	starts := make([]int, 0, parts+1)
	for i := range parts + 1 {
		starts = append(starts, i*n/parts)
	}
	return starts
}

// packRows returns w (rows × k, row-major) regrouped for simd.ConvRows:
// for each group of rows (starts as groups returns), its k×r block. The
// caller recycles the tensor holding it.
func packRows[T float](w []T, rows, k int, starts []int) (*Tensor, []T) {
	t := Empty(dtypeOf[T](), rows*k)
	wp := elems[T](t)
	for g := range len(starts) - 1 {
		r0, r := starts[g], starts[g+1]-starts[g]
		blk := wp[r0*k : (r0+r)*k]
		for kk := range k {
			for i := range r {
				blk[kk*r+i] = w[(r0+i)*k+kk]
			}
		}
	}
	return t, wp
}

// directForward convolves the n padded images of xpad with w (OC×K) into
// out (N×OC×OH×OW), adding bias (OC, or nil). By rows, each row's last
// chunk spills into the rows after it, which are computed later; the
// rows whose spill would leave their plane go through a scratch buffer.
// On the grid, the rows are copied out of it.
func directForward[T float](out, xpad, w, bias []T, d directGeom, n, oc int) {
	k, pix := d.taps.Len(), d.oh*d.ow
	starts := groups(oc, 6)
	wt, wp := packRows(w, oc, k, starts)
	defer wt.Recycle()
	size := oc * d.grid
	if d.byRow {
		size = 6 * d.row
	}
	scratch := Empty(dtypeOf[T](), size)
	defer scratch.Recycle()
	ob := elems[T](scratch)
	for i := range n {
		x := xpad[i*d.img:]
		o := out[i*oc*pix:]
		for g := range len(starts) - 1 {
			r0, r := starts[g], starts[g+1]-starts[g]
			var b []T
			if bias != nil {
				b = bias[r0 : r0+r]
			}
			wg := wp[r0*k : (r0+r)*k]
			if !d.byRow {
				simd.ConvRows(ob[r0*d.grid:], d.grid, x, d.taps, wg, b, r, d.grid)
				continue
			}
			// The rows whose spill stays in the plane, in one call.
			direct := min(d.oh, (pix-d.row)/d.ow+1)
			if pix < d.row {
				direct = 0
			}
			simd.ConvRowBlocks(o[r0*pix:], pix, d.ow, x, d.wp, d.taps, wg, b, r, d.row, direct)
			for oi := direct; oi < d.oh; oi++ {
				simd.ConvRows(ob, d.row, x[oi*d.wp:], d.taps, wg, b, r, d.row)
				for c := range r {
					copy(o[(r0+c)*pix+oi*d.ow:(r0+c)*pix+(oi+1)*d.ow], ob[c*d.row:])
				}
			}
		}
		if !d.byRow {
			for c := range oc {
				copyRows(o[c*pix:(c+1)*pix], ob[c*d.grid:], d.oh, d.ow, d.wp)
			}
		}
	}
}

// copyRows copies rows rows of w elements, src's ld apart, into dst,
// where they are consecutive.
func copyRows[T float](dst, src []T, rows, w, ld int) {
	simd.CopyRows(dst, w, src, ld, rows, w)
}

// directWeightGrad sets dw (OC×K) to the weight gradient given the output
// gradient g (N×OC×OH×OW) and the padded images xpad.
func directWeightGrad[T float](dw, g, xpad []T, d directGeom, n, oc int) {
	k, pix := d.taps.Len(), d.oh*d.ow
	clear(dw[:oc*k])
	ld := roundUp((d.oh-1)*d.wp+d.ow, 8) // g's row on the grid
	// Images in batches whose gradients on the grid fill about 64 KiB.
	batch := max(1, min(n, (64<<10)/(4*oc*ld)))
	scratch := Empty(dtypeOf[T](), batch*oc*ld)
	defer scratch.Recycle()
	gd := elems[T](scratch)
	clear(gd) // the garbage columns and the tails stay zero
	os := groups(oc, 4)
	// Tiles of ro channels by up to 12/ro taps (ConvDW's 12 accumulators).
	ks := make([][]int, len(os)-1)
	for a := range ks {
		ks[a] = groups(k, min(4, 12/(os[a+1]-os[a])))
	}
	for i0 := 0; i0 < n; i0 += batch {
		m := min(batch, n-i0)
		for i := range m * oc {
			simd.CopyRows(gd[i*ld:(i+1)*ld], d.wp, g[(i0*oc+i)*pix:(i0*oc+i+1)*pix], d.ow, d.oh, d.ow)
		}
		x := xpad[i0*d.img:]
		for a := range len(os) - 1 {
			o0, ro := os[a], os[a+1]-os[a]
			for b := range len(ks[a]) - 1 {
				k0, k1 := ks[a][b], ks[a][b+1]
				simd.ConvDW(dw[o0*k+k0:], k, gd[o0*ld:], ld, oc*ld, x, d.img, d.taps.Slice(k0, k1), ro, m, ld)
			}
		}
	}
}

// directInputGrad sets dx (N×C×H×W) to the input gradient given the output
// gradient g (N×OC×OH×OW) and the weights w (OC×C×KH×KW): the
// convolution of g, padded by the kernel's reach less the forward pass's
// padding (gx), with the flipped kernel whose channels are swapped. Each
// row of dx is computed on its own, from the kernel rows that reach the
// rows of g and not its zero padding: the taps are ordered (ki, o, kj),
// so those are a contiguous range.
func directInputGrad[T float](dx, g, w []T, d directGeom, n, oc int) {
	p := d.p
	dh, dwl := p.DilationH, p.DilationW
	ph, pw := dh*(d.kh-1)-p.PadH, dwl*(d.kw-1)-p.PadW
	hg, wg := d.oh+2*ph, d.ow+2*pw
	offs := make([]int, 0, oc*d.kh*d.kw)
	for ki := range d.kh {
		for o := range oc {
			for kj := range d.kw {
				offs = append(offs, o*hg*wg+ki*dh*wg+kj*dwl)
			}
		}
	}
	k := len(offs) // KH·OC·KW
	// wf[c][(ki, o, kj)] = w[o][c][KH-1-ki][KW-1-kj]
	wft := Empty(dtypeOf[T](), d.c*k) // every element is written
	defer wft.Recycle()
	wf := elems[T](wft)
	for c := range d.c {
		for ki := range d.kh {
			for o := range oc {
				for kj := range d.kw {
					wf[c*k+(ki*oc+o)*d.kw+kj] = w[((o*d.c+c)*d.kh+d.kh-1-ki)*d.kw+d.kw-1-kj]
				}
			}
		}
	}
	starts := groups(d.c, 6)
	wt, wp := packRows(wf, d.c, k, starts)
	defer wt.Recycle()
	// The kernel rows [lo[hi], up[hi]) reach g's rows from dx's row hi.
	lo, up := make([]int, d.h), make([]int, d.h)
	for hi := range d.h {
		lo[hi], up[hi] = d.kh, 0
		for ki := range d.kh {
			if r := hi + ki*dh; r >= ph && r < ph+d.oh {
				lo[hi], up[hi] = min(lo[hi], ki), ki+1
			}
		}
	}
	taps := simd.NewTaps(offs)
	w16 := roundUp(d.w, 16) // a dx row computed
	plane := oc * hg * wg
	size := max(plane, offs[k-1]+(d.h-1)*wg+w16)
	gs := Empty(dtypeOf[T](), size+6*w16)
	defer gs.Recycle()
	buf := elems[T](gs)
	gx, ob := buf[:size], buf[size:]
	clear(gx) // the border and the slack stay zero
	img, pix, tap, hw := d.c*d.h*d.w, d.oh*d.ow, oc*d.kw, d.h*d.w
	for i := range n {
		for o := range oc {
			simd.CopyRows(gx[o*hg*wg+ph*wg+pw:], wg, g[(i*oc+o)*pix:(i*oc+o+1)*pix], d.ow, d.oh, d.ow)
		}
		// As directForward by rows: each row spills into the next ones,
		// computed later, and the last rows go through ob.
		x := dx[i*img:]
		for a := range len(starts) - 1 {
			c0, r := starts[a], starts[a+1]-starts[a]
			wg0 := wp[c0*k : (c0+r)*k]
			for hi := 0; hi < d.h; {
				if lo[hi] >= up[hi] { // no tap reaches g
					for c := range r {
						clear(x[(c0+c)*hw+hi*d.w : (c0+c)*hw+(hi+1)*d.w])
					}
					hi++
					continue
				}
				t0, t1 := lo[hi]*tap, up[hi]*tap
				// The following rows with the same taps whose spill stays in
				// the plane, in one call.
				end := hi
				for end < d.h && lo[end] == lo[hi] && up[end] == up[hi] && end*d.w+w16 <= hw {
					end++
				}
				if end > hi {
					simd.ConvRowBlocks(x[c0*hw+hi*d.w:], hw, d.w, gx[hi*wg:], wg, taps.Slice(t0, t1), wg0[t0*r:t1*r], nil, r, w16, end-hi)
					hi = end
					continue
				}
				simd.ConvRows(ob, w16, gx[hi*wg:], taps.Slice(t0, t1), wg0[t0*r:t1*r], nil, r, w16)
				for c := range r {
					copy(x[(c0+c)*hw+hi*d.w:(c0+c)*hw+(hi+1)*d.w], ob[c*w16:])
				}
				hi++
			}
		}
	}
}

// directBiasGrad sets db (OC) to the sums of the output gradient g
// (N×OC×P) over the images and positions, each in float64 and rounded
// once.
func directBiasGrad[T float](db, g []T, n, oc, pix int) {
	g32, is32 := any(g).([]float32)
	for o := range oc {
		var s float64
		for i := range n {
			k := 0
			if is32 {
				var v float64
				v, k = simd.SumF32(g32[(i*oc+o)*pix : (i*oc+o+1)*pix])
				s += v
			}
			for _, v := range g[(i*oc+o)*pix+k : (i*oc+o+1)*pix] {
				s += float64(v)
			}
		}
		db[o] = T(s)
	}
}

// dtypeOf is the DType of T.
func dtypeOf[T float]() DType {
	var z T
	if _, ok := any(z).(float32); ok {
		return Float32
	}
	return Float64
}

// elems are the elements of t, a contiguous tensor of T.
func elems[T float](t *Tensor) []T {
	if dtypeOf[T]() == Float32 {
		return any(t.Float32s()).([]T)
	}
	return any(t.Float64s()).([]T)
}

// directConv is Conv2dCols on the direct path.
func directConv(x, w, b *Tensor, g convGeom) (*Tensor, *ConvColumns) {
	d := newDirectGeom(g)
	n, oc := x.shape[0], w.shape[0]
	xc, wc := x.Contiguous(), w.Contiguous()
	out := Empty(x.dtype, n, oc, g.oh, g.ow) // directForward writes every element
	xpad := Empty(x.dtype, n*d.img+d.slack)  // and padImages too
	var bias *Tensor
	if b != nil && b.dtype == x.dtype {
		bias = b.Reshape(oc).Contiguous()
	}
	switch x.dtype {
	case Float32:
		padImages(xpad.Float32s(), xc.Float32s(), d, n)
		directForward(out.Float32s(), xpad.Float32s(), wc.Float32s(), f32data(bias), d, n, oc)
	case Float64:
		padImages(xpad.Float64s(), xc.Float64s(), d, n)
		directForward(out.Float64s(), xpad.Float64s(), wc.Float64s(), f64data(bias), d, n, oc)
	}
	recycleCopy(xc, x)
	recycleCopy(wc, w)
	if bias != nil {
		recycleCopy(bias, b)
	}
	if b != nil && bias == nil {
		out.Add(out, b.Reshape(oc, 1, 1))
	}
	return out, &ConvColumns{t: xpad, direct: true}
}

// directConvBackward is Conv2dBackward on the direct path; columns, when
// not nil, hold the padded images that directConv kept.
func directConvBackward(g, x, w *Tensor, columns *ConvColumns, geo convGeom, dx, dw, db *Tensor) {
	d := newDirectGeom(geo)
	n, oc := x.shape[0], w.shape[0]
	gc, wc := g.Contiguous(), w.Contiguous()
	defer recycleCopy(gc, g)
	defer recycleCopy(wc, w)
	if dw != nil {
		var xpad *Tensor
		if columns != nil && columns.t != nil {
			xpad = columns.t
		} else {
			xc := x.Contiguous()
			xpad = Empty(x.dtype, n*d.img+d.slack)
			defer xpad.Recycle()
			switch x.dtype {
			case Float32:
				padImages(xpad.Float32s(), xc.Float32s(), d, n)
			case Float64:
				padImages(xpad.Float64s(), xc.Float64s(), d, n)
			}
			recycleCopy(xc, x)
		}
		dw.prepareAll(w.dtype, w.shape, "Conv2dBackward") // directWeightGrad overwrites it
		if !dw.IsContiguous() {
			panic("tensor: Conv2dBackward into a non-contiguous weight gradient")
		}
		switch x.dtype {
		case Float32:
			directWeightGrad(dw.Float32s(), gc.Float32s(), xpad.Float32s(), d, n, oc)
		case Float64:
			directWeightGrad(dw.Float64s(), gc.Float64s(), xpad.Float64s(), d, n, oc)
		}
	}
	if db != nil {
		db.prepareAll(g.dtype, []int{oc}, "Conv2dBackward") // directBiasGrad overwrites it
		if !db.IsContiguous() {
			panic("tensor: Conv2dBackward into a non-contiguous bias gradient")
		}
		switch x.dtype {
		case Float32:
			directBiasGrad(db.Float32s(), gc.Float32s(), n, oc, geo.oh*geo.ow)
		case Float64:
			directBiasGrad(db.Float64s(), gc.Float64s(), n, oc, geo.oh*geo.ow)
		}
	}
	if dx != nil {
		dx.prepareAll(x.dtype, x.shape, "Conv2dBackward") // directInputGrad overwrites it
		if !dx.IsContiguous() {
			panic("tensor: Conv2dBackward into a non-contiguous input gradient")
		}
		switch x.dtype {
		case Float32:
			directInputGrad(dx.Float32s(), gc.Float32s(), wc.Float32s(), d, n, oc)
		case Float64:
			directInputGrad(dx.Float64s(), gc.Float64s(), wc.Float64s(), d, n, oc)
		}
	}
}
