package tensor

import "testing"

func BenchmarkMaxPool2x2(b *testing.B) {
	x := Randn(NewRNG(1), 64, 6, 28, 28)
	p := Conv2dParams{StrideH: 2, StrideW: 2}
	for b.Loop() {
		MaxPool2d(x, 2, 2, p)
	}
}

func BenchmarkIm2col(b *testing.B) {
	x := Randn(NewRNG(1), 64, 6, 14, 14)
	w := Randn(NewRNG(1), 16, 6, 5, 5)
	g := convCheck(x, w, Conv2dParams{})
	cols := New(Float32, 150, 8*100)
	for b.Loop() {
		for i := range 64 {
			im2col(cols.Float32s()[(i%8)*100:], x.Select(0, i).Float32s(), g, 8*100)
		}
	}
}

func BenchmarkConv2dLeNet1(b *testing.B) {
	x := Randn(NewRNG(1), 64, 1, 28, 28)
	w := Randn(NewRNG(1), 6, 1, 5, 5)
	for b.Loop() {
		Conv2d(x, w, nil, Conv2dParams{PadH: 2, PadW: 2})
	}
}

func BenchmarkMaxPool2x2Backward(b *testing.B) {
	x := Randn(NewRNG(1), 64, 6, 28, 28)
	_, idx := MaxPool2d(x, 2, 2, Conv2dParams{StrideH: 2, StrideW: 2})
	g := Randn(NewRNG(2), 64, 6, 14, 14)
	for b.Loop() {
		MaxPool2dBackward(g, idx, x.Shape()).Recycle()
	}
}

// BenchmarkConvLeNet measures LeNet's two convolutions, forward and
// backward (the second's input gradient too), as a training step runs them.
func BenchmarkConvLeNet(b *testing.B) {
	rng := NewRNG(1)
	for _, c := range []struct {
		name string
		x, w []int
		p    Conv2dParams
		dx   bool
	}{
		{"conv1", []int{64, 1, 28, 28}, []int{6, 1, 5, 5}, Conv2dParams{PadH: 2, PadW: 2}, false},
		{"conv2", []int{64, 6, 14, 14}, []int{16, 6, 5, 5}, Conv2dParams{}, true},
	} {
		x, w, bias := Randn(rng, c.x...), Randn(rng, c.w...), Randn(rng, c.w[0])
		b.Run(c.name+"/forward", func(b *testing.B) {
			for b.Loop() {
				out, cols := Conv2dCols(x, w, bias, c.p)
				out.Recycle()
				cols.Release()
			}
		})
		out, cols := Conv2dCols(x, w, bias, c.p)
		g := Randn(rng, out.Shape()...)
		b.Run(c.name+"/backward", func(b *testing.B) {
			dw, db := New(Float32, c.w...), New(Float32, c.w[0])
			for b.Loop() {
				var dx *Tensor
				if c.dx {
					dx = new(Tensor)
				}
				dx, _, _ = Conv2dBackward(g, x, w, cols, c.p, dx, dw, db)
				if dx != nil {
					dx.Recycle()
				}
			}
		})
	}
}
