package tensor

import (
	"fmt"
	"math"

	"github.com/godist/godist/internal/simd"
)

// split3 views a contiguous tensor as [outer, n, inner] around dim.
func (t *Tensor) split3(dim int) (outer, n, inner int) {
	dim = t.axis(dim)
	return numel(t.shape[:dim]), t.shape[dim], numel(t.shape[dim+1:])
}

func reducedShape(shape []int, dim int, keepdim bool) []int {
	if keepdim {
		s := append([]int(nil), shape...)
		s[dim] = 1
		return s
	}
	return remove(shape, dim)
}

// Sum sets t to the sum of a over dim (keeping it as size 1 when keepdim)
// and returns t. Float32 sums accumulate in float64.
func (t *Tensor) Sum(a *Tensor, dim int, keepdim bool) *Tensor {
	return t.reduce("Sum", a, dim, keepdim, false)
}

// Mean sets t to the mean of a over dim and returns t.
func (t *Tensor) Mean(a *Tensor, dim int, keepdim bool) *Tensor {
	return t.reduce("Mean", a, dim, keepdim, true)
}

func (t *Tensor) reduce(name string, a *Tensor, dim int, keepdim, mean bool) *Tensor {
	dim = a.axis(dim)
	t.prepareAll(a.dtype, reducedShape(a.shape, dim, keepdim), name)
	checkAlias(t, a, name)
	dst := t.Contiguous()
	src := a.Contiguous()
	outer, n, inner := src.split3(dim)
	switch a.dtype {
	case Float32:
		sumDim(dst.Float32s(), src.Float32s(), outer, n, inner, mean, simd.AccumF64)
	case Float64:
		sumDim(dst.Float64s(), src.Float64s(), outer, n, inner, mean, accumF64)
	default:
		panic(fmt.Sprintf("tensor: %s of a %v tensor", name, a.dtype))
	}
	if dst != t {
		copyStrided(t, dst)
	}
	return t
}

// accumF64 is simd.AccumF64 for float64 rows.
func accumF64(acc, x []float64) {
	x = x[:len(acc)]
	for i, v := range x {
		acc[i] += v
	}
}

// sumDim sums s (outer × n × inner) over its middle dimension into d
// (outer × inner), in float64; accum adds a row of inner values to the
// sums (simd.AccumF64 for float32: the same bits, vectorised).
func sumDim[T float](d, s []T, outer, n, inner int, mean bool, accum func(acc []float64, x []T)) {
	if inner == 1 {
		for o := range outer {
			var a0, a1, a2, a3 float64
			row := s[o*n : (o+1)*n]
			j := 0
			for ; j+4 <= len(row); j += 4 {
				a0 += float64(row[j])
				a1 += float64(row[j+1])
				a2 += float64(row[j+2])
				a3 += float64(row[j+3])
			}
			for ; j < len(row); j++ {
				a0 += float64(row[j])
			}
			sum := (a0 + a1) + (a2 + a3)
			if mean {
				sum /= float64(n)
			}
			d[o] = T(sum)
		}
		return
	}
	// The sums of a block of columns at a time, in float64 on the stack.
	var buf [512]float64
	for o := range outer {
		base := o * n * inner
		for lo := 0; lo < inner; lo += len(buf) {
			acc := buf[:min(len(buf), inner-lo)]
			clear(acc)
			for j := range n {
				accum(acc, s[base+j*inner+lo:base+j*inner+lo+len(acc)])
			}
			out := d[o*inner+lo : o*inner+lo+len(acc)]
			for i := range out {
				if mean {
					out[i] = T(acc[i] / float64(n))
				} else {
					out[i] = T(acc[i])
				}
			}
		}
	}
}

// SumAll sets t to a 0-d tensor holding the sum of all of a's elements.
func (t *Tensor) SumAll(a *Tensor) *Tensor {
	return t.Sum(a.Reshape(-1), 0, false)
}

// MeanAll sets t to a 0-d tensor holding the mean of a's elements.
func (t *Tensor) MeanAll(a *Tensor) *Tensor {
	return t.Mean(a.Reshape(-1), 0, false)
}

