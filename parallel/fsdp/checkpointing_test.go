package fsdp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/fsdp"
	"github.com/godist/godist/tensor"
)

// ckGPT is the tests' tied GPT (dropout on) as a Sequential of its
// pipeline layers, with its blocks checkpointed if ck.
func ckGPT(seed uint64, ck bool) nn.Layer {
	c := cfg
	c.Dropout = 0.1
	m, err := models.NewGPT(tensor.NewRNG(seed), c)
	if err != nil {
		panic(err)
	}
	layers := m.PipelineLayers(nil)
	if ck {
		for i := 1; i < len(layers)-1; i++ {
			layers[i] = nn.NewCheckpointed(layers[i])
		}
	}
	return nn.NewSequential(layers...)
}

func isCheckpointed(_ string, m nn.Module) bool { _, ok := m.(*nn.Checkpointed); return ok }

// trainCkFSDP trains steps under FSDP on two ranks and returns rank 0's
// full state dict, the checkpoint wrapper's name part taken out.
func trainCkFSDP(t *testing.T, ck bool, opt fsdp.Options, steps int) map[string]*tensor.Tensor {
	t.Helper()
	var out map[string]*tensor.Tensor
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		m, err := fsdp.New(ctx, ckGPT(uint64(g.Rank()), ck), g, opt)
		if err != nil {
			return err
		}
		o := newOpt(m.Parameters())
		for step := range steps {
			x, y := tokens(g.Rank(), step)
			o.ZeroGrad(true)
			if err := m.Backward(ctx, models.Loss(nn.Call(m, autograd.Const(x)), y)); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			o.Step()
		}
		sd, err := m.FullStateDict(ctx)
		if err != nil {
			return err
		}
		if g.Rank() == 0 {
			out = map[string]*tensor.Tensor{}
			for k, v := range sd {
				out[strings.ReplaceAll(k, "_checkpoint_wrapped_module.", "")] = v
			}
		}
		return nil
	})
	return out
}

// TestCheckpointedBlocksUnderFSDP: the GPT with its blocks checkpointed
// trains four steps under FSDP to the weights, bit for bit, of the plain
// GPT under FSDP with the same units, for FullShard and ShardGradOp, with
// the units either the blocks inside the checkpoint wrappers (the
// recomputation gathers them again through their hooks) or the wrappers
// (gathered again when backward reaches the wrapper's output).
func TestCheckpointedBlocksUnderFSDP(t *testing.T) {
	for _, strategy := range []fsdp.Strategy{fsdp.FullShard, fsdp.ShardGradOp} {
		want := trainCkFSDP(t, false, fsdp.Options{Strategy: strategy, Wrap: isBlock}, 4)
		for name, wrap := range map[string]func(string, nn.Module) bool{"inner": isBlock, "wrapper": isCheckpointed} {
			t.Run(fmt.Sprintf("%v/%s", strategy, name), func(t *testing.T) {
				got := trainCkFSDP(t, true, fsdp.Options{Strategy: strategy, Wrap: wrap}, 4)
				if len(got) != len(want) || len(want) == 0 {
					t.Fatalf("%d tensors in the state dict, plain %d", len(got), len(want))
				}
				for k, w := range want {
					g, ok := got[k]
					if !ok {
						t.Fatalf("no %s in the checkpointed model's state dict", k)
					}
					gv, wv := g.Float32s(), w.Float32s()
					for i := range wv {
						if gv[i] != wv[i] {
							t.Fatalf("%s element %d is %v, plain %v", k, i, gv[i], wv[i])
						}
					}
				}
			})
		}
	}
}
