package pipeline_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/parallel/pipeline"
	"github.com/godist/godist/parallel/pipeline/schedule"
	"github.com/godist/godist/tensor"
)

const (
	meshSteps = 12
	meshBatch = 16 // global batch of windows per step
	meshBlock = 32
	meshClip  = 0.5 // below the gradients' norm in most steps: clipping is exercised
)

var meshConfig = models.GPTConfig{Vocab: 256, Block: meshBlock, Layers: 2, Heads: 2, Dim: 32}

func goCorpus(t testing.TB) *data.TextCorpus {
	c, err := data.NewTextCorpus(filepath.Join("..", "..", "testdata", "gosrc"), data.TextCorpusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ddpCurve trains the tiny GPT with DDP on 4 ranks (4 windows each) and
// returns the mean loss of every step.
func ddpCurve(t *testing.T, corpus *data.TextCorpus) []float64 {
	curve := make([]float64, meshSteps)
	disttest.Spawn(t, 4, func(g *dist.Group) error {
		ctx := context.Background()
		m, err := models.NewGPT(tensor.NewRNG(5), meshConfig)
		if err != nil {
			return err
		}
		d, err := ddp.New(ctx, m, g, ddp.Options{})
		if err != nil {
			return err
		}
		opt := optim.NewAdamW(nn.Parameters(m), optim.AdamOptions{LR: 3e-3, WeightDecay: 0.1})
		w, err := corpus.RandomWindows(data.Train, data.WindowOptions{BatchSize: meshBatch / 4, Block: meshBlock, Seed: 9, World: 4, Rank: g.Rank()})
		if err != nil {
			return err
		}
		for step := range meshSteps {
			x, y := w.Batch(step)
			opt.ZeroGrad(true)
			loss := models.Loss(d.Forward(autograd.Const(x)), y)
			if err := d.Backward(ctx, loss); err != nil {
				return err
			}
			nn.ClipGradNorm(nn.Parameters(m), meshClip)
			opt.Step()
			l := tensor.FromFloat64([]float64{loss.Value().At()})
			if err := g.AllReduce(ctx, l, dist.Avg); err != nil {
				return err
			}
			if g.Rank() == 0 {
				curve[step] = l.Float64s()[0]
			}
		}
		return nil
	})
	return curve
}

// pipelineCurve trains the same GPT on 4 ranks as a (pp=2, dp=2) mesh:
// each replica pipelines 8 windows as 4 micro-batches of 2 with the given
// schedule, the token embedding tied to the head across the two stages.
func pipelineCurve(t *testing.T, corpus *data.TextCorpus, name string) []float64 {
	curve := make([]float64, meshSteps)
	var mu sync.Mutex
	disttest.Spawn(t, 4, func(g *dist.Group) error {
		ctx := context.Background()
		mesh, err := dist.NewMesh(ctx, g, []int{2, 2}, []string{"pp", "dp"})
		if err != nil {
			return err
		}
		pp, dp := mesh.Group("pp"), mesh.Group("dp")
		sched, err := schedule.ByName(name, 2, 1, 4)
		if err != nil {
			return err
		}
		m, err := models.NewGPT(tensor.NewRNG(5), meshConfig)
		if err != nil {
			return err
		}
		head := autograd.Param(m.Wte.Weight.Value().Clone())
		parts, err := pipeline.Split(m.PipelineLayers(head), []int{2}) // embeddings + block 0 | block 1 + head
		if err != nil {
			return err
		}
		stage := pp.Rank()
		tied := m.Wte.Weight
		if stage == 1 {
			tied = head
		}
		p, err := pipeline.New(pp, sched, []pipeline.Stage{{Index: stage, Module: parts[stage]}}, pipeline.Options{
			Loss:         gptLoss,
			DataParallel: dp,
			Tied:         []pipeline.Tie{{Param: tied, Group: pp}},
			Watch:        []*dist.Group{g},
		})
		if err != nil {
			return err
		}
		opt := optim.NewAdamW(p.Parameters(), optim.AdamOptions{LR: 3e-3, WeightDecay: 0.1})
		w, err := corpus.RandomWindows(data.Train, data.WindowOptions{BatchSize: meshBatch / 2, Block: meshBlock, Seed: 9, World: 2, Rank: dp.Rank()})
		if err != nil {
			return err
		}
		for step := range meshSteps {
			x, y := w.Batch(step)
			var xs, ys []*tensor.Tensor
			for i := range 4 {
				xs = append(xs, x.Narrow(0, 2*i, 2).Contiguous())
				ys = append(ys, y.Narrow(0, 2*i, 2).Contiguous())
			}
			opt.ZeroGrad(true)
			if err := p.Step(ctx, xs, ys); err != nil {
				return err
			}
			if _, err := p.ClipGradNorm(ctx, meshClip); err != nil {
				return err
			}
			opt.Step()
			if p.HasLast() {
				l := tensor.FromFloat64([]float64{p.Stats().Loss})
				if err := dp.AllReduce(ctx, l, dist.Avg); err != nil {
					return err
				}
				if dp.Rank() == 0 {
					mu.Lock()
					curve[step] = l.Float64s()[0]
					mu.Unlock()
				}
			}
		}
		// The tied copies stayed equal.
		if stage == 0 {
			return pp.Send(ctx, m.Wte.Weight.Value(), 1, 99)
		}
		got := tensor.New(tensor.Float32, head.Shape()...)
		if _, err := pp.Recv(ctx, got, 0, 99); err != nil {
			return err
		}
		if err := sameBits(head.Value(), got); err != nil {
			return fmt.Errorf("the head's copy of the token embedding drifted from stage 0's: %v", err)
		}
		return nil
	})
	return curve
}

// TestPipelineTimesDataParallelMatchesDDP: the tiny GPT on real Go source,
// as 2 pipeline stages × 2 data-parallel replicas (every schedule for two
// ranks), follows DDP on 4 ranks' loss curve step for step.
func TestPipelineTimesDataParallelMatchesDDP(t *testing.T) {
	corpus := goCorpus(t)
	want := ddpCurve(t, corpus)
	if !(want[meshSteps-1] < want[0]-0.5) {
		t.Fatalf("DDP did not learn: losses %v", want)
	}
	for _, name := range []string{"gpipe", "1f1b", "zbh1"} {
		t.Run(name, func(t *testing.T) {
			got := pipelineCurve(t, corpus, name)
			worst := 0.0
			for i := range want {
				d := math.Abs(got[i] - want[i])
				worst = max(worst, d)
				if d > 1e-4*want[i] {
					t.Fatalf("step %d: loss %.7f, DDP %.7f (|Δ| %.2g)\npipeline %v\nDDP      %v", i, got[i], want[i], d, got, want)
				}
			}
			t.Logf("%s: losses %.4f … %.4f, DDP %.4f … %.4f, largest difference %.2g", name, got[0], got[meshSteps-1], want[0], want[meshSteps-1], worst)
		})
	}
}