// SumTo sets t to a summed down to shape, undoing a broadcast from shape to
// a's shape (the gradient of Expand) and returns t.
func (t *Tensor) SumTo(a *Tensor, shape []int) *Tensor {
	if equalInts(a.shape, shape) {
		return t.Copy(a)
	}
	lead := a.Dim() - len(shape)
	if lead < 0 {
		panic(fmt.Sprintf("tensor: SumTo %v from %v", shape, a.shape))
	}
	cur := a
	for range lead {
		cur = new(Tensor).Sum(cur, 0, false)
	}
	for i, s := range shape {
		if s == 1 && cur.shape[i] != 1 {
			cur = new(Tensor).Sum(cur, i, true)
		} else if s != cur.shape[i] {
			panic(fmt.Sprintf("tensor: SumTo %v from %v", shape, a.shape))
		}
	}
	return t.Copy(cur)
}

// MaxDim returns the maximum of a over dim and the int64 index of the first
// maximum, as torch.max(a, dim).
func MaxDim(a *Tensor, dim int, keepdim bool) (values, indices *Tensor) {
	dim = a.axis(dim)
	shape := reducedShape(a.shape, dim, keepdim)
	values, indices = Empty(a.dtype, shape...), Empty(Int64, shape...)
	src := a.Contiguous()
	outer, n, inner := src.split3(dim)
	if n == 0 {
		panic(fmt.Sprintf("tensor: MaxDim over an empty dimension of %v", a.shape))
	}
	switch a.dtype {
	case Float32:
		maxDim(values.Float32s(), indices.Int64s(), src.Float32s(), outer, n, inner)
	case Float64:
		maxDim(values.Float64s(), indices.Int64s(), src.Float64s(), outer, n, inner)
	case Int64:
		maxDim(values.Int64s(), indices.Int64s(), src.Int64s(), outer, n, inner)
	default:
		panic(fmt.Sprintf("tensor: MaxDim of a %v tensor", a.dtype))
	}
	return values, indices
}

func maxDim[T number](v []T, idx []int64, s []T, outer, n, inner int) {
	for o := range outer {
		for i := range inner {
			base := o*n*inner + i
			best, at := s[base], 0
			for j := 1; j < n; j++ {
				x := s[base+j*inner]
				if x > best || (x != x && best == best) {
					best, at = x, j
				}
			}
			v[o*inner+i], idx[o*inner+i] = best, int64(at)
		}
	}
}

// Argmax returns the int64 indices of the maxima of a over dim.
func Argmax(a *Tensor, dim int) *Tensor {
	_, idx := MaxDim(a, dim, false)
	return idx
}

// Softmax sets t = softmax(a) over dim and returns t.
func (t *Tensor) Softmax(a *Tensor, dim int) *Tensor { return t.softmax("Softmax", a, dim, false) }

// LogSoftmax sets t = log(softmax(a)) over dim, computed stably, and
// returns t.
func (t *Tensor) LogSoftmax(a *Tensor, dim int) *Tensor {
	return t.softmax("LogSoftmax", a, dim, true)
}

func (t *Tensor) softmax(name string, a *Tensor, dim int, log bool) *Tensor {
	dim = a.axis(dim)
	t.prepareAll(a.dtype, a.shape, name)
	dst := t.Contiguous()
	src := a.Contiguous()
	outer, n, inner := src.split3(dim)
	switch a.dtype {
	case Float32:
		softmaxDim(dst.Float32s(), src.Float32s(), outer, n, inner, log)
	case Float64:
		softmaxDim(dst.Float64s(), src.Float64s(), outer, n, inner, log)
	default:
		panic(fmt.Sprintf("tensor: %s of a %v tensor", name, a.dtype))
	}
	if dst != t {
		copyStrided(t, dst)
	}
	return t
}

