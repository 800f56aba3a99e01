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
