package pipeline_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/pipeline"
	"github.com/godist/godist/parallel/pipeline/schedule"
	"github.com/godist/godist/tensor"
)

// gptLayers builds, from a fixed seed, a small GPT cut into layers for a
// pipeline (embeddings, blocks, head). With untied the head gets its own
// weight, a copy of the token embedding's.
func gptLayers(t testing.TB, blocks int, untied bool) (*models.GPT, []nn.Layer) {
	m, err := models.NewGPT(tensor.NewRNG(1), models.GPTConfig{Vocab: 32, Block: 8, Layers: blocks, Heads: 2, Dim: 16})
	if err != nil {
		t.Fatal(err)
	}
	var head *autograd.Var
	if untied {
		head = autograd.Param(m.Wte.Weight.Value().Clone())
	}
	return m, m.PipelineLayers(head)
}

// microBatches returns m micro-batches of token windows and their targets
// (the tokens shifted by one), from a seeded generator.
func microBatches(seed uint64, m, batch, block, vocab int) (xs, ys []*tensor.Tensor) {
	rng := tensor.NewRNG(seed)
	for range m {
		x := tensor.New(tensor.Int64, batch, block)
		y := tensor.New(tensor.Int64, batch*block)
		for i := range batch * block {
			x.Set(float64(rng.IntN(vocab)), i/block, i%block)
			y.Set(float64(rng.IntN(vocab)), i)
		}
		xs, ys = append(xs, x), append(ys, y)
	}
	return xs, ys
}

func gptLoss(out *autograd.Var, y *tensor.Tensor) *autograd.Var { return models.Loss(out, y) }

// reference runs the micro-batches through the whole model one after
// another, each loss scaled by 1/m, as the pipeline's step must.
func reference(layers []nn.Layer, xs, ys []*tensor.Tensor) float64 {
	total := 0.0
	for i := range xs {
		h := autograd.Const(xs[i])
		for _, l := range layers {
			h = nn.Call(l, h)
		}
		loss := gptLoss(h, ys[i])
		total += loss.Value().At()
		if err := autograd.MulScalar(loss, 1/float64(len(xs))).Backward(nil); err != nil {
			panic(err)
		}
	}
	return total / float64(len(xs))
}

type schedCase struct {
	name          string
	ranks, chunks int
	micros        int
}

func (c schedCase) String() string {
	return fmt.Sprintf("%s/p%d/v%d/m%d", c.name, c.ranks, c.chunks, c.micros)
}

var exactCases = []schedCase{
	{"gpipe", 2, 1, 4}, {"gpipe", 4, 1, 8},
	{"1f1b", 2, 1, 4}, {"1f1b", 4, 1, 8}, {"1f1b", 4, 1, 3},
	{"interleaved1f1b", 2, 2, 4}, {"interleaved1f1b", 4, 2, 8},
	{"zbh1", 2, 1, 4}, {"zbh1", 4, 1, 8},
	{"1f1b", 1, 1, 4}, {"interleaved1f1b", 1, 3, 2},
}

