package tensor

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func vals(t *Tensor) []float64 { return t.Values() }

func eqVals(t *testing.T, what string, got *Tensor, want []float64, shape ...int) {
	t.Helper()
	if shape != nil && !equalInts(got.Shape(), shape) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape(), shape)
	}
	g := got.Values()
	if len(g) != len(want) {
		t.Fatalf("%s: %d values %v, want %v", what, len(g), g, want)
	}
	for i := range g {
		if math.Abs(g[i]-want[i]) > 1e-5*(1+math.Abs(want[i])) {
			t.Fatalf("%s: got %v, want %v", what, g, want)
		}
	}
}

func seq(shape ...int) *Tensor {
	t := Zeros(shape...)
	s := t.Float32s()
	for i := range s {
		s[i] = float32(i)
	}
	return t
}

func TestViewsShareStorage(t *testing.T) {
	x := seq(2, 3)
	eqVals(t, "T", x.T(), []float64{0, 3, 1, 4, 2, 5}, 3, 2)
	if x.T().IsContiguous() {
		t.Fatal("transpose reported contiguous")
	}
	eqVals(t, "Narrow", x.Narrow(1, 1, 2), []float64{1, 2, 4, 5}, 2, 2)
	eqVals(t, "Select", x.Select(0, 1), []float64{3, 4, 5}, 3)
	eqVals(t, "Permute", seq(2, 3, 4).Permute(2, 0, 1).Select(0, 1), []float64{1, 5, 9, 13, 17, 21}, 2, 3)
	eqVals(t, "Expand", FromFloat32([]float32{1, 2}, 2, 1).Expand(2, 3), []float64{1, 1, 1, 2, 2, 2}, 2, 3)
	eqVals(t, "Unsqueeze", x.Unsqueeze(1), vals(x), 2, 1, 3)
	eqVals(t, "Reshape(-1)", x.T().Reshape(-1), []float64{0, 3, 1, 4, 2, 5}, 6)
	v := x.Narrow(1, 1, 1)
	v.Set(42, 1, 0)
	if x.At(1, 1) != 42 {
		t.Fatal("write through a view did not reach the base tensor")
	}
	b := x.Bytes()
	f := x.Float32s()
	f[0] = 7
	if math.Float32frombits(uint32(b[0])|uint32(b[1])<<8|uint32(b[2])<<16|uint32(b[3])<<24) != 7 {
		t.Fatal("Bytes is not a view of the storage")
	}
	eqVals(t, "Clone of view", x.T().Clone(), []float64{7, 3, 1, 42, 2, 5}, 3, 2)
}

func TestBroadcastArithmetic(t *testing.T) {
	a := seq(2, 3)
	b := FromFloat32([]float32{10, 20, 30}, 3)
	eqVals(t, "row add", new(Tensor).Add(a, b), []float64{10, 21, 32, 13, 24, 35}, 2, 3)
	c := FromFloat32([]float32{1, 2}, 2, 1)
	eqVals(t, "col mul", new(Tensor).Mul(a, c), []float64{0, 1, 2, 6, 8, 10}, 2, 3)
	eqVals(t, "outer", new(Tensor).Sub(c, b), []float64{-9, -19, -29, -8, -18, -28}, 2, 3)
	eqVals(t, "transposed", new(Tensor).Add(a.T(), a.T()), []float64{0, 6, 2, 8, 4, 10}, 3, 2)
	a.Add(a, Scalar(1))
	eqVals(t, "in place", a, []float64{1, 2, 3, 4, 5, 6})
	eqVals(t, "div", new(Tensor).Div(a, Scalar(2)), []float64{.5, 1, 1.5, 2, 2.5, 3})
	eqVals(t, "int64 add", new(Tensor).Add(FromInt64([]int64{1, 2}), FromInt64([]int64{3, 4})), []float64{4, 6})
	defer func() {
		if recover() == nil {
			t.Fatal("mismatched shapes did not panic")
		}
	}()
	new(Tensor).Add(seq(2, 3), seq(2, 2))
}

