package main

import (
	"context"
	"fmt"
	"math"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// evaluate returns the mean validation loss over evals, the ranks' shares
// averaged.
func evaluate(ctx context.Context, g *dist.Group, m *models.GPT, run nn.Layer, evals *data.EvalWindows) (float64, error) {
	nn.Eval(m)
	defer nn.Train(m)
	var sum float64
	autograd.NoGrad(func() {
		for i := range evals.Len() {
			x, y := evals.Batch(i)
			sum += models.Loss(nn.Call(run, autograd.Const(x)), y).Value().Item()
		}
	})
	t := tensor.FromFloat64([]float64{sum, float64(evals.Len())})
	if err := g.AllReduce(ctx, t, dist.Sum); err != nil {
		return 0, fmt.Errorf("validation loss: %w", err)
	}
	v := t.Float64s()
	return v[0] / v[1], nil
}

// generate continues prompt by n bytes, sampling each from the model's
// distribution at the given temperature among the topK likeliest bytes.
func generate(m *models.GPT, prompt []byte, n int, temperature float64, topK int, rng *tensor.RNG) string {
	if len(prompt) == 0 {
		prompt = []byte{'\n'}
	}
	nn.Eval(m)
	defer nn.Train(m)
	out := append([]byte(nil), prompt...)
	block := m.Config.Block
	autograd.NoGrad(func() {
		for range n {
			ctxt := out[max(0, len(out)-block):]
			x := tensor.New(tensor.Int64, 1, len(ctxt))
			for i, b := range ctxt {
				x.Set(float64(b), 0, i)
			}
			logits := nn.Call(m, autograd.Const(x)).Value()
			last := logits.Select(1, len(ctxt)-1).Reshape(-1).Values()
			out = append(out, byte(pick(last, temperature, topK, rng)))
		}
	})
	return string(out)
}

// pick samples an index from softmax(logits/temperature) restricted to
// the topK largest logits.
func pick(logits []float64, temperature float64, topK int, rng *tensor.RNG) int {
	if topK <= 0 || topK > len(logits) {
		topK = len(logits)
	}
	idx := make([]int, len(logits))
	for i := range idx {
		idx[i] = i
	}
	// Partial selection sort: the topK largest first.
	for i := range topK {
		best := i
		for j := i + 1; j < len(idx); j++ {
			if logits[idx[j]] > logits[idx[best]] {
				best = j
			}
		}
		idx[i], idx[best] = idx[best], idx[i]
	}
	p := make([]float64, topK)
	var sum float64
	for i := range p {
		p[i] = math.Exp((logits[idx[i]] - logits[idx[0]]) / temperature)
		sum += p[i]
	}
	u := rng.Float64() * sum
	for i, pi := range p {
		if u -= pi; u < 0 {
			return idx[i]
		}
	}
	return idx[topK-1]
}
