package tensor

import (
	"fmt"
	"math"
	"testing"
)

// directCases are convolutions the direct path takes: LeNet's two, odd
// sizes, one channel and many, batch 1, padding up to the kernel's reach,
// dilation, non-square kernels and a 1×1 kernel.
var directCases = []struct {
	n, c, h, w, oc, kh, kw int
	p                      Conv2dParams
}{
	{64, 1, 28, 28, 6, 5, 5, Conv2dParams{PadH: 2, PadW: 2}},
	{64, 6, 14, 14, 16, 5, 5, Conv2dParams{}},
	{1, 1, 5, 5, 1, 5, 5, Conv2dParams{}},
	{1, 3, 7, 9, 7, 3, 3, Conv2dParams{PadH: 1, PadW: 1}},
	{2, 2, 9, 8, 13, 3, 2, Conv2dParams{PadH: 2, PadW: 1}},
	{3, 5, 11, 6, 4, 1, 1, Conv2dParams{}},
	{2, 4, 12, 13, 9, 3, 3, Conv2dParams{DilationH: 2, DilationW: 3, PadH: 1, PadW: 6}},
	{5, 6, 10, 10, 16, 5, 5, Conv2dParams{PadH: 4, PadW: 4}},
	{1, 2, 33, 17, 3, 4, 6, Conv2dParams{PadH: 3, PadW: 0}},
	{4, 7, 6, 6, 1, 2, 2, Conv2dParams{PadW: 1}},
	{0, 2, 6, 6, 3, 3, 3, Conv2dParams{PadH: 1, PadW: 1}},
	{2, 2, 5, 5, 3, 2, 2, Conv2dParams{DilationH: 3, DilationW: 3}}, // input row 2 in no window
}

// TestConvDirectMatchesIm2col checks the direct path's output and its
// three gradients against the patch-matrix path's, in float32 (the AVX2
// kernels where there are some) and float64, with and without the kept
// columns.
func TestConvDirectMatchesIm2col(t *testing.T) {
	rng := NewRNG(9)
	var modes [2]bool // the forward pass by rows, on the grid
	for _, c := range directCases {
		for _, dt := range []DType{Float32, Float64} {
			name := fmt.Sprintf("%v x(%d,%d,%d,%d) w(%d,%d,%d) %+v", dt, c.n, c.c, c.h, c.w, c.oc, c.kh, c.kw, c.p)
			x := Randn(rng, c.n, c.c, c.h, c.w).To(dt)
			w := Randn(rng, c.oc, c.c, c.kh, c.kw).To(dt)
			b := Randn(rng, c.oc).To(dt)
			g := convCheck(x, w, c.p)
			if !useDirect(g, dt) {
				t.Fatalf("%s: not on the direct path", name)
			}
			if newDirectGeom(g).byRow {
				modes[0] = true
			} else {
				modes[1] = true
			}
			want, wcols := im2colConv(x, w, b, g)
			got, cols := Conv2dCols(x, w, b, c.p)
			if !cols.direct {
				t.Fatalf("%s: columns not the direct path's", name)
			}
			tol := 1e-4
			if dt == Float64 {
				tol = 1e-11
			}
			convClose(t, name+" output", got, want, tol)
			gy := Randn(rng, want.Shape()...).To(dt)
			wx, ww, wb := im2colConvBackward(gy, x, w, wcols, g, new(Tensor), new(Tensor), new(Tensor))
			for _, kept := range []*ConvColumns{cols, nil} {
				gx, gw, gb := Conv2dBackward(gy, x, w, kept, c.p, new(Tensor), new(Tensor), new(Tensor))
				convClose(t, name+" input gradient", gx, wx, tol)
				convClose(t, name+" weight gradient", gw, ww, tol)
				convClose(t, name+" bias gradient", gb, wb, tol)
			}
			cols.Release()
			wcols.Release()
		}
	}
	if !modes[0] || !modes[1] {
		t.Fatalf("the cases take the forward pass by rows (%v) and on the grid (%v): want both", modes[0], modes[1])
	}
}

// convClose fails unless got and want agree within tol relative to want's
// largest magnitude.
func convClose(t *testing.T, what string, got, want *Tensor, tol float64) {
	t.Helper()
	if !equalInts(got.Shape(), want.Shape()) || got.DType() != want.DType() {
		t.Fatalf("%s: %v%v, want %v%v", what, got.DType(), got.Shape(), want.DType(), want.Shape())
	}
	gv, wv := got.Contiguous().To(Float64).Float64s(), want.Contiguous().To(Float64).Float64s()
	scale := 1.0
	for _, v := range wv {
		scale = max(scale, math.Abs(v))
	}
	for i := range gv {
		if d := math.Abs(gv[i] - wv[i]); !(d <= tol*scale) {
			t.Fatalf("%s: element %d = %v, want %v", what, i, gv[i], wv[i])
		}
	}
}

