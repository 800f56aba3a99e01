package tensor_test

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godist/godist/checkpoint/paritytest"
	"github.com/godist/godist/tensor"
)

var bf16Ref = &paritytest.Ref{Path: filepath.Join("..", "testdata", "parity", "bf16_parity.safetensors")}

// TestBF16MatMulParity checks bfloat16 products (MatMul, MatMulBias with
// a transposed weight, batched) against PyTorch 1.13's
// (testdata/parity/make_bf16_parity.py). godist widens to float32, sums
// in float32 and rounds once, so every result is within half a bfloat16
// step (plus the float32 sum's error) of the exact product of the
// bfloat16 operands. PyTorch's linear (addmm) does the same in its own
// order: a result may differ from it by one step where the float32 sum
// lies near a rounding boundary, never by more. PyTorch 1.13's matmul
// and bmm of bfloat16 on a CPU without AVX-512 (its generic BLAS, as on
// this machine) keep partial sums in bfloat16 and land up to several
// steps from the exact product: there godist must be at least as close
// to it as PyTorch is.
func TestBF16MatMulParity(t *testing.T) {
	all := bf16Ref.All(t)
	cases := 0
	for name := range all {
		c, ok := strings.CutSuffix(name, ".out")
		if !ok {
			continue
		}
		cases++
		a, b, want := all[c+".a"], all[c+".b"], all[c+".out"]
		if a.DType() != tensor.BFloat16 || want.DType() != tensor.BFloat16 {
			t.Fatalf("%s: stored as %v, %v", c, a.DType(), want.DType())
		}
		var got *tensor.Tensor
		bias := all[c+".bias"]
		if bias != nil {
			got = new(tensor.Tensor).MatMulBias(a, b.T(), bias)
		} else {
			got = new(tensor.Tensor).MatMul(a, b)
		}
		if got.DType() != tensor.BFloat16 {
			t.Fatalf("%s: result %v, want bfloat16", c, got.DType())
		}
		// The exact product, in float64 from the same bfloat16 values.
		a64, b64 := a.To(tensor.Float64), b.To(tensor.Float64)
		if bias != nil {
			b64 = b64.T()
		}
		exact := new(tensor.Tensor).MatMul(a64, b64)
		if bias != nil {
			exact.Add(exact, bias.To(tensor.Float64))
		}
		g, w, e := got.Values(), want.Values(), exact.Values()
		off := 0
		var errGodist, errTorch float64
		for i := range g {
			if d := math.Abs(g[i] - e[i]); d > 0.5*bf16Step(e[i])+1e-5*(1+math.Abs(e[i])) {
				t.Errorf("%s[%d]: %v, exact %v: not the exact product rounded", c, i, g[i], e[i])
			}
			errGodist += math.Abs(g[i] - e[i])
			errTorch += math.Abs(w[i] - e[i])
			if bias == nil {
				continue
			}
			if d := math.Abs(g[i] - w[i]); d > bf16Step(w[i]) {
				t.Errorf("%s[%d]: %v, PyTorch %v (exact %v): more than one bfloat16 step apart", c, i, g[i], w[i], e[i])
			} else if d > 0 {
				off++
			}
		}
		if off*20 > len(g) {
			t.Errorf("%s: %d of %d elements differ from PyTorch's by a step: more than rounding boundaries explain", c, off, len(g))
		}
		if errGodist > errTorch {
			t.Errorf("%s: godist's summed error from the exact product %g, PyTorch's %g: want godist's no larger", c, errGodist, errTorch)
		}
		t.Logf("%s: summed error from the exact product: godist %.4g, PyTorch %.4g", c, errGodist, errTorch)
	}
	if cases != 7 {
		t.Fatalf("%d cases in %s, want 7", cases, bf16Ref.Path)
	}
}

// bf16Step is the spacing of bfloat16 values at x's magnitude.
func bf16Step(x float64) float64 {
	if x == 0 {
		return math.Ldexp(1, -133)
	}
	_, e := math.Frexp(x)
	return math.Ldexp(1, e-8)
}

