// Pooling: max and average over windows of an image batch, forward and
// backward, as torch.nn.functional's max_pool2d and avg_pool2d.

package tensor

import (
	"fmt"
	"math"

	"github.com/godist/godist/internal/simd"
)

// poolSize returns the output size of a pooling of x by a kh×kw window,
// and panics, naming op, the window and the input, when it does not fit.
func poolSize(op string, x *Tensor, kh, kw int, p Conv2dParams) (oh, ow int) {
	if x.Dim() != 4 {
		panic(fmt.Sprintf("tensor: %s of shape %v", op, x.shape))
	}
	if kh >= 1 && kw >= 1 {
		oh, ow = p.OutSize(x.shape[2], x.shape[3], kh, kw)
	}
	if oh < 1 || ow < 1 {
		panic(fmt.Sprintf("tensor: %s window %dx%d (padding %d,%d, dilation %d,%d) does not fit input %v", op, kh, kw, p.PadH, p.PadW, p.DilationH, p.DilationW, x.shape))
	}
	return oh, ow
}

// MaxPool2d returns the maximum over kh×kw windows of x (N×C×H×W), padding
// with -Inf, and for each output the flat index (within its H×W plane) of
// the chosen input, as torch's max_pool2d_with_indices.
func MaxPool2d(x *Tensor, kh, kw int, p Conv2dParams) (out, indices *Tensor) {
	p = p.norm()
	oh, ow := poolSize("MaxPool2d", x, kh, kw, p)
	n, c, h, w := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
	out, indices = Empty(x.dtype, n, c, oh, ow), Empty(Int64, n, c, oh, ow) // maxPool writes every element
	x = x.Contiguous()
	switch x.dtype {
	case Float32:
		maxPool(out.Float32s(), indices.Int64s(), x.Float32s(), n*c, h, w, kh, kw, oh, ow, p)
	case Float64:
		maxPool(out.Float64s(), indices.Int64s(), x.Float64s(), n*c, h, w, kh, kw, oh, ow, p)
	default:
		panic(fmt.Sprintf("tensor: MaxPool2d of a %v tensor", x.dtype))
	}
	return out, indices
}

func maxPool[T float](out []T, idx []int64, x []T, planes, h, w, kh, kw, oh, ow int, p Conv2dParams) {
	if kh == 2 && kw == 2 && p.StrideH == 2 && p.StrideW == 2 && p.PadH == 0 && p.PadW == 0 && p.DilationH == 1 && p.DilationW == 1 {
		if o32, ok := any(out).([]float32); ok {
			maxPool2x2f32(o32, idx, any(x).([]float32), planes, h, w, oh, ow)
			return
		}
		maxPool2x2(out, idx, x, planes, h, w, oh, ow)
		return
	}
	for pl := range planes {
		src := x[pl*h*w : (pl+1)*h*w]
		for oi := range oh {
			for oj := range ow {
				best, at := T(math.Inf(-1)), -1
				for ki := range kh {
					i := oi*p.StrideH - p.PadH + ki*p.DilationH
					if i < 0 || i >= h {
						continue
					}
					for kj := range kw {
						j := oj*p.StrideW - p.PadW + kj*p.DilationW
						if j < 0 || j >= w {
							continue
						}
						if v := src[i*w+j]; v > best || at < 0 || v != v {
							best, at = v, i*w+j
						}
					}
				}
				o := pl*oh*ow + oi*ow + oj
				out[o], idx[o] = best, int64(at)
			}
		}
	}
}

// maxPool2x2 is the common 2×2, stride 2 window without padding.
func maxPool2x2[T float](out []T, idx []int64, x []T, planes, h, w, oh, ow int) {
	for pl := range planes {
		src := x[pl*h*w : (pl+1)*h*w]
		for oi := range oh {
			pool2x2Row(out[(pl*oh+oi)*ow:(pl*oh+oi+1)*ow], idx[(pl*oh+oi)*ow:(pl*oh+oi+1)*ow], src, 2*oi*w, w)
		}
	}
}

