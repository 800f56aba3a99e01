package models_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint/paritytest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

var ref = &paritytest.Ref{Path: filepath.Join("..", "testdata", "parity", "transformer.safetensors")}

// TestGPTParity: the 2-layer GPT with tied weights, loaded with PyTorch's
// weights, gives PyTorch's logits, loss and every gradient (wte.weight's
// is the sum over the embedding and the head) within 1e-5 relative.
func TestGPTParity(t *testing.T) {
	m, err := models.NewGPT(tensor.NewRNG(0), models.GPTConfig{Vocab: 256, Block: 16, Layers: 2, Heads: 2, Dim: 16})
	if err != nil {
		t.Fatal(err)
	}
	sd := map[string]*tensor.Tensor{}
	for k, v := range ref.All(t) {
		if rest, ok := strings.CutPrefix(k, "gpt."); ok && !strings.HasPrefix(rest, "grad.") && rest != "idx" && rest != "tgt" && rest != "logits" && rest != "loss" {
			sd[rest] = v
		}
	}
	if err := nn.LoadStateDict(m, sd, true); err != nil {
		t.Fatal(err)
	}
	logits := nn.Call(m, autograd.Const(ref.Get(t, "gpt.idx")))
	ref.Expect(t, "logits", logits.Value(), "gpt.logits", 1e-5)
	loss := models.Loss(logits, ref.Get(t, "gpt.tgt"))
	ref.Expect(t, "loss", loss.Value(), "gpt.loss", 1e-6)
	if err := loss.Backward(nil); err != nil {
		t.Fatal(err)
	}
	names := 0
	for _, p := range nn.NamedParameters(m) {
		ref.Expect(t, "grad "+p.Name, p.Value.Grad(), "gpt.grad."+p.Name, 1e-5)
		names++
	}
	if names != 2+2*12+2 {
		t.Fatalf("%d parameters, want %d (one wte.weight, shared by the head)", names, 2+2*12+2)
	}
}

func TestGPTConfigErrors(t *testing.T) {
	for _, c := range []models.GPTConfig{
		{Vocab: 256, Block: 8, Layers: 1, Heads: 3, Dim: 16},
		{Vocab: 256, Block: 0, Layers: 1, Heads: 2, Dim: 16},
		{Vocab: 256, Block: 8, Layers: 1, Heads: 2, Dim: 16, Dropout: 1},
	} {
		if _, err := models.NewGPT(tensor.NewRNG(0), c); err == nil {
			t.Errorf("NewGPT(%+v) succeeded", c)
		}
	}
}

// BenchmarkGPTStep measures one forward and backward pass of the tiny
// GPT's default shape (4 layers, width 128, 4 heads, block 128) on a batch
// of 8 sequences; it reports tokens/s.
func BenchmarkGPTStep(b *testing.B) {
	cfg := models.GPTConfig{Vocab: 256, Block: 128, Layers: 4, Heads: 4, Dim: 128}
	m, err := models.NewGPT(tensor.NewRNG(0), cfg)
	if err != nil {
		b.Fatal(err)
	}
	const batch = 8
	rng := tensor.NewRNG(1)
	x, y := tensor.New(tensor.Int64, batch, cfg.Block), tensor.New(tensor.Int64, batch, cfg.Block)
	for i := range batch * cfg.Block {
		x.Reshape(-1).Set(float64(rng.IntN(256)), i)
		y.Reshape(-1).Set(float64(rng.IntN(256)), i)
	}
	b.ResetTimer()
	for range b.N {
		nn.ZeroGrad(m, true)
		if err := models.Loss(nn.Call(m, autograd.Const(x)), y).Backward(nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch*cfg.Block)/b.Elapsed().Seconds(), "tokens/s")
}
