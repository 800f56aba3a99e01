package pipeline_test

import (
	"context"
	"fmt"
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

// ckGPTLayers is a 4-block GPT with dropout, cut into layers, each rank's
// copy built from one seed; with ck its blocks are checkpointed.
func ckGPTLayers(t testing.TB, ck bool) []nn.Layer {
	m, err := models.NewGPT(tensor.NewRNG(1), models.GPTConfig{Vocab: 32, Block: 8, Layers: 4, Heads: 2, Dim: 16, Dropout: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	layers := m.PipelineLayers(autograd.Param(m.Wte.Weight.Value().Clone()))
	if ck {
		for i := 1; i < len(layers)-1; i++ {
			layers[i] = nn.NewCheckpointed(layers[i])
		}
	}
	return layers
}

// ckPipelineRun trains two steps of the schedule on two ranks (the
// embeddings and two blocks on rank 0, two blocks and the head on rank 1)
// and returns every rank's parameters' last gradients and values, and its
// Stats.
func ckPipelineRun(t *testing.T, name string, ck bool) (grads, values [2][]*tensor.Tensor, stats [2]pipeline.Stats) {
	const micros = 4
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		sched, err := schedule.ByName(name, 2, 1, micros)
		if err != nil {
			return err
		}
		parts, err := pipeline.Split(ckGPTLayers(t, ck), []int{3})
		if err != nil {
			return err
		}
		p, err := pipeline.New(g, sched, []pipeline.Stage{{Index: g.Rank(), Module: parts[g.Rank()]}}, pipeline.Options{Loss: gptLoss})
		if err != nil {
			return err
		}
		opt := optim.NewAdamW(p.Parameters(), optim.AdamOptions{LR: 1e-2})
		for step := range 2 {
			xs, ys := microBatches(uint64(20+step), micros, 2, 8, 32)
			var in, tg []*tensor.Tensor
			if p.HasFirst() {
				in = xs
			}
			if p.HasLast() {
				tg = ys
			}
			opt.ZeroGrad(true)
			if err := p.Step(ctx, in, tg); err != nil {
				return err
			}
			opt.Step()
		}
		r := g.Rank()
		for _, q := range p.Parameters() {
			grads[r] = append(grads[r], q.Grad())
			values[r] = append(values[r], q.Value())
		}
		stats[r] = p.Stats()
		return nil
	})
	return grads, values, stats
}

// TestCheckpointedStages: pipeline stages run ordinary autograd, so
// checkpointed blocks work in them. Under 1F1B and under the zero-bubble
// ZB-H1 (whose split backward treats a checkpointed block as one
// operation: its weights' gradients are computed in the input pass and
// delivered in the weight pass), two steps with dropout give every
// parameter the gradient and AdamW value of the plain pipeline, bit for
// bit; and each rank's peak activation bytes are the plain run's less,
// for each micro-batch it held at the peak and each of its two blocks,
// what a block's graph holds beyond its output.
func TestCheckpointedStages(t *testing.T) {
	// One block's graph and output, on a micro-batch's activations.
	block := ckGPTLayers(t, false)[1]
	y := nn.Call(block, autograd.Const(tensor.Randn(tensor.NewRNG(1), 2, 8, 16)))
	saved := autograd.GraphBytes(y) - int64(len(y.Value().Bytes()))
	for _, name := range []string{"1f1b", "zbh1"} {
		t.Run(name, func(t *testing.T) {
			wantG, wantV, plain := ckPipelineRun(t, name, false)
			gotG, gotV, ck := ckPipelineRun(t, name, true)
			for r := range 2 {
				if len(gotG[r]) == 0 || len(gotG[r]) != len(wantG[r]) {
					t.Fatalf("rank %d: %d parameters, plain %d", r, len(gotG[r]), len(wantG[r]))
				}
				for i := range wantG[r] {
					if err := sameBits(gotG[r][i], wantG[r][i]); err != nil {
						t.Fatalf("rank %d gradient %d: %v", r, i, err)
					}
					if err := sameBits(gotV[r][i], wantV[r][i]); err != nil {
						t.Fatalf("rank %d parameter %d: %v", r, i, err)
					}
				}
				if ck[r].PeakLive != plain[r].PeakLive {
					t.Fatalf("rank %d: %d micro-batches live at the peak, plain %d", r, ck[r].PeakLive, plain[r].PeakLive)
				}
				want := plain[r].PeakActivationBytes - int64(ck[r].PeakLive)*2*saved
				if ck[r].PeakActivationBytes != want {
					t.Fatalf("rank %d: peak %d activation bytes, want %d (plain %d less %d micro-batches × 2 blocks × %d)", r, ck[r].PeakActivationBytes, want, plain[r].PeakActivationBytes, ck[r].PeakLive, saved)
				}
				t.Logf("rank %d: peak activation bytes %d, plain %d", r, ck[r].PeakActivationBytes, plain[r].PeakActivationBytes)
			}
			if fmt.Sprint(ck[1].Loss) != fmt.Sprint(plain[1].Loss) {
				t.Fatalf("loss %v, plain %v", ck[1].Loss, plain[1].Loss)
			}
		})
	}
}