func TestPartialAliasPanics(t *testing.T) {
	x := seq(4)
	defer func() {
		if recover() == nil {
			t.Fatal("partial overlap did not panic")
		}
	}()
	x.Narrow(0, 0, 2).Add(x.Narrow(0, 1, 2), x.Narrow(0, 2, 2))
}

func TestUnary(t *testing.T) {
	x := FromFloat32([]float32{-1, 0, 2})
	eqVals(t, "relu", new(Tensor).Relu(x), []float64{0, 0, 2})
	eqVals(t, "exp", new(Tensor).Exp(x), []float64{math.Exp(-1), 1, math.Exp(2)})
	eqVals(t, "sigmoid", new(Tensor).Sigmoid(x), []float64{1 / (1 + math.E), .5, 1 / (1 + math.Exp(-2))})
	eqVals(t, "gelu", new(Tensor).Gelu(x), []float64{-0.15865525393145707, 0, 1.9544997361036416})
	eqVals(t, "tanh", new(Tensor).Tanh(x.T2()), []float64{math.Tanh(-1), 0, math.Tanh(2)})
}

// T2 is a test helper: a non-contiguous copy of a 1-D tensor.
func (t *Tensor) T2() *Tensor {
	n := t.Numel()
	base := New(t.dtype, 2, n)
	base.Select(0, 0).Copy(t)
	return base.T().Select(1, 0)
}

func TestReductions(t *testing.T) {
	x := seq(2, 3, 2)
	eqVals(t, "sum0", new(Tensor).Sum(x, 0, false), []float64{6, 8, 10, 12, 14, 16}, 3, 2)
	eqVals(t, "sum1 keep", new(Tensor).Sum(x, 1, true), []float64{6, 9, 24, 27}, 2, 1, 2)
	eqVals(t, "mean-1", new(Tensor).Mean(x, -1, false), []float64{.5, 2.5, 4.5, 6.5, 8.5, 10.5}, 2, 3)
	eqVals(t, "sumall", new(Tensor).SumAll(x), []float64{66})
	if new(Tensor).SumAll(x).Dim() != 0 {
		t.Fatal("SumAll is not 0-d")
	}
	eqVals(t, "sumto", new(Tensor).SumTo(x, []int{3, 1}), []float64{14, 22, 30}, 3, 1)
	v, i := MaxDim(FromFloat32([]float32{1, 5, 5, 2, 0, 9}, 2, 3), 1, false)
	eqVals(t, "max", v, []float64{5, 9})
	eqVals(t, "argmax (first of ties)", i, []float64{1, 2})
	s := new(Tensor).Softmax(FromFloat32([]float32{1, 2, 3, 1000, 1000, 1000}, 2, 3), 1)
	eqVals(t, "softmax", s, []float64{0.09003057, 0.24472847, 0.66524096, 1. / 3, 1. / 3, 1. / 3})
	ls := new(Tensor).LogSoftmax(FromFloat32([]float32{1, 2, 3}, 1, 3), 1)
	eqVals(t, "logsoftmax", ls, []float64{-2.40760596, -1.40760596, -0.40760596})
}

func naiveMatMul(a, b *Tensor) []float64 {
	m, k, n := a.Size(0), a.Size(1), b.Size(1)
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			for p := range k {
				out[i*n+j] += a.At(i, p) * b.At(p, j)
			}
		}
	}
	return out
}