// pool2x2Row pools the row pair of src starting at base (rows w apart)
// into out and idx. The maximum is taken branch-free (training data makes
// the comparisons unpredictable); the pick is then the first element
// equal to it, and its value (so -0 before +0 gives -0, as PyTorch's
// scan).
func pool2x2Row[T float](out []T, idx []int64, src []T, base, w int) {
	r0 := src[base : base+w]
	r1 := src[base+w : base+2*w]
	for oj := range out {
		j := 2 * oj
		a, b, c, d := r0[j], r0[j+1], r1[j], r1[j+1]
		best := max(max(a, b), max(c, d))
		if best != best {
			out[oj], idx[oj] = scan4([4]T{a, b, c, d}, [4]int{base + j, base + j + 1, base + w + j, base + w + j + 1})
			continue
		}
		v, at := d, base+w+j+1
		if c == best {
			v, at = c, base+w+j
		}
		if b == best {
			v, at = b, base+j+1
		}
		if a == best {
			v, at = a, base+j
		}
		out[oj], idx[oj] = v, int64(at)
	}
}

// maxPool2x2f32 is maxPool2x2 for float32: the vector kernel takes the
// rows it can, pool2x2Row the others (and all of them without AVX2).
func maxPool2x2f32(out []float32, idx []int64, x []float32, planes, h, w, oh, ow int) {
	for pl := range planes {
		o := out[pl*oh*ow : (pl+1)*oh*ow]
		ix := idx[pl*oh*ow : (pl+1)*oh*ow]
		src := x[pl*h*w : (pl+1)*h*w]
		// Short rows' last outputs may spill into the next plane's, which
		// are written after.
		for oi := simd.MaxPool2x2F32(out[pl*oh*ow:], idx[pl*oh*ow:], x[pl*h*w:], oh, w, ow); oi < oh; oi++ {
			pool2x2Row(o[oi*ow:(oi+1)*ow], ix[oi*ow:(oi+1)*ow], src, 2*oi*w, w)
		}
	}
}

// scan4 picks the maximum of a window as PyTorch's kernel does: in order,
// a larger value or any NaN replaces the current pick (so the last NaN
// wins).
func scan4[T float](v [4]T, at [4]int) (T, int64) {
	best, pos := v[0], at[0]
	for k := 1; k < 4; k++ {
		if v[k] > best || v[k] != v[k] {
			best, pos = v[k], at[k]
		}
	}
	return best, int64(pos)
}

// MaxPool2dBackward scatters g (the gradient of MaxPool2d's output) to the
// inputs that were chosen, returning the gradient for an input of shape.
func MaxPool2dBackward(g, indices *Tensor, shape []int) *Tensor {
	g = g.Contiguous()
	idx := indices.Contiguous().Int64s()
	if g.dtype == Float32 && len(shape) == 4 && g.Dim() == 4 {
		if dx := maxPool2x2Backward(g, idx, shape); dx != nil {
			return dx
		}
	}
	dx := New(g.dtype, shape...)
	planes, hw := shape[0]*shape[1], shape[2]*shape[3]
	ohw := g.shape[2] * g.shape[3]
	switch g.dtype {
	case Float32:
		scatterPool(dx.Float32s(), g.Float32s(), idx, planes, hw, ohw)
	case Float64:
		scatterPool(dx.Float64s(), g.Float64s(), idx, planes, hw, ohw)
	}
	return dx
}