// TestConvDirectGradients checks the direct path's gradients in float64
// against central finite differences of the sum of the output weighted by
// a fixed random tensor.
func TestConvDirectGradients(t *testing.T) {
	rng := NewRNG(11)
	for _, c := range directCases {
		if c.n*c.c*c.h*c.w > 2000 || c.n == 0 {
			continue // LeNet's sizes: covered against im2col above
		}
		x := Randn(rng, c.n, c.c, c.h, c.w).To(Float64)
		w := Randn(rng, c.oc, c.c, c.kh, c.kw).To(Float64)
		b := Randn(rng, c.oc).To(Float64)
		out := Conv2d(x, w, b, c.p)
		gy := Randn(rng, out.Shape()...).To(Float64)
		loss := func() float64 {
			o := Conv2d(x, w, b, c.p).Float64s()
			s := 0.0
			for i, v := range gy.Float64s() {
				s += v * o[i]
			}
			return s
		}
		gx, gw, gb := Conv2dBackward(gy, x, w, nil, c.p, new(Tensor), new(Tensor), new(Tensor))
		name := fmt.Sprintf("x(%d,%d,%d,%d) w(%d,%d,%d) %+v", c.n, c.c, c.h, c.w, c.oc, c.kh, c.kw, c.p)
		for _, v := range []struct {
			what    string
			param   *Tensor
			grad    *Tensor
			samples int
		}{{"input", x, gx, 40}, {"weight", w, gw, 40}, {"bias", b, gb, 40}} {
			vals, grad := v.param.Float64s(), v.grad.Float64s()
			for s := range min(v.samples, len(vals)) {
				i := (s * 7919) % len(vals)
				keep := vals[i]
				const eps = 1e-6
				vals[i] = keep + eps
				up := loss()
				vals[i] = keep - eps
				down := loss()
				vals[i] = keep
				num := (up - down) / (2 * eps)
				if math.Abs(num-grad[i]) > 1e-6*max(1, math.Abs(num)) {
					t.Fatalf("%s: %s gradient [%d] = %v, finite differences %v", name, v.what, i, grad[i], num)
				}
			}
		}
	}
}

// TestMaxPool2x2Float32MatchesGeneral checks 2×2 pooling of float32 (the
// vector kernel and its scalar rows) against the general window loop,
// with indices, on LeNet's shapes and odd ones, with ties,
// signed zeros and NaNs.
func TestMaxPool2x2Float32MatchesGeneral(t *testing.T) {
	rng := NewRNG(13)
	p := Conv2dParams{StrideH: 2, StrideW: 2}
	for _, s := range [][4]int{{64, 6, 28, 28}, {64, 16, 10, 10}, {1, 1, 2, 2}, {2, 3, 5, 7}, {1, 2, 9, 33}, {3, 1, 17, 16}, {1, 1, 3, 2}} {
		x := Randn(rng, s[:]...)
		v := x.Float32s()
		for i := range v {
			switch i % 11 {
			case 3:
				v[i] = 0.5 // ties
			case 5:
				v[i] = float32(math.Copysign(0, float64(i%2*2-1)))
			case 7:
				if i%3 == 0 {
					v[i] = float32(math.NaN())
				}
			}
		}
		got, gotIdx := MaxPool2d(x, 2, 2, p)
		// float64 takes the generic kernel, which the scalar reference checks.
		want, wantIdx := MaxPool2d(x.To(Float64), 2, 2, p)
		for i, g := range got.Float32s() {
			w := float32(want.Float64s()[i])
			same := g == w || g != g && w != w // the general kernel returns +0 for a window of ±0
			if !same || gotIdx.Int64s()[i] != wantIdx.Int64s()[i] {
				t.Fatalf("%v: output %d = %v at %d, want %v at %d", s, i, g, gotIdx.Int64s()[i], w, wantIdx.Int64s()[i])
			}
		}
	}
}