func TestMatMulLayouts(t *testing.T) {
	g := NewRNG(1)
	for _, sz := range [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 70, 40}, {0, 3, 4}, {3, 0, 4}} {
		m, k, n := sz[0], sz[1], sz[2]
		a, b := Randn(g, m, k), Randn(g, k, n)
		want := naiveMatMul(a, b)
		eqVals(t, "plain", new(Tensor).MatMul(a, b), want, m, n)
		eqVals(t, "a transposed", new(Tensor).MatMul(a.T().Clone().T(), b), want, m, n)
		eqVals(t, "b transposed", new(Tensor).MatMul(a, b.T().Clone().T()), want, m, n)
		eqVals(t, "float64", new(Tensor).MatMul(a.To(Float64), b.To(Float64)), want, m, n)
		acc := Full(Float32, 1, m, n)
		want1 := append([]float64(nil), want...)
		for i := range want1 {
			want1[i]++
		}
		eqVals(t, "AddMatMul", acc.AddMatMul(a, b), want1, m, n)
	}
	// batched
	a, b := Randn(g, 2, 3, 4), Randn(g, 2, 4, 5)
	c := new(Tensor).MatMul(a, b)
	for i := range 2 {
		eqVals(t, "batch", c.Select(0, i), naiveMatMul(a.Select(0, i), b.Select(0, i)), 3, 5)
	}
	w := Randn(g, 4, 5)
	c = new(Tensor).MatMul(a, w)
	eqVals(t, "batch x shared", c.Select(0, 1), naiveMatMul(a.Select(0, 1), w), 3, 5)
	// batched operands that are not contiguous (a recurrent layer's
	// time-major view of a batch-first input), 3-d and 4-d
	at := Randn(g, 3, 2, 4).Transpose(0, 1)
	c = new(Tensor).MatMul(at, w)
	for i := range 2 {
		eqVals(t, "transposed batch x shared", c.Select(0, i), naiveMatMul(at.Select(0, i), w), 3, 5)
	}
	a4, b4 := Randn(g, 3, 2, 2, 4).Transpose(0, 2), Randn(g, 2, 2, 3, 4, 5).Select(2, 1)
	c = new(Tensor).MatMul(a4, b4)
	for i := range 2 {
		for j := range 2 {
			eqVals(t, "4-d batch", c.Select(0, i).Select(0, j), naiveMatMul(a4.Select(0, i).Select(0, j), b4.Select(0, i).Select(0, j)), 3, 5)
		}
	}
}

// TestMatMulBias: a·b + bias gives, bit for bit, the bias copied into
// the destination then AddMatMul (float32 and float64, b in place or
// transposed, 2-d and batched a, sizes around the kernels' tiles).
func TestMatMulBias(t *testing.T) {
	g := NewRNG(3)
	for _, sz := range [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 70, 40}, {100, 128, 384}, {0, 3, 4}, {3, 0, 4}} {
		m, k, n := sz[0], sz[1], sz[2]
		for _, d := range []DType{Float32, Float64} {
			a, bias := Randn(g, 2, m, k).To(d), Randn(g, n).To(d)
			for _, b := range []*Tensor{Randn(g, k, n).To(d), Randn(g, n, k).To(d).T()} {
				want := Empty(d, 2, m, n)
				want.Copy(bias.Expand(2, m, n))
				want.AddMatMul(a, b)
				got := new(Tensor).MatMulBias(a, b, bias)
				if !Equal(got, want) {
					t.Fatalf("%v m=%d k=%d n=%d b strides %v: MatMulBias differs from the bias then AddMatMul", d, m, k, n, b.Strides())
				}
				if m > 0 && n > 0 && k > 0 {
					ref := naiveMatMul(a.Select(0, 1), b)
					for i := range m {
						for j := range n {
							if w := ref[i*n+j] + bias.At(j); math.Abs(got.At(1, i, j)-w) > 1e-4*(1+math.Abs(w)) {
								t.Fatalf("%v m=%d k=%d n=%d: [1][%d][%d] = %v, want %v", d, m, k, n, i, j, got.At(1, i, j), w)
							}
						}
					}
				}
			}
		}
	}
}

func TestConv2dMatchesDirect(t *testing.T) {
	g := NewRNG(2)
	for _, p := range []Conv2dParams{{}, {PadH: 2, PadW: 2}, {StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}, {DilationH: 2, DilationW: 2, PadW: 1}} {
		x, w, b := Randn(g, 2, 3, 9, 8), Randn(g, 4, 3, 3, 3), Randn(g, 4)
		got := Conv2d(x, w, b, p)
		pn := p.norm()
		oh, ow := p.OutSize(9, 8, 3, 3)
		for n := range 2 {
			for o := range 4 {
				for i := range oh {
					for j := range ow {
						s := b.At(o)
						for c := range 3 {
							for ki := range 3 {
								for kj := range 3 {
									ii := i*pn.StrideH - pn.PadH + ki*pn.DilationH
									jj := j*pn.StrideW - pn.PadW + kj*pn.DilationW
									if ii >= 0 && ii < 9 && jj >= 0 && jj < 8 {
										s += x.At(n, c, ii, jj) * w.At(o, c, ki, kj)
									}
								}
							}
						}
						if d := math.Abs(got.At(n, o, i, j) - s); d > 1e-4 {
							t.Fatalf("params %+v: out[%d,%d,%d,%d] = %v, want %v", p, n, o, i, j, got.At(n, o, i, j), s)
						}
					}
				}
			}
		}
	}
}