// TestExactAgainstUnsplitModel: for every schedule, two steps of the
// pipeline give every parameter of every stage the same gradient, and
// AdamW the same new weights, bit for bit, as running the same
// micro-batches through the unsplit model one after another.
func TestExactAgainstUnsplitModel(t *testing.T) {
	for _, c := range exactCases {
		t.Run(c.String(), func(t *testing.T) {
			stages := c.ranks * c.chunks
			blocks := max(stages-2, 1)
			disttest.Spawn(t, c.ranks, func(g *dist.Group) error {
				ctx := context.Background()
				sched, err := schedule.ByName(c.name, c.ranks, c.chunks, c.micros)
				if err != nil {
					return err
				}
				_, layers := gptLayers(t, blocks, true)
				_, refLayers := gptLayers(t, blocks, true)
				points, err := pipeline.Balance(layers, stages)
				if err != nil {
					return err
				}
				parts, err := pipeline.Split(layers, points)
				if err != nil {
					return err
				}
				var mine []pipeline.Stage
				for _, s := range sched.StagesOf(g.Rank()) {
					mine = append(mine, pipeline.Stage{Index: s, Module: parts[s]})
				}
				p, err := pipeline.New(g, sched, mine, pipeline.Options{Loss: gptLoss})
				if err != nil {
					return err
				}
				all := nn.Parameters(nn.NewSequential(layers...))
				ref := nn.Parameters(nn.NewSequential(refLayers...))
				index := map[*autograd.Var]int{}
				for i, q := range all {
					index[q] = i
				}
				opt := optim.NewAdamW(p.Parameters(), optim.AdamOptions{LR: 1e-2, WeightDecay: 0.1})
				refOpt := optim.NewAdamW(ref, optim.AdamOptions{LR: 1e-2, WeightDecay: 0.1})
				for step := range 2 {
					xs, ys := microBatches(uint64(10+step), c.micros, 2, 8, 32)
					var in, tg []*tensor.Tensor
					if p.HasFirst() {
						in = xs
					}
					if p.HasLast() {
						tg = ys
					}
					opt.ZeroGrad(true)
					refOpt.ZeroGrad(true)
					if err := p.Step(ctx, in, tg); err != nil {
						return err
					}
					refLoss := reference(refLayers, xs, ys)
					if p.HasLast() && p.Stats().Loss != refLoss {
						return fmt.Errorf("step %d: loss %v, unsplit %v", step, p.Stats().Loss, refLoss)
					}
					for _, q := range p.Parameters() {
						i := index[q]
						if err := sameBits(q.Grad(), ref[i].Grad()); err != nil {
							return fmt.Errorf("step %d: gradient of parameter %d: %v", step, i, err)
						}
					}
					opt.Step()
					refOpt.Step()
					for _, q := range p.Parameters() {
						i := index[q]
						if err := sameBits(q.Value(), ref[i].Value()); err != nil {
							return fmt.Errorf("step %d: parameter %d after AdamW: %v", step, i, err)
						}
					}
				}
				return nil
			})
		})
	}
}

func sameBits(got, want *tensor.Tensor) error {
	if got == nil || want == nil {
		return fmt.Errorf("missing (pipeline %v, unsplit %v)", got != nil, want != nil)
	}
	a, b := got.Contiguous().Float32s(), want.Contiguous().Float32s()
	if len(a) != len(b) {
		return fmt.Errorf("%d elements, unsplit %d", len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return fmt.Errorf("element %d is %v, unsplit %v", i, a[i], b[i])
		}
	}
	return nil
}

// TestEvalMatchesForward: Eval gives, on the last stage, exactly the mean
// loss of the unsplit model's forward passes, leaves no gradients, and
// training steps afterwards still match (no graph or stream left behind).
func TestEvalMatchesForward(t *testing.T) {
	for _, c := range []schedCase{{"1f1b", 2, 1, 4}, {"zbh1", 4, 1, 4}, {"interleaved1f1b", 2, 2, 4}} {
		t.Run(c.String(), func(t *testing.T) {
			stages := c.ranks * c.chunks
			disttest.Spawn(t, c.ranks, func(g *dist.Group) error {
				ctx := context.Background()
				sched, err := schedule.ByName(c.name, c.ranks, c.chunks, c.micros)
				if err != nil {
					return err
				}
				_, layers := gptLayers(t, stages, true)
				_, refLayers := gptLayers(t, stages, true)
				points, _ := pipeline.Balance(layers, stages)
				parts, _ := pipeline.Split(layers, points)
				var mine []pipeline.Stage
				for _, s := range sched.StagesOf(g.Rank()) {
					mine = append(mine, pipeline.Stage{Index: s, Module: parts[s]})
				}
				p, err := pipeline.New(g, sched, mine, pipeline.Options{Loss: gptLoss})
				if err != nil {
					return err
				}
				xs, ys := microBatches(77, c.micros, 2, 8, 32)
				got, err := p.Eval(ctx, xs, ys)
				if err != nil {
					return err
				}
				for _, q := range p.Parameters() {
					if q.Grad() != nil {
						return fmt.Errorf("Eval left a gradient")
					}
				}
				want := reference(refLayers, xs, ys) // (its gradients are not looked at)
				if p.HasLast() && got != want {
					return fmt.Errorf("Eval loss %v, unsplit forward %v", got, want)
				}
				if !p.HasLast() && got != 0 {
					return fmt.Errorf("Eval returned %v on a rank without the last stage", got)
				}
				if err := p.Step(ctx, xs, ys); err != nil {
					return err
				}
				if p.HasLast() && p.Stats().Loss != want {
					return fmt.Errorf("the step after Eval: loss %v, want %v", p.Stats().Loss, want)
				}
				return nil
			})
		})
	}
}