func softmaxDim[T float](d, s []T, outer, n, inner int, log bool) {
	if d32, ok := any(d).([]float32); ok && inner == 1 {
		softmaxRows32(d32, any(s).([]float32), outer, n, log)
		return
	}
	for o := range outer {
		for i := range inner {
			base := o*n*inner + i
			m := math.Inf(-1)
			for j := range n {
				m = math.Max(m, float64(s[base+j*inner]))
			}
			var sum float64
			for j := range n {
				sum += math.Exp(float64(s[base+j*inner]) - m)
			}
			if log {
				lse := m + math.Log(sum)
				for j := range n {
					d[base+j*inner] = T(float64(s[base+j*inner]) - lse)
				}
			} else {
				for j := range n {
					d[base+j*inner] = T(math.Exp(float64(s[base+j*inner])-m) / sum)
				}
			}
		}
	}
}

// SoftmaxBackward sets t = y·(g - Σ g·y) over dim, the gradient of softmax
// with output y, and returns t.
func (t *Tensor) SoftmaxBackward(g, y *Tensor, dim int) *Tensor {
	return t.softmaxBack("SoftmaxBackward", g, y, dim, false)
}

// LogSoftmaxBackward sets t = g - exp(y)·Σ g over dim, the gradient of
// log-softmax with output y, and returns t.
func (t *Tensor) LogSoftmaxBackward(g, y *Tensor, dim int) *Tensor {
	return t.softmaxBack("LogSoftmaxBackward", g, y, dim, true)
}

func (t *Tensor) softmaxBack(name string, g, y *Tensor, dim int, log bool) *Tensor {
	dim = y.axis(dim)
	t.prepareAll(y.dtype, y.shape, name)
	dst := t.Contiguous()
	g, y = g.Contiguous(), y.Contiguous()
	outer, n, inner := y.split3(dim)
	switch y.dtype {
	case Float32:
		softmaxBackDim(dst.Float32s(), g.Float32s(), y.Float32s(), outer, n, inner, log)
	case Float64:
		softmaxBackDim(dst.Float64s(), g.Float64s(), y.Float64s(), outer, n, inner, log)
	default:
		panic(fmt.Sprintf("tensor: %s of a %v tensor", name, y.dtype))
	}
	if dst != t {
		copyStrided(t, dst)
	}
	return t
}

func softmaxBackDim[T float](d, g, y []T, outer, n, inner int, log bool) {
	for o := range outer {
		for i := range inner {
			base := o*n*inner + i
			var s float64
			for j := range n {
				k := base + j*inner
				if log {
					s += float64(g[k])
				} else {
					s += float64(g[k]) * float64(y[k])
				}
			}
			for j := range n {
				k := base + j*inner
				if log {
					d[k] = T(float64(g[k]) - math.Exp(float64(y[k]))*s)
				} else {
					d[k] = T(float64(y[k]) * (float64(g[k]) - s))
				}
			}
		}
	}
}

// softmaxRows32 is softmaxDim over the last dimension of float32 rows:
// exponentials in the vector kernel (simd.ExpF32, within 1 ulp), sums in
// float64.
func softmaxRows32(d, s []float32, rows, n int, log bool) {
	for r := range rows {
		src, dst := s[r*n:(r+1)*n], d[r*n:(r+1)*n]
		if log && simd.LogSoftmaxF32(dst, src) {
			continue
		}
		if !log && simd.SoftmaxF32(dst, src) {
			continue
		}
		m := src[0]
		for _, v := range src[1:] {
			m = max(m, v)
		}
		for j, v := range src {
			dst[j] = v - m
		}
		var sum float64
		if log {
			// dst keeps s - m; the exponentials go through a scratch row.
			var buf [256]float32
			for lo := 0; lo < n; lo += len(buf) {
				e := buf[:min(len(buf), n-lo)]
				expInto(e, dst[lo:lo+len(e)])
				for _, v := range e {
					sum += float64(v)
				}
			}
			l := float32(math.Log(sum))
			for j := range dst {
				dst[j] -= l
			}
			continue
		}
		expInto(dst, dst)
		for _, v := range dst {
			sum += float64(v)
		}
		inv := float32(1 / sum)
		for j := range dst {
			dst[j] *= inv
		}
	}
}

// expInto sets dst = e^x elementwise (dst may be x).
func expInto(dst, x []float32) {
	k := simd.ExpF32(dst, x)
	for i, v := range x[k:len(dst)] {
		dst[k+i] = exp32(v)
	}
}