func TestPooling(t *testing.T) {
	x := seq(1, 1, 4, 4)
	out, idx := MaxPool2d(x, 2, 2, Conv2dParams{StrideH: 2, StrideW: 2})
	eqVals(t, "maxpool", out, []float64{5, 7, 13, 15}, 1, 1, 2, 2)
	eqVals(t, "maxpool idx", idx, []float64{5, 7, 13, 15})
	dx := MaxPool2dBackward(Full(Float32, 1, 1, 1, 2, 2), idx, x.Shape())
	if dx.At(0, 0, 1, 1) != 1 || dx.At(0, 0, 0, 0) != 0 {
		t.Fatalf("maxpool backward %v", dx)
	}
	avg := AvgPool2d(x, 2, 2, Conv2dParams{StrideH: 2, StrideW: 2})
	eqVals(t, "avgpool", avg, []float64{2.5, 4.5, 10.5, 12.5})
	avgp := AvgPool2d(FromFloat32([]float32{4}, 1, 1, 1, 1), 3, 3, Conv2dParams{PadH: 1, PadW: 1})
	eqVals(t, "avgpool counts padding", avgp, []float64{4. / 9})
}

func TestCatStackSplit(t *testing.T) {
	a, b := seq(2, 2), Full(Float32, 9, 2, 1)
	eqVals(t, "cat1", Cat(1, a, b), []float64{0, 1, 9, 2, 3, 9}, 2, 3)
	eqVals(t, "cat0", Cat(0, a, a), []float64{0, 1, 2, 3, 0, 1, 2, 3}, 4, 2)
	eqVals(t, "stack", Stack(0, a, a).Select(0, 1), vals(a), 2, 2)
	parts := seq(7).Split(0, 3)
	if len(parts) != 3 || parts[2].Numel() != 1 {
		t.Fatalf("split into %d parts", len(parts))
	}
	ch := seq(6, 2).Chunk(0, 4)
	if len(ch) != 3 || ch[0].Size(0) != 2 {
		t.Fatalf("chunk: %d parts", len(ch))
	}
}

func TestDTypes(t *testing.T) {
	x := FromFloat32([]float32{1, -2.5, 3.140625, 65504, 1e-7, 70000})
	bf := x.To(BFloat16)
	eqVals(t, "bf16", bf.To(Float32).Narrow(0, 0, 3), []float64{1, -2.5, 3.140625})
	h := x.To(Float16).To(Float32)
	want := []float64{1, -2.5, 3.140625, 65504, 1.1920928955078125e-07, math.Inf(1)}
	for i, v := range h.Values() {
		if v != want[i] {
			t.Fatalf("float16 round trip of %v: %v, want %v", x.At(i), v, want[i])
		}
	}
	for _, f := range []float32{0.1, 1.0 / 3, 1e-5, 6e-8, -1234.5678} {
		if d := math.Abs(float64(Float16ToFloat32(Float16FromFloat32(f)) - f)); d > math.Abs(float64(f))*1e-3+6e-8 {
			t.Fatalf("float16 of %v off by %v", f, d)
		}
		if d := math.Abs(float64(BFloat16ToFloat32(BFloat16FromFloat32(f)) - f)); d > math.Abs(float64(f))*8e-3 {
			t.Fatalf("bfloat16 of %v off by %v", f, d)
		}
	}
	// The contiguous fast paths round and widen as the element-wise
	// path does (a transposed view takes that one).
	m := new(Tensor).MulScalar(Randn(NewRNG(3), 5, 7), 1e3)
	for _, d := range []DType{BFloat16, Float16} {
		fast := m.To(d).To(Float32)
		slow := New(d, 7, 5).Copy(m.T())
		back := New(Float32, 5, 7).Copy(slow.T())
		if !slices.Equal(fast.Values(), back.Values()) {
			t.Fatalf("%v: the contiguous conversion differs from the strided one", d)
		}
	}
	i := FromInt64([]int64{3, -4}).To(Float32)
	eqVals(t, "int64->f32", i, []float64{3, -4})
	if d, err := ParseDType("bfloat16"); err != nil || d != BFloat16 || d.Size() != 2 {
		t.Fatalf("ParseDType: %v %v", d, err)
	}
	for _, d := range []DType{Float32, Float64, Int64, Int32, Uint8, BFloat16, Float16} {
		z := New(d, 3, 2)
		z.Set(1, 2, 1)
		if len(z.Bytes()) != 6*d.Size() || z.At(2, 1) != 1 {
			t.Fatalf("%v storage broken", d)
		}
	}
}

