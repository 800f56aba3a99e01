package nn_test

import (
	"fmt"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// ckModel is a model of blocks in sequence, built from a seed so that two
// copies start alike; with ck the blocks are checkpointed.
type ckModel struct {
	model  *nn.Sequential
	blocks []nn.Layer
	input  func(step int) *tensor.Tensor
}

// mlpModel: blocks of Linear, ReLU, Dropout, Linear, Tanh on 8×32 inputs.
func mlpModel(seed uint64, blocks int, ck bool) ckModel {
	rng := tensor.NewRNG(seed)
	var m ckModel
	for range blocks {
		b := nn.NewSequential(nn.NewLinear(rng, 32, 64, true), nn.NewReLU(), nn.NewDropout(0.2, tensor.NewRNG(seed+1)), nn.NewLinear(rng, 64, 32, true), nn.NewTanh())
		m.blocks = append(m.blocks, b)
	}
	m.model = seqOf(m.blocks, ck)
	m.input = func(step int) *tensor.Tensor { return tensor.Randn(tensor.NewRNG(uint64(100+step)), 8, 32) }
	return m
}

// gptModel: transformer blocks (dropout 0.1, causal) on 2×6×16 inputs.
func gptModel(seed uint64, blocks int, ck bool) ckModel {
	rng := tensor.NewRNG(seed)
	var m ckModel
	for range blocks {
		m.blocks = append(m.blocks, nn.NewTransformerBlock(rng, 16, 2, 32, 0.1, true))
	}
	m.model = seqOf(m.blocks, ck)
	m.input = func(step int) *tensor.Tensor { return tensor.Randn(tensor.NewRNG(uint64(200+step)), 2, 6, 16) }
	return m
}

func seqOf(blocks []nn.Layer, ck bool) *nn.Sequential {
	layers := make([]nn.Layer, len(blocks))
	for i, b := range blocks {
		layers[i] = b
		if ck {
			layers[i] = nn.NewCheckpointed(b)
		}
	}
	return nn.NewSequential(layers...)
}

// train runs steps of plain SGD and returns the parameters and the last
// step's gradients.
func train(t *testing.T, m ckModel, steps int) (params, grads []*tensor.Tensor) {
	t.Helper()
	ps := nn.Parameters(m.model)
	for step := range steps {
		for _, p := range ps {
			p.ZeroGrad(true)
		}
		y := nn.Call(m.model, autograd.Const(m.input(step)))
		loss := autograd.MeanAll(autograd.Square(y))
		if err := loss.Backward(nil); err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			p.Value().Sub(p.Value(), new(tensor.Tensor).MulScalar(p.Grad(), 0.05))
		}
	}
	for _, p := range ps {
		params = append(params, p.Value())
		grads = append(grads, p.Grad())
	}
	return params, grads
}

func bitsEqual(a, b *tensor.Tensor) error {
	x, y := a.Float32s(), b.Float32s()
	if len(x) != len(y) {
		return fmt.Errorf("%d elements, want %d", len(x), len(y))
	}
	for i := range x {
		if x[i] != y[i] {
			return fmt.Errorf("element %d is %v, want %v", i, x[i], y[i])
		}
	}
	return nil
}

// TestCheckpointedSameAsPlain: an MLP and a stack of transformer blocks,
// both with dropout, trained three steps with their blocks checkpointed
// end with the parameters and gradients of the plain models, bit for bit
// (so the recomputation drew the same dropout masks, and the RNGs were
// where the plain run left them for the next step's masks).
func TestCheckpointedSameAsPlain(t *testing.T) {
	for name, build := range map[string]func(uint64, int, bool) ckModel{"mlp": mlpModel, "transformer": gptModel} {
		t.Run(name, func(t *testing.T) {
			wantP, wantG := train(t, build(1, 3, false), 3)
			gotP, gotG := train(t, build(1, 3, true), 3)
			for i := range wantP {
				if err := bitsEqual(gotP[i], wantP[i]); err != nil {
					t.Errorf("parameter %d: %v", i, err)
				}
				if err := bitsEqual(gotG[i], wantG[i]); err != nil {
					t.Errorf("gradient %d: %v", i, err)
				}
			}
		})
	}
}

// TestCheckpointedActivationBytes: after the forward pass, the graph of
// the checkpointed model holds, per block, its output and nothing else of
// the block: the plain model's bytes less, per block, what the block's own
// graph holds beyond its output. For the transformer stack that is most
// of the activations.
func TestCheckpointedActivationBytes(t *testing.T) {
	for name, build := range map[string]func(uint64, int, bool) ckModel{"mlp": mlpModel, "transformer": gptModel} {
		t.Run(name, func(t *testing.T) {
			const blocks = 4
			plain, ck := build(1, blocks, false), build(1, blocks, true)
			x := plain.input(0)
			pb := autograd.GraphBytes(nn.Call(plain.model, autograd.Const(x)))
			cb := autograd.GraphBytes(nn.Call(ck.model, autograd.Const(x)))
			// One block alone: its graph from a constant input, and its
			// output's bytes.
			one := build(1, 1, false)
			y := nn.Call(one.blocks[0], autograd.Const(x))
			block, out := autograd.GraphBytes(y), int64(len(y.Value().Bytes()))
			if want := pb - blocks*(block-out); cb != want {
				t.Fatalf("checkpointed graph %d bytes, want %d (plain %d less %d blocks × (%d - %d))", cb, want, pb, blocks, block, out)
			}
			if cb != blocks*out {
				t.Fatalf("checkpointed graph %d bytes, want the %d blocks' outputs, %d", cb, blocks, blocks*out)
			}
			t.Logf("activation bytes held after forward: plain %d, checkpointed %d (%.1f×)", pb, cb, float64(pb)/float64(cb))
		})
	}
}

// TestCheckpointedRNGs: the wrapper replays every generator its layer's
// dropouts draw from, each once.
func TestCheckpointedRNGs(t *testing.T) {
	r1, r2 := tensor.NewRNG(1), tensor.NewRNG(2)
	l := nn.NewSequential(nn.NewDropout(0.1, r1), nn.NewReLU(), nn.NewDropout(0.1, r2), nn.NewDropout(0.5, r1))
	got := nn.RNGs(l)
	if len(got) != 2 || got[0] != r1 || got[1] != r2 {
		t.Fatalf("RNGs %v, want [r1 r2]", got)
	}
	if len(nn.RNGs(nn.NewTransformerBlock(r1, 8, 2, 8, 0.1, false))) != 1 {
		t.Fatal("a transformer block's three dropouts share one generator")
	}
}