// TestHalfMatMulIsFloat32Rounded checks that every bfloat16 and float16
// product (plain, accumulating, transposed operands, with a bias) is bit
// for bit the float32 product of the widened operands, rounded once, and
// that a float16 product beyond float16's range is infinite.
func TestHalfMatMulIsFloat32Rounded(t *testing.T) {
	for _, d := range []tensor.DType{tensor.BFloat16, tensor.Float16} {
		t.Run(d.String(), func(t *testing.T) {
			rng := tensor.NewRNG(7)
			bf := func(shape ...int) *tensor.Tensor { return tensor.Randn(rng, shape...).To(d) }
			f32 := func(x *tensor.Tensor) *tensor.Tensor { return x.To(tensor.Float32) }
			same := func(what string, got, want32 *tensor.Tensor) {
				t.Helper()
				if got.DType() != d {
					t.Fatalf("%s: %v, want %v", what, got.DType(), d)
				}
				want := want32.To(d)
				g, w := got.Values(), want.Values()
				for i := range g {
					if g[i] != w[i] {
						t.Fatalf("%s[%d]: %v, want %v", what, i, g[i], w[i])
					}
				}
			}
			a, b := bf(13, 37), bf(37, 21)
			same("MatMul", new(tensor.Tensor).MatMul(a, b), new(tensor.Tensor).MatMul(f32(a), f32(b)))
			at, bt := bf(37, 13), bf(21, 37)
			same("MatMul of transposes", new(tensor.Tensor).MatMul(at.T(), bt.T()), new(tensor.Tensor).MatMul(f32(at).T(), f32(bt).T()))
			c := bf(13, 21)
			got := c.Clone().AddMatMul(a, b)
			want := f32(c).AddMatMul(f32(a), f32(b))
			same("AddMatMul", got, want)
			bias := bf(21)
			same("MatMulBias", new(tensor.Tensor).MatMulBias(a, b, bias), new(tensor.Tensor).MatMulBias(f32(a), f32(b), f32(bias)))
			x, y := bf(2, 3, 9, 37), bf(2, 3, 37, 5)
			same("batched", new(tensor.Tensor).MatMul(x, y), new(tensor.Tensor).MatMul(f32(x), f32(y)))
			if d != tensor.Float16 {
				return
			}
			// 300 × 300 · 1 = 90,000: beyond float16's 65,504.
			big := tensor.Full(d, 300, 1, 1)
			if v := new(tensor.Tensor).MatMul(big, big).Values()[0]; !math.IsInf(v, 1) {
				t.Fatalf("float16 300·300 = %v, want +Inf", v)
			}
		})
	}
}

// BenchmarkMatMulBF16 times a GPT-sized product (2,048 tokens of width
// 128 by a 128×512 weight) in bfloat16 beside float32.
func BenchmarkMatMulBF16(b *testing.B) {
	rng := tensor.NewRNG(1)
	for _, d := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		x, w := tensor.Randn(rng, 2048, 128).To(d), tensor.Randn(rng, 128, 512).To(d)
		out := new(tensor.Tensor)
		b.Run(d.String(), func(b *testing.B) {
			for b.Loop() {
				out.MatMul(x, w)
			}
		})
	}
}

// TestRoundTo: RoundTo is To(d) then To(float32) bit for bit, for a
// contiguous tensor (long enough for the vector kernels, with a tail), a
// transposed view, and in place.
func TestRoundTo(t *testing.T) {
	rng := tensor.NewRNG(11)
	for _, d := range []tensor.DType{tensor.BFloat16, tensor.Float16} {
		x := tensor.Randn(rng, 37, 23).MulScalar(tensor.Randn(rng, 37, 23), 300) // some beyond float16's range
		for _, a := range []*tensor.Tensor{x, x.T()} {
			want := a.To(d).To(tensor.Float32).Values()
			got := new(tensor.Tensor).RoundTo(a, d).Values()
			in := a.Clone()
			in.RoundTo(in, d)
			for i, w := range want {
				if got[i] != w || in.Values()[i] != w {
					t.Fatalf("%v [%d]: %v (in place %v), want %v", d, i, got[i], in.Values()[i], w)
				}
			}
		}
	}
}