func TestRandomInitIsSeeded(t *testing.T) {
	a := Zeros(100, 30).KaimingUniform(NewRNG(7), math.Sqrt(5))
	b := Zeros(100, 30).KaimingUniform(NewRNG(7), math.Sqrt(5))
	if !Equal(a, b) {
		t.Fatal("same seed, different values")
	}
	bound := 1 / math.Sqrt(30)
	for _, v := range a.Values() {
		if math.Abs(v) > bound {
			t.Fatalf("value %v outside ±%v", v, bound)
		}
	}
}

func TestMaxPoolTiesAndNaN(t *testing.T) {
	nan := float32(math.NaN())
	x := FromFloat32([]float32{
		1, 1, 3, 2, 0, 0,
		0, 1, 3, 4, 0, -1,
		5, nan, -2, -2, -7, -7,
		nan, 1, -2, -2, -7, -7}, 1, 1, 4, 6)
	for _, d := range []DType{Float32, Float64} {
		out, idx := MaxPool2d(x.To(d), 2, 2, Conv2dParams{StrideH: 2, StrideW: 2})
		wantIdx := []float64{0, 9, 4, 18, 14, 16}
		got := out.Values()
		if got[0] != 1 || got[1] != 4 || got[2] != 0 || !math.IsNaN(got[3]) || got[4] != -2 || got[5] != -7 {
			t.Fatalf("%v: values %v", d, got)
		}
		for i, v := range idx.Values() {
			if v != wantIdx[i] {
				t.Fatalf("%v: indices %v, want %v (first maximum, last NaN, as PyTorch)", d, idx.Values(), wantIdx)
			}
		}
	}
}

func TestNewMapped(t *testing.T) {
	mem, err := syscall.Mmap(-1, 0, 1<<16, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skip(err)
	}
	var releases atomic.Int32
	x := NewMapped(Float32, mem, func() { releases.Add(1); syscall.Munmap(mem) }, 100, 10)
	if s := x.Shape(); len(s) != 2 || s[0] != 100 || s[1] != 10 {
		t.Fatalf("shape %v", s)
	}
	v := x.Narrow(0, 10, 5)
	x = nil
	v.Fill(2)
	// Nothing but Release frees the memory: a slice from the tensor points
	// into it without the collector knowing, and is used here after the
	// last use of every tensor.
	f := v.Reshape(-1).Float32s()
	v = nil
	for i := range 20 {
		runtime.GC()
		time.Sleep(time.Millisecond)
		if f[i] != 2 || f[len(f)-1-i] != 2 {
			t.Fatal("slice of a mapped tensor lost its values")
		}
		f[i] = 3
	}
	if releases.Load() != 0 {
		t.Fatal("memory released without Release")
	}
	syscall.Munmap(mem)
	defer func() {
		if recover() == nil {
			t.Fatal("NewMapped accepted memory smaller than the shape")
		}
	}()
	NewMapped(Float32, make([]byte, 8), func() {}, 3)
}

