package autograd

import (
	"testing"

	"github.com/godist/godist/tensor"
)

func rnd(g *tensor.RNG, shape ...int) *tensor.Tensor {
	return tensor.New(tensor.Float64, shape...).Normal(g, 0, 1)
}

func positive(g *tensor.RNG, shape ...int) *tensor.Tensor {
	return tensor.New(tensor.Float64, shape...).Uniform(g, 0.5, 2)
}

// awayFromZero avoids the kinks of relu/max/abs where finite differences
// are meaningless.
func awayFromZero(g *tensor.RNG, shape ...int) *tensor.Tensor {
	t := rnd(g, shape...)
	v := t.Float64s()
	for i := range v {
		if v[i] >= 0 {
			v[i] += 0.1
		} else {
			v[i] -= 0.1
		}
	}
	return t
}

func TestGradCheckOps(t *testing.T) {
	g := tensor.NewRNG(1)
	cases := []struct {
		name string
		f    func(in []*Var) *Var
		in   []*tensor.Tensor
	}{
		{"Add broadcast", func(v []*Var) *Var { return Add(v[0], v[1]) }, []*tensor.Tensor{rnd(g, 3, 4), rnd(g, 4)}},
		{"Sub broadcast", func(v []*Var) *Var { return Sub(v[0], v[1]) }, []*tensor.Tensor{rnd(g, 3, 1), rnd(g, 2, 1, 4)}},
		{"Mul broadcast", func(v []*Var) *Var { return Mul(v[0], v[1]) }, []*tensor.Tensor{rnd(g, 3, 4), rnd(g, 3, 1)}},
		{"Div", func(v []*Var) *Var { return Div(v[0], v[1]) }, []*tensor.Tensor{rnd(g, 2, 3), positive(g, 2, 3)}},
		{"AddScalar", func(v []*Var) *Var { return AddScalar(v[0], 3) }, []*tensor.Tensor{rnd(g, 5)}},
		{"MulScalar", func(v []*Var) *Var { return MulScalar(v[0], -2) }, []*tensor.Tensor{rnd(g, 5)}},
		{"Neg", func(v []*Var) *Var { return Neg(v[0]) }, []*tensor.Tensor{rnd(g, 5)}},
		{"Square", func(v []*Var) *Var { return Square(v[0]) }, []*tensor.Tensor{rnd(g, 5)}},
		{"Sqrt", func(v []*Var) *Var { return Sqrt(v[0]) }, []*tensor.Tensor{positive(g, 5)}},
		{"Exp", func(v []*Var) *Var { return Exp(v[0]) }, []*tensor.Tensor{rnd(g, 2, 3)}},
		{"Log", func(v []*Var) *Var { return Log(v[0]) }, []*tensor.Tensor{positive(g, 2, 3)}},
		{"Tanh", func(v []*Var) *Var { return Tanh(v[0]) }, []*tensor.Tensor{rnd(g, 2, 3)}},
		{"Sigmoid", func(v []*Var) *Var { return Sigmoid(v[0]) }, []*tensor.Tensor{rnd(g, 2, 3)}},
		{"Relu", func(v []*Var) *Var { return Relu(v[0]) }, []*tensor.Tensor{awayFromZero(g, 2, 3)}},
		{"Gelu", func(v []*Var) *Var { return Gelu(v[0]) }, []*tensor.Tensor{rnd(g, 2, 3)}},
		{"Sum", func(v []*Var) *Var { return Sum(v[0], 1, false) }, []*tensor.Tensor{rnd(g, 2, 3, 4)}},
		{"Sum keepdim", func(v []*Var) *Var { return Sum(v[0], -1, true) }, []*tensor.Tensor{rnd(g, 2, 3, 4)}},
		{"Mean", func(v []*Var) *Var { return Mean(v[0], 0, false) }, []*tensor.Tensor{rnd(g, 2, 3)}},
		{"SumAll", func(v []*Var) *Var { return SumAll(v[0]) }, []*tensor.Tensor{rnd(g, 2, 3)}},
		{"MeanAll", func(v []*Var) *Var { return MeanAll(v[0]) }, []*tensor.Tensor{rnd(g, 2, 3)}},
		{"Max", func(v []*Var) *Var { return Max(v[0], 1, false) }, []*tensor.Tensor{rnd(g, 3, 5)}},
		{"Softmax", func(v []*Var) *Var { return Softmax(v[0], 1) }, []*tensor.Tensor{rnd(g, 3, 4)}},
		{"Attention causal", func(v []*Var) *Var { return Attention(v[0], 2, true) }, []*tensor.Tensor{rnd(g, 2, 5, 12)}},
		{"Attention full", func(v []*Var) *Var { return Attention(v[0], 3, false) }, []*tensor.Tensor{rnd(g, 2, 4, 18)}},
		{"Attention causal, two row blocks", func(v []*Var) *Var { return Attention(v[0], 2, true) }, []*tensor.Tensor{rnd(g, 1, 130, 6)}},
		{"Attention of a projection", func(v []*Var) *Var { return Attention(Linear(v[0], v[1], nil), 2, true) },
			[]*tensor.Tensor{rnd(g, 2, 3, 4), rnd(g, 12, 4)}},
		{"Softmax dim0", func(v []*Var) *Var { return Softmax(v[0], 0) }, []*tensor.Tensor{rnd(g, 3, 4)}},
		{"LogSoftmax", func(v []*Var) *Var { return LogSoftmax(v[0], -1) }, []*tensor.Tensor{rnd(g, 3, 4)}},
		{"MatMul", func(v []*Var) *Var { return MatMul(v[0], v[1]) }, []*tensor.Tensor{rnd(g, 3, 4), rnd(g, 4, 2)}},
		{"MatMul batched", func(v []*Var) *Var { return MatMul(v[0], v[1]) }, []*tensor.Tensor{rnd(g, 2, 3, 4), rnd(g, 2, 4, 2)}},
		{"MatMul shared", func(v []*Var) *Var { return MatMul(v[0], v[1]) }, []*tensor.Tensor{rnd(g, 2, 3, 4), rnd(g, 4, 2)}},
		{"MatMul transposed", func(v []*Var) *Var { return MatMul(Transpose(v[0], 0, 1), v[1]) }, []*tensor.Tensor{rnd(g, 4, 3), rnd(g, 4, 2)}},
		{"Linear", func(v []*Var) *Var { return Linear(v[0], v[1], v[2]) }, []*tensor.Tensor{rnd(g, 5, 3), rnd(g, 4, 3), rnd(g, 4)}},
		{"Linear 3-d no bias", func(v []*Var) *Var { return Linear(v[0], v[1], nil) }, []*tensor.Tensor{rnd(g, 2, 5, 3), rnd(g, 4, 3)}},
		{"Conv2d", func(v []*Var) *Var { return Conv2d(v[0], v[1], v[2], tensor.Conv2dParams{PadH: 1, PadW: 1}) },
			[]*tensor.Tensor{rnd(g, 2, 2, 5, 5), rnd(g, 3, 2, 3, 3), rnd(g, 3)}},
		{"Conv2d strided", func(v []*Var) *Var {
			return Conv2d(v[0], v[1], nil, tensor.Conv2dParams{StrideH: 2, StrideW: 2, DilationH: 2, DilationW: 1})
		}, []*tensor.Tensor{rnd(g, 1, 2, 7, 6), rnd(g, 2, 2, 2, 3)}},
		{"MaxPool2d", func(v []*Var) *Var { return MaxPool2d(v[0], 2, 2, tensor.Conv2dParams{StrideH: 2, StrideW: 2}) },
			[]*tensor.Tensor{rnd(g, 2, 2, 4, 4)}},
		{"MaxPool2d overlapping padded", func(v []*Var) *Var { return MaxPool2d(v[0], 3, 3, tensor.Conv2dParams{PadH: 1, PadW: 1}) },
			[]*tensor.Tensor{rnd(g, 1, 1, 4, 5)}},
		{"AvgPool2d", func(v []*Var) *Var {
			return AvgPool2d(v[0], 3, 3, tensor.Conv2dParams{StrideH: 2, StrideW: 2, PadH: 1, PadW: 1})
		}, []*tensor.Tensor{rnd(g, 1, 2, 5, 5)}},
		{"Embedding", func(v []*Var) *Var { return Embedding(tensor.FromInt64([]int64{2, 0, 2, 3}, 2, 2), v[0]) },
			[]*tensor.Tensor{rnd(g, 4, 3)}},
		{"Reshape", func(v []*Var) *Var { return Reshape(Transpose(v[0], 0, 1), -1) }, []*tensor.Tensor{rnd(g, 2, 3)}},
		{"Flatten", func(v []*Var) *Var { return Flatten(v[0], 1, -1) }, []*tensor.Tensor{rnd(g, 2, 3, 2)}},
		{"Permute", func(v []*Var) *Var { return Mul(Permute(v[0], 2, 0, 1), v[1]) }, []*tensor.Tensor{rnd(g, 2, 3, 4), rnd(g, 4, 2, 3)}},
		{"Narrow", func(v []*Var) *Var { return Narrow(v[0], 1, 1, 2) }, []*tensor.Tensor{rnd(g, 2, 4)}},
		{"Select", func(v []*Var) *Var { return Select(v[0], 0, 1) }, []*tensor.Tensor{rnd(g, 2, 4)}},
		{"Unsqueeze/Squeeze", func(v []*Var) *Var { return Squeeze(Mul(Unsqueeze(v[0], 0), v[0]), 0) }, []*tensor.Tensor{rnd(g, 3)}},
		{"Expand", func(v []*Var) *Var { return Expand(v[0], 2, 3, 4) }, []*tensor.Tensor{rnd(g, 3, 1)}},
		{"Cat", func(v []*Var) *Var { return Cat(1, v[0], v[1], v[0]) }, []*tensor.Tensor{rnd(g, 2, 1), rnd(g, 2, 3)}},
		{"Stack", func(v []*Var) *Var { return Stack(1, v[0], v[1]) }, []*tensor.Tensor{rnd(g, 2, 3), rnd(g, 2, 3)}},
		{"Split", func(v []*Var) *Var {
			p := Split(v[0], 0, 2)
			return Add(Mul(p[0], p[1]), p[0])
		}, []*tensor.Tensor{rnd(g, 4, 3)}},
		{"Chunk", func(v []*Var) *Var {
			p := Chunk(v[0], 1, 3)
			return Cat(1, Mul(p[0], p[2]), p[1])
		}, []*tensor.Tensor{rnd(g, 2, 6)}},
		{"reused input", func(v []*Var) *Var { return Mul(Tanh(v[0]), Add(v[0], v[0])) }, []*tensor.Tensor{rnd(g, 3)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := GradCheck(c.f, c.in, 1e-6, 1e-6, 1e-5); err != nil {
				t.Fatal(err)
			}
		})
	}
}