// TestReluFloat32Kernels checks Relu and ReluBackward of float32 (vector
// kernels for the first multiple of 32 elements, Go for the rest) element
// by element against the float64 path.
func TestReluFloat32Kernels(t *testing.T) {
	rng := NewRNG(17)
	for _, n := range []int{5, 32, 100, 64 * 6 * 28 * 28} {
		x := Randn(rng, n)
		v := x.Float32s()
		for i := 0; i < n; i += 7 {
			v[i] = float32(math.Copysign(0, -1))
		}
		v[n/2] = float32(math.NaN())
		y := new(Tensor).Relu(x)
		want := new(Tensor).Relu(x.To(Float64))
		g := Randn(rng, n)
		d := new(Tensor).ReluBackward(g, y)
		wantD := new(Tensor).ReluBackward(g.To(Float64), want)
		for i := range n {
			a, b := y.Float32s()[i], float32(want.Float64s()[i])
			if !(a == b && math.Signbit(float64(a)) == math.Signbit(float64(b)) || a != a && b != b) {
				t.Fatalf("n %d: relu(%v) = %v, want %v", n, v[i], a, b)
			}
			if a == a { // the float64 path drops the gradient at NaN
				if da, db := d.Float32s()[i], float32(wantD.Float64s()[i]); da != db {
					t.Fatalf("n %d: gradient at %v = %v, want %v", n, a, da, db)
				}
			}
		}
	}
}

// TestConvDirectChoice checks which convolutions take the direct path.
func TestConvDirectChoice(t *testing.T) {
	for _, c := range []struct {
		x, w []int
		p    Conv2dParams
		want bool
	}{
		{[]int{64, 1, 28, 28}, []int{6, 1, 5, 5}, Conv2dParams{PadH: 2, PadW: 2}, true},
		{[]int{64, 6, 14, 14}, []int{16, 6, 5, 5}, Conv2dParams{}, true},
		{[]int{2, 3, 9, 9}, []int{4, 3, 3, 3}, Conv2dParams{StrideH: 2, StrideW: 2}, false},
		{[]int{2, 3, 9, 9}, []int{4, 3, 3, 3}, Conv2dParams{PadH: 3, PadW: 1}, false}, // pad beyond the kernel's reach
		{[]int{1, 3, 224, 224}, []int{8, 3, 3, 3}, Conv2dParams{PadH: 1, PadW: 1}, false},
		{[]int{1, 1, 60, 60}, []int{512, 1, 3, 3}, Conv2dParams{}, false}, // the output gradient's planes are large
	} {
		x, w := New(Float32, c.x...), New(Float32, c.w...)
		if got := useDirect(convCheck(x, w, c.p), Float32); got != c.want {
			t.Errorf("x %v w %v %+v: direct %v, want %v", c.x, c.w, c.p, got, c.want)
		}
	}
}

// TestMaxPoolBackwardDense checks MaxPool2dBackward (written densely when
// the indices allow) bit for bit against a scatter into zeros, for 2×2
// pooling of odd and even sizes and for overlapping windows, whose
// indices may or may not lie in the 2×2 blocks.
func TestMaxPoolBackwardDense(t *testing.T) {
	rng := NewRNG(23)
	for _, c := range []struct {
		shape  []int
		kernel int
		p      Conv2dParams
	}{
		{[]int{64, 6, 28, 28}, 2, Conv2dParams{StrideH: 2, StrideW: 2}},
		{[]int{3, 16, 10, 10}, 2, Conv2dParams{StrideH: 2, StrideW: 2}},
		{[]int{2, 3, 7, 9}, 2, Conv2dParams{StrideH: 2, StrideW: 2}},
		{[]int{1, 1, 33, 34}, 2, Conv2dParams{StrideH: 2, StrideW: 2}},
		{[]int{2, 2, 8, 8}, 3, Conv2dParams{StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}},
		{[]int{2, 2, 9, 9}, 3, Conv2dParams{StrideH: 2, StrideW: 2}},
		{[]int{2, 2, 6, 6}, 1, Conv2dParams{StrideH: 2, StrideW: 2}},
	} {
		for trial := range 3 {
			x := Randn(rng, c.shape...)
			if trial == 2 { // flat regions: the first of equal maxima
				for i, v := range x.Float32s() {
					x.Float32s()[i] = float32(math.Round(float64(v)))
				}
			}
			out, idx := MaxPool2d(x, c.kernel, c.kernel, c.p)
			g := Randn(rng, out.Shape()...)
			g.Float32s()[0] = float32(math.Copysign(0, -1))
			got := MaxPool2dBackward(g, idx, c.shape)
			want := make([]float32, x.Numel())
			oh, ow := out.Size(2), out.Size(3)
			hw := c.shape[2] * c.shape[3]
			for k, at := range idx.Int64s() {
				want[k/(oh*ow)*hw+int(at)] += g.Float32s()[k]
			}
			for i, v := range got.Float32s() {
				if math.Float32bits(v) != math.Float32bits(want[i]) {
					t.Fatalf("%v kernel %d %+v: dx[%d] = %v, want %v", c.shape, c.kernel, c.p, i, v, want[i])
				}
			}
		}
	}
}