func TestReleaseIdempotent(t *testing.T) {
	mem, err := syscall.Mmap(-1, 0, 1<<16, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skip(err)
	}
	var releases atomic.Int32
	x := NewMapped(Float32, mem, func() { releases.Add(1); syscall.Munmap(mem) }, 100, 10)
	v := x.Narrow(0, 1, 2)
	if x.Released() || v.Released() {
		t.Fatal("released before Release")
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(2)
		go func() { defer wg.Done(); x.Release() }()
		go func() { defer wg.Done(); v.Release() }() // a view releases the same storage
	}
	wg.Wait()
	x.Release()
	if n := releases.Load(); n != 1 {
		t.Fatalf("release ran %d times, want once", n)
	}
	if !x.Released() || !v.Released() {
		t.Fatal("Released is false after Release")
	}
	// A tensor on the heap: Release does nothing.
	h := Zeros(3)
	h.Release()
	h.Release()
	if h.Released() || h.Fill(1).At(2) != 1 {
		t.Fatal("Release changed a heap tensor")
	}
}

func TestReleaseGuard(t *testing.T) {
	if !Guarded {
		t.Skip("needs the build tag godist_guard")
	}
	x := NewOffHeap(Float32, 512, 1024)
	if x.keep == nil {
		t.Skip("mapping failed")
	}
	v := x.Narrow(0, 3, 4)
	x.Release()
	uses := map[string]func(){
		"Bytes":    func() { x.Bytes() },
		"Float32s": func() { v.Contiguous().Float32s() },
		"At":       func() { v.At(0, 0) },
		"Set":      func() { x.Set(1, 0, 0) },
		"Fill":     func() { v.Fill(1) },
		"Add":      func() { x.Add(x, Scalar(1)) },
		"Copy":     func() { Zeros(512, 1024).Copy(x) },
		"MatMul":   func() { new(Tensor).MatMul(v, Zeros(1024, 2)) },
		"Narrow":   func() { x.Narrow(0, 0, 1) },
	}
	for name, use := range uses {
		msg := func() (msg string) {
			defer func() { msg = fmt.Sprint(recover()) }()
			use()
			return ""
		}()
		if !strings.HasPrefix(msg, "tensor: use of a released tensor (released by tensor.TestReleaseGuard (tensor/tensor_test.go:") {
			t.Errorf("%s after Release: panic %q", name, msg)
		}
	}
}

func TestNewOffHeap(t *testing.T) {
	before := offHeapBytes.Load()
	x := NewOffHeap(Float32, 512, 1024) // 2 MiB: mapped
	if x.keep == nil || offHeapBytes.Load()-before != 2<<20 {
		t.Fatalf("2 MiB tensor not mapped off the heap (keep %v, %d bytes mapped)", x.keep, offHeapBytes.Load()-before)
	}
	if s := x.Shape(); len(s) != 2 || s[0] != 512 || s[1] != 1024 || x.DType() != Float32 {
		t.Fatalf("shape %v dtype %v", s, x.DType())
	}
	for _, v := range x.Float32s() {
		if v != 0 {
			t.Fatal("off-heap tensor not zeroed")
		}
	}
	x.Fill(3)
	v := x.Narrow(0, 500, 12)
	v.Fill(4)
	if v.At(11, 1023) != 4 || v.Float32s()[0] != 4 || x.At(0, 0) != 3 {
		t.Fatal("view of an off-heap tensor lost its values")
	}
	// Release (of any view) frees it, once.
	v.Release()
	x.Release()
	if offHeapBytes.Load() != before {
		t.Fatalf("%d bytes still mapped after Release", offHeapBytes.Load()-before)
	}
	// Small tensors stay on the heap.
	if s := NewOffHeap(Float32, 10); s.keep != nil || s.Numel() != 10 {
		t.Fatal("small tensor mapped off the heap")
	}
}