// maxPool2x2Backward is MaxPool2dBackward written densely, without
// zeroing and scattering, when every output's index lies in its own 2×2
// block of the input (rows 2i, 2i+1, columns 2j, 2j+1), as those of 2×2,
// stride-2 pooling do: the blocks are disjoint, so no two gradients add
// up and each block gets its one gradient and zeros. It returns nil for
// indices elsewhere (other windows), which the scatter then handles.
func maxPool2x2Backward(g *Tensor, idx []int64, shape []int) *Tensor {
	planes, h, w := shape[0]*shape[1], shape[2], shape[3]
	oh, ow := g.shape[2], g.shape[3]
	if g.shape[0]*g.shape[1] != planes || 2*oh > h || 2*ow > w || len(idx) != planes*oh*ow {
		return nil
	}
	dx := Empty(Float32, shape...) // every element is written below
	d, gv := dx.Float32s(), g.Float32s()
	for pl := range planes {
		p := d[pl*h*w : (pl+1)*h*w]
		// Short rows may spill into the columns and rows cleared below or
		// the next plane, written after.
		if !simd.MaxPool2x2BackwardF32(d[pl*h*w:], gv[pl*oh*ow:(pl+1)*oh*ow], idx[pl*oh*ow:(pl+1)*oh*ow], oh, w, ow) {
			dx.Recycle()
			return nil
		}
		for i := 0; 2*ow < w && i < 2*oh; i++ { // the inputs in no block
			clear(p[i*w+2*ow : (i+1)*w])
		}
		clear(p[2*oh*w:])
	}
	return dx
}

func scatterPool[T float](dx, g []T, idx []int64, planes, hw, ohw int) {
	for pl := range planes {
		d := dx[pl*hw : (pl+1)*hw]
		for o, v := range g[pl*ohw : (pl+1)*ohw] {
			if i := idx[pl*ohw+o]; i >= 0 {
				d[i] += v
			}
		}
	}
}

// AvgPool2d returns the mean over kh×kw windows of x (N×C×H×W). Padding
// counts toward the divisor, as PyTorch's default count_include_pad=True.
func AvgPool2d(x *Tensor, kh, kw int, p Conv2dParams) *Tensor {
	p = p.norm()
	oh, ow := poolSize("AvgPool2d", x, kh, kw, p)
	n, c, h, w := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
	out := Empty(x.dtype, n, c, oh, ow) // avgPool writes every element
	x = x.Contiguous()
	switch x.dtype {
	case Float32:
		avgPool(out.Float32s(), x.Float32s(), n*c, h, w, kh, kw, oh, ow, p, false)
	case Float64:
		avgPool(out.Float64s(), x.Float64s(), n*c, h, w, kh, kw, oh, ow, p, false)
	default:
		panic(fmt.Sprintf("tensor: AvgPool2d of a %v tensor", x.dtype))
	}
	return out
}

// AvgPool2dBackward returns the gradient of AvgPool2d's input of shape
// given g, the gradient of its output.
func AvgPool2dBackward(g *Tensor, shape []int, kh, kw int, p Conv2dParams) *Tensor {
	p = p.norm()
	dx := New(g.dtype, shape...)
	g = g.Contiguous()
	n, c, h, w := shape[0], shape[1], shape[2], shape[3]
	oh, ow := g.shape[2], g.shape[3]
	switch g.dtype {
	case Float32:
		avgPool(g.Float32s(), dx.Float32s(), n*c, h, w, kh, kw, oh, ow, p, true)
	case Float64:
		avgPool(g.Float64s(), dx.Float64s(), n*c, h, w, kh, kw, oh, ow, p, true)
	}
	return dx
}

// avgPool computes the forward pass (out from x) or, when back is set, adds
// each output gradient out/divisor into the window of x.
func avgPool[T float](out, x []T, planes, h, w, kh, kw, oh, ow int, p Conv2dParams, back bool) {
	for pl := range planes {
		src := x[pl*h*w : (pl+1)*h*w]
		for oi := range oh {
			for oj := range ow {
				i0, j0 := oi*p.StrideH-p.PadH, oj*p.StrideW-p.PadW
				i1, j1 := min(i0+kh, h+p.PadH), min(j0+kw, w+p.PadW)
				div := T((i1 - i0) * (j1 - j0))
				i0, j0, i1, j1 = max(i0, 0), max(j0, 0), min(i1, h), min(j1, w)
				o := pl*oh*ow + oi*ow + oj
				if back {
					v := out[o] / div
					for i := i0; i < i1; i++ {
						for j := j0; j < j1; j++ {
							src[i*w+j] += v
						}
					}
					continue
				}
				var s T
				for i := i0; i < i1; i++ {
					for j := j0; j < j1; j++ {
						s += src[i*w+j]
					}
				}
				out[o] = s / div
			}
		}
	}
}
