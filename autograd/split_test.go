package autograd_test

import (
	"math"
	"slices"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// splitModel is a small transformer stage with everything a split pass
// must handle: an embedding, a weight used twice (tied head), a view of a
// weight (Narrow), Linear, LayerNorm and attention (Functions that are not
// maskable), Mul with a weight, and an input that is a leaf needing its
// gradient now (a pipeline stage's received activation).
type splitModel struct {
	emb   *nn.Embedding
	block *nn.TransformerBlock
	scale *autograd.Var
	lin   *nn.Linear
}

func newSplitModel(seed uint64) *splitModel {
	rng := tensor.NewRNG(seed)
	m := &splitModel{
		emb:   nn.NewEmbedding(rng, 11, 8),
		block: nn.NewTransformerBlock(rng, 8, 2, 16, 0, true),
		scale: autograd.Param(tensor.New(tensor.Float32, 8).Normal(rng, 1, 0.1)),
		lin:   nn.NewLinear(rng, 8, 8, true),
	}
	return m
}

func (m *splitModel) params() []*autograd.Var {
	ps := append(nn.Parameters(m.emb), nn.Parameters(m.block)...)
	return append(ps, m.scale, m.lin.Weight, m.lin.Bias)
}

// loss runs the model on the received activation x (2, 5, 8) and tokens.
func (m *splitModel) loss(x *autograd.Var, tokens *tensor.Tensor) *autograd.Var {
	h := autograd.Add(x, autograd.Embedding(tokens, m.emb.Weight))
	h = nn.Call(m.block, h)
	h = autograd.Mul(h, m.scale)
	// a view of a weight: the first half of the linear's rows, used as a
	// second projection
	half := autograd.Narrow(m.lin.Weight, 0, 0, 4)
	a := autograd.Linear(h, half, nil)
	b := nn.Call(m.lin, h)
	logits := autograd.Linear(b, m.emb.Weight, nil) // tied with the embedding
	return autograd.Add(autograd.MeanAll(autograd.Mul(logits, logits)), autograd.MeanAll(autograd.Mul(a, a)))
}

func TestBackwardSplitMatchesBackwardBitForBit(t *testing.T) {
	rng := tensor.NewRNG(7)
	x0 := tensor.New(tensor.Float32, 2, 5, 8).Normal(rng, 0, 1)
	tokens := tensor.New(tensor.Int64, 2, 5)
	for i := range 10 {
		tokens.Set(float64((i*7)%11), i/5, i%5)
	}

	ref := newSplitModel(1)
	xr := autograd.Param(x0.Clone())
	// two micro-batches accumulated, as a pipeline does
	for range 2 {
		if err := ref.loss(xr, tokens).Backward(nil); err != nil {
			t.Fatal(err)
		}
	}

	m := newSplitModel(1)
	xs := autograd.Param(x0.Clone())
	ready := map[*autograd.Var]int{}
	for _, p := range m.params() {
		p.RegisterGradReadyHook(func(v *autograd.Var) { ready[v]++ })
	}
	for step := range 2 {
		w, err := m.loss(xs, tokens).BackwardSplit(nil, m.params())
		if err != nil {
			t.Fatal(err)
		}
		// The input's gradient is there at once; the weights' are not.
		if xs.Grad() == nil {
			t.Fatal("input gradient missing after the first part")
		}
		for i, p := range m.params() {
			if step == 0 && p.Grad() != nil {
				t.Fatalf("parameter %d has a gradient before the weight pass", i)
			}
			if ready[p] != step {
				t.Fatalf("parameter %d: grad-ready hook fired %d times before weight pass %d", i, ready[p], step)
			}
		}
		if err := w.Run(); err != nil {
			t.Fatal(err)
		}
		if err := w.Run(); err != nil { // a second Run does nothing
			t.Fatal(err)
		}
	}
	same := func(what string, a, b *tensor.Tensor) {
		t.Helper()
		if a == nil || b == nil {
			t.Fatalf("%s: gradient missing (%v, %v)", what, a == nil, b == nil)
		}
		av, bv := a.Contiguous().Float32s(), b.Contiguous().Float32s()
		for i := range av {
			if math.Float32bits(av[i]) != math.Float32bits(bv[i]) {
				t.Fatalf("%s: element %d is %v split, %v whole", what, i, bv[i], av[i])
			}
		}
	}
	same("input", xr.Grad(), xs.Grad())
	rp, sp := ref.params(), m.params()
	for i := range rp {
		same("parameter "+string(rune('0'+i)), rp[i].Grad(), sp[i].Grad())
		if ready[sp[i]] != 2 {
			t.Fatalf("parameter %d: grad-ready hook fired %d times, want 2", i, ready[sp[i]])
		}
	}
}

// TestBackwardSplitDefersWeightGEMMs checks that a maskable operation
// really leaves its weight's share to the second part: Linear's weight
// gradient is not computed in the first.
func TestBackwardSplitDefersWeightGEMMs(t *testing.T) {
	rng := tensor.NewRNG(3)
	w := autograd.Param(tensor.New(tensor.Float32, 4, 3).Normal(rng, 0, 1))
	x := autograd.Param(tensor.New(tensor.Float32, 2, 3).Normal(rng, 0, 1))
	dst := tensor.New(tensor.Float32, 4, 3)
	w.SetGradDestination(dst)
	y := autograd.SumAll(autograd.Linear(x, w, nil))
	pass, err := y.BackwardSplit(nil, []*autograd.Var{w})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dst.Float32s(), make([]float32, 12)) {
		t.Fatal("the weight gradient was computed in the first part")
	}
	if err := pass.Run(); err != nil {
		t.Fatal(err)
	}
	if w.Grad() != dst {
		t.Fatal("the weight gradient did not go to its destination in the second part")
	}
	// d/dw of sum(x·wᵀ) is, in every row, the column sums of x.
	xs := x.Value().Float32s()
	for r := range 4 {
		for c := range 3 {
			want := xs[c] + xs[3+c]
			if got := dst.At(r, c); math.Abs(got-float64(want)) > 1e-6 {
				t.Fatalf("grad[%d][%d] = %v, want %v", r, c, got, want)
			}
		}
	}
}