// TestSumOfWideColumns sums over a leading dimension with more columns
// than the kernel's block of accumulators.
func TestSumOfWideColumns(t *testing.T) {
	const rows, cols = 5, 1300
	x := New(Float32, 2, rows, cols)
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(i%11) - 5
	}
	for _, mean := range []bool{false, true} {
		var got *Tensor
		if mean {
			got = new(Tensor).Mean(x, 1, false)
		} else {
			got = new(Tensor).Sum(x, 1, false)
		}
		for o := range 2 {
			for c := range cols {
				var want float64
				for r := range rows {
					want += x.At(o, r, c)
				}
				if mean {
					want /= rows
				}
				if g := got.At(o, c); math.Abs(g-want) > 1e-5 {
					t.Fatalf("mean=%v [%d %d]: %v, want %v", mean, o, c, g, want)
				}
			}
		}
	}
}

// TestConv2dBackwardIntoDestinations computes a convolution's gradients
// into sized destinations holding garbage: they must come out as the
// allocated ones, overwritten, not added to.
func TestConv2dBackwardIntoDestinations(t *testing.T) {
	rng := NewRNG(5)
	x, w := Randn(rng, 3, 2, 7, 7), Randn(rng, 4, 2, 3, 3)
	p := Conv2dParams{PadH: 1, PadW: 1}
	out, cols := Conv2dCols(x, w, nil, p)
	g := Randn(rng, out.Shape()...)
	dx, dw, db := Conv2dBackward(g, x, w, cols, p, new(Tensor), new(Tensor), new(Tensor))
	fx, fw, fb := Full(Float32, 7, x.Shape()...), Full(Float32, 7, w.Shape()...), Full(Float32, 7, 4)
	gx, gw, gb := Conv2dBackward(g, x, w, cols, p, fx, fw, fb)
	if gx != fx || gw != fw || gb != fb {
		t.Fatal("Conv2dBackward did not return its destinations")
	}
	for _, c := range [][2]*Tensor{{dx, gx}, {dw, gw}, {db, gb}} {
		if !Equal(c[0], c[1]) {
			t.Fatalf("gradient into a destination %v differs from the allocated one %v", c[1], c[0])
		}
	}
	if nx, nw, nb := Conv2dBackward(g, x, w, cols, p, nil, new(Tensor), nil); nx != nil || nb != nil || !Equal(nw, dw) {
		t.Fatal("unwanted gradients computed, or the weight gradient alone differs")
	}
}

// A window or kernel that does not fit the (padded) input is refused with
// a message naming it, as PyTorch refuses it, rather than read outside
// the input: Go's division once made such outputs size 1.
func TestWindowLargerThanInputRefused(t *testing.T) {
	x := Randn(NewRNG(1), 1, 1, 4, 4)
	refused := func(name string, f func()) {
		t.Helper()
		defer func() {
			r := recover()
			if r == nil {
				t.Fatalf("%s did not panic", name)
			}
			if s, _ := r.(string); !strings.Contains(s, "does not fit") && !strings.Contains(s, "larger than") {
				t.Fatalf("%s: %v", name, r)
			}
		}()
		f()
	}
	refused("MaxPool2d 5x5 stride 2", func() { MaxPool2d(x, 5, 5, Conv2dParams{StrideH: 2, StrideW: 2}) })
	refused("MaxPool2d 6x6", func() { MaxPool2d(x, 6, 6, Conv2dParams{}) })
	refused("MaxPool2d 0x2", func() { MaxPool2d(x, 0, 2, Conv2dParams{}) })
	refused("AvgPool2d 5x5 stride 2", func() { AvgPool2d(x, 5, 5, Conv2dParams{StrideH: 2, StrideW: 2}) })
	refused("Conv2d 5x5 stride 2", func() { Conv2d(x, Randn(NewRNG(2), 1, 1, 5, 5), nil, Conv2dParams{StrideH: 2, StrideW: 2}) })
	// Windows that fit still work, padding included.
	if out, _ := MaxPool2d(x, 5, 5, Conv2dParams{StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}); out.Size(2) != 1 {
		t.Fatalf("a 5x5 window over a 4x4 input padded by 1: shape %v, want 1x1", out.Shape())
	}
	if oh, ow := (Conv2dParams{StrideH: 2, StrideW: 2}).OutSize(4, 4, 5, 5); oh >= 1 || ow >= 1 {
		t.Fatalf("OutSize(4x4, 5x5, stride 2) = %dx%d, want below 1", oh, ow)
	}
}
