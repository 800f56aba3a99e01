package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/checkpoint"
	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/store"
	"github.com/godist/godist/tensor"
)

const gosrc = "../../testdata/gosrc"

// parityConfig is the configuration of testdata/parity/make_tinygpt_parity.sh
// (keep the two in step).
func parityConfig(t *testing.T) config {
	return config{Layers: 2, Heads: 2, Dim: 32, Block: 32, Batch: 4, Steps: 20, LR: 3e-3, MinLR: 3e-4, Warmup: 5,
		WeightDecay: 0.1, Beta2: 0.99, Clip: 0.5, EvalEvery: 10, EvalBatches: 4, Seed: 7, data: gosrc,
		ckpt: filepath.Join(t.TempDir(), "tinygpt.safetensors")}
}

func solo(t *testing.T) *dist.Group {
	t.Helper()
	g, err := dist.Init(context.Background(), dist.Options{Rank: 0, WorldSize: 1, Store: store.NewMem(), Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Destroy() })
	return g
}

// TestParityWithPyTorch: the whole pipeline (corpus, batches, initial
// weights, the tied GPT, AdamW's two groups, warm-up + cosine, clipping)
// against its PyTorch twin on the same batches: every one of the first 20
// losses within 1e-4, and the validation loss.
func TestParityWithPyTorch(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/parity/tinygpt.json")
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Losses  []float64 `json:"losses"`
		ValLoss float64   `json:"val_loss"`
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	res, err := train(context.Background(), solo(t), parityConfig(t), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.losses) != 20 || len(want.Losses) != 20 {
		t.Fatalf("%d losses, PyTorch %d; want 20 of each", len(res.losses), len(want.Losses))
	}
	worst := 0.0
	for i, l := range res.losses {
		d := math.Abs(l - want.Losses[i])
		worst = max(worst, d)
		if d > 1e-4 {
			t.Errorf("step %d: loss %.7f, PyTorch %.7f", i+1, l, want.Losses[i])
		}
	}
	t.Logf("largest loss difference over 20 steps %.2g; validation loss %.7f, PyTorch %.7f", worst, res.ValLoss, want.ValLoss)
	if d := math.Abs(res.ValLoss - want.ValLoss); d > 1e-4 {
		t.Errorf("validation loss %.7f, PyTorch %.7f", res.ValLoss, want.ValLoss)
	}
}

// TestDDPMatchesOneProcess: two ranks under DDP with batch b take the
// same windows as one process with batch 2b (data.RandomWindows' global
// batch) and average the same gradients, so they train the same model.
func TestDDPMatchesOneProcess(t *testing.T) {
	c := parityConfig(t)
	c.Steps, c.EvalEvery = 8, 8
	c1 := c
	c1.Batch = 2 * c.Batch
	one, err := train(context.Background(), solo(t), c1, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var two *result
	disttest.SpawnWith(t, 2, disttest.Options{Timeout: time.Minute}, func(_ *disttest.Job, g *dist.Group) error {
		c := c
		if g.Rank() != 0 {
			c.ckpt = ""
		}
		res, err := train(context.Background(), g, c, io.Discard)
		if g.Rank() == 0 {
			two = res
		}
		return err
	})
	if two == nil {
		return
	}
	// Rank 0's training loss is over its half of the batch: compare the
	// validation loss and the weights.
	if d := math.Abs(one.ValLoss - two.ValLoss); d > 1e-5 {
		t.Errorf("validation loss: one process %.7f, two ranks %.7f", one.ValLoss, two.ValLoss)
	}
	a, _, err := checkpoint.LoadFile(c1.ckpt)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := checkpoint.LoadFile(c.ckpt)
	if err != nil {
		t.Fatal(err)
	}
	for k, w := range a {
		if strings.HasPrefix(k, "optim.") || strings.HasPrefix(k, "history.") {
			continue
		}
		if e := relErr(b[k], w); e > 1e-4 {
			t.Errorf("%s: relative difference %.2g between one process and two ranks", k, e)
		}
	}
}

func relErr(got, want *tensor.Tensor) float64 {
	g, w := got.Values(), want.Values()
	var diff, scale float64
	for i := range w {
		diff = max(diff, math.Abs(g[i]-w[i]))
		scale = max(scale, math.Abs(w[i]))
	}
	return diff / max(scale, 1e-30)
}

// TestResumeIsExact: a run stopped after step 7 and resumed from its
// checkpoint ends with the same weights, bit for bit, as a run that never
// stopped.
func TestResumeIsExact(t *testing.T) {
	c := parityConfig(t)
	c.Steps, c.EvalEvery = 14, 100
	whole, err := train(context.Background(), solo(t), c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c2 := c
	c2.ckpt = filepath.Join(t.TempDir(), "stopped.safetensors")
	c2.stopAt = 7
	if _, err := train(context.Background(), solo(t), c2, io.Discard); err != nil {
		t.Fatal(err)
	}
	c2.stopAt, c2.resume = 0, true
	resumed, err := train(context.Background(), solo(t), c2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if resumed.ResumedFromStep != 7 {
		t.Fatalf("resumed from step %d, want 7", resumed.ResumedFromStep)
	}
	if resumed.ValLoss != whole.ValLoss {
		t.Errorf("validation loss %v after resuming, %v without stopping", resumed.ValLoss, whole.ValLoss)
	}
	a, _, _ := checkpoint.LoadFile(c.ckpt)
	b, _, _ := checkpoint.LoadFile(c2.ckpt)
	for k, w := range a {
		if k == "history.val" {
			continue // the stopped run evaluated at step 7 too
		}
		if !tensor.Equal(b[k], w) {
			t.Errorf("%s differs after resuming", k)
		}
	}
	if len(a) != len(b) {
		t.Errorf("checkpoints of %d and %d tensors", len(a), len(b))
	}
}

// TestDDPResumeIsExactAtWorld3 (issue 19, item 6): at world 3 over TCP
// with shared memory, where the order in which DDP sums the ranks'
// gradients follows its bucket plan, a run stopped after step 4 and
// resumed ends with the uninterrupted run's weights and optimizer state
// bit for bit: the checkpoint keeps the plan (it did not, and the resumed
// run reduced its first step in the initial plan).
func TestDDPResumeIsExactAtWorld3(t *testing.T) {
	run := func(c config) {
		disttest.SpawnWith(t, 3, disttest.Options{TCP: true, SharedMemory: true, Timeout: time.Minute}, func(_ *disttest.Job, g *dist.Group) error {
			_, err := train(context.Background(), g, c, io.Discard)
			return err
		})
	}
	c := parityConfig(t)
	c.Steps, c.EvalEvery, c.Strategy = 8, 100, "ddp"
	run(c)
	c2 := c
	c2.ckpt = filepath.Join(t.TempDir(), "stopped.safetensors")
	c2.stopAt = 4
	run(c2)
	c2.stopAt, c2.resume = 0, true
	run(c2)
	a, _, _ := checkpoint.LoadFile(c.ckpt)
	b, _, _ := checkpoint.LoadFile(c2.ckpt)
	for k, w := range a {
		if k == "history.val" {
			continue // the stopped run evaluated at step 4 too
		}
		if !tensor.Equal(b[k], w) {
			t.Errorf("%s differs after resuming", k)
		}
	}
	if len(a) != len(b) || len(a) == 0 {
		t.Errorf("checkpoints of %d and %d tensors", len(a), len(b))
	}
}

// TestBadInput: what a careless user passes is an error that says what is
// wrong, never a panic.
func TestBadInput(t *testing.T) {
	empty := t.TempDir()
	c := parityConfig(t)
	wrongShape := filepath.Join(t.TempDir(), "other.safetensors")
	other := c
	other.Dim, other.Steps, other.Warmup, other.ckpt = 16, 1, 0, wrongShape
	if _, err := train(context.Background(), solo(t), other, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*config)
		want string
		is   error
	}{
		{"no files", func(c *config) { c.data = empty }, "", data.ErrNoTextFiles},
		{"no directory", func(c *config) { c.data = filepath.Join(empty, "nope") }, "", os.ErrNotExist},
		{"block longer than the validation split", func(c *config) { c.Block = 1 << 20 }, "", data.ErrSplitTooShort},
		{"checkpoint of another width", func(c *config) { c.ckpt, c.resume = wrongShape, true }, "tensor h.0.linear1.bias has shape [64] in the checkpoint but [128] in the model", nil},
		{"heads do not divide the width", func(c *config) { c.Heads = 3 }, "divisible by the heads", nil},
		{"warm-up past the end", func(c *config) { c.Warmup = 50 }, "--warmup 50", nil},
		{"min-lr above lr", func(c *config) { c.MinLR = 1 }, "--min-lr", nil},
		{"no steps", func(c *config) { c.Steps = 0 }, "--steps 0", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parityConfig(t)
			tc.edit(&c)
			_, err := train(context.Background(), solo(t), c, io.Discard)
			if err == nil {
				t.Fatal("no error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("%v, want one wrapping %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want it to say %q", err, tc.want)
			}
			t.Log(err)
		})
	}
}

// TestSample: generation continues the prompt with the asked-for number
// of bytes and refuses a temperature of zero.
func TestSample(t *testing.T) {
	c := parityConfig(t)
	c.Steps, c.Warmup, c.sample, c.prompt, c.temperature, c.topK = 2, 1, 40, "package ", 0.8, 20
	res, err := train(context.Background(), solo(t), c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Sample, "package ") || len(res.Sample) != len("package ")+40 {
		t.Fatalf("sample %q: want the prompt and 40 bytes", res.Sample)
	}
	c.temperature = 0
	if _, err := train(context.Background(), solo(t), c, io.Discard); err == nil || !strings.Contains(err.Error(), "temperature") {
		t.Fatalf("temperature 0: %v", err)
	}
}

// TestStrategies: ZeRO and FSDP in each of its forms train what DDP trains (the
// validation loss after 8 steps of AdamW, decay on the matrices alone,
// within 1e-4), writes a checkpoint of the whole weights under PyTorch's
// names, and generates a sample; an unknown strategy is an error.
func TestStrategies(t *testing.T) {
	trainWorld := func(c config, world int) *result {
		var res *result
		disttest.SpawnWith(t, world, disttest.Options{Timeout: time.Minute}, func(_ *disttest.Job, g *dist.Group) error {
			// Every rank takes part in gathering the checkpoint's
			// weights; rank 0 alone writes it.
			r, err := train(context.Background(), g, c, io.Discard)
			if g.Rank() == 0 {
				res = r
			}
			return err
		})
		if res == nil {
			t.FailNow()
		}
		return res
	}
	base := parityConfig(t)
	base.Steps, base.EvalEvery, base.sample, base.temperature, base.topK, base.prompt = 8, 8, 20, 0.8, 20, "func"
	base.Strategy = "ddp"
	want := trainWorld(base, 2)
	for _, s := range []struct {
		name  string
		world int
		size  int
	}{{"zero", 2, 0}, {"fsdp", 2, 0}, {"fsdp-grad-op", 2, 0}, {"no-shard", 2, 0}, {"hybrid", 4, 2}} {
		t.Run(s.name, func(t *testing.T) {
			c := base
			c.Strategy, c.ShardSize = s.name, s.size
			c.ckpt = filepath.Join(t.TempDir(), "tinygpt.safetensors")
			ref := want
			if s.world != 2 {
				d := base
				d.Batch = base.Batch * 2 / s.world
				d.ckpt = ""
				c.Batch = d.Batch
				ref = trainWorld(d, s.world)
			}
			got := trainWorld(c, s.world)
			if d := math.Abs(got.ValLoss - ref.ValLoss); d > 1e-4*ref.ValLoss {
				t.Errorf("validation loss %.7f, DDP %.7f", got.ValLoss, ref.ValLoss)
			}
			if len(got.Sample) != len(c.prompt)+c.sample {
				t.Errorf("sample %q", got.Sample)
			}
			ts, _, err := checkpoint.LoadFile(c.ckpt)
			if err != nil {
				t.Fatal(err)
			}
			if w := ts["wte.weight"]; w == nil || !tensor.SameShape(w, tensor.New(tensor.Float32, 256, c.Dim)) {
				t.Fatalf("checkpoint's wte.weight: %v", w)
			}
			// The weights load strictly into the plain GPT, whose state
			// dict's names PyTorch's twin loads (tools/peers/gpt_twin.py).
			plain, err := models.NewGPT(tensor.NewRNG(1), models.GPTConfig{Vocab: data.TextVocab, Block: c.Block, Layers: c.Layers, Heads: c.Heads, Dim: c.Dim})
			if err != nil {
				t.Fatal(err)
			}
			weights := map[string]*tensor.Tensor{}
			for k, v := range ts {
				if !strings.HasPrefix(k, "optim.") && !strings.HasPrefix(k, "history.") {
					weights[k] = v
				}
			}
			if err := nn.LoadStateDict(plain, weights, true); err != nil {
				t.Fatalf("the checkpoint's weights into the plain GPT: %v", err)
			}
		})
	}
	c := base
	c.Strategy = "zero-inf"
	if _, err := train(context.Background(), solo(t), c, io.Discard); err == nil || !strings.Contains(err.Error(), "--strategy") {
		t.Fatalf("unknown strategy: %v", err)
	}
}

// TestResumeAcrossStrategies: a run under FSDP, or under DDP with ZeRO,
// at world 4, stopped after step 4 with a distributed checkpoint, resumes
// under DDP at world 2 (the same global batch: 2 ranks of twice the rows)
// and ends where a run under DDP at world 2 that never stopped ends.
func TestResumeAcrossStrategies(t *testing.T) {
	spawn := func(c config, world int) *result {
		var res *result
		disttest.SpawnWith(t, world, disttest.Options{Timeout: time.Minute}, func(_ *disttest.Job, g *dist.Group) error {
			r, err := train(context.Background(), g, c, io.Discard)
			if g.Rank() == 0 {
				res = r
			}
			return err
		})
		if res == nil {
			t.FailNow()
		}
		return res
	}
	base := parityConfig(t)
	base.Steps, base.EvalEvery, base.ckpt = 8, 100, ""
	whole := base
	whole.Batch = 2 * base.Batch
	want := spawn(whole, 2)

	for _, from := range []string{"fsdp", "zero"} {
		t.Run(from, func(t *testing.T) {
			stopped := base
			stopped.Strategy, stopped.stopAt, stopped.ckptDir = from, 4, filepath.Join(t.TempDir(), "dcp")
			spawn(stopped, 4)
			resumed := whole
			resumed.ckptDir, resumed.resume = stopped.ckptDir, true
			got := spawn(resumed, 2)
			if got.ResumedFromStep != 4 {
				t.Fatalf("resumed from step %d, want 4", got.ResumedFromStep)
			}
			if d := math.Abs(got.ValLoss - want.ValLoss); d > 1e-4*want.ValLoss {
				t.Errorf("validation loss %.7f after resuming, %.7f without stopping", got.ValLoss, want.ValLoss)
			}
			if len(got.losses) != 8 {
				t.Errorf("the resumed history has %d losses, want 8", len(got.losses))
			}
		})
	}
}

// A --warmup not given shrinks with a short run, as a user of --steps 60
// expects; one given explicitly is taken as it is, and refused when it
// cannot work (issue 27, item 10).
func TestWarmupDefault(t *testing.T) {
	for _, c := range []struct {
		args   []string
		warmup int
		bad    string
	}{
		{nil, 100, ""}, // --steps 2000
		{[]string{"--steps", "60"}, 6, ""},
		{[]string{"--steps", "1000"}, 100, ""},
		{[]string{"--steps", "5000"}, 100, ""},
		{[]string{"--steps", "5"}, 0, ""},
		{[]string{"--steps", "60", "--warmup", "30"}, 30, ""},
		{[]string{"--steps", "60", "--warmup", "100"}, 100, "--warmup 100"},
		{[]string{"--steps", "60", "--warmup", "-1"}, -1, "--warmup -1"},
	} {
		cfg, err := parseFlags(c.args)
		if err != nil {
			t.Fatalf("parseFlags(%q): %v", c.args, err)
		}
		if cfg.Warmup != c.warmup {
			t.Errorf("parseFlags(%q): --warmup %d, want %d", c.args, cfg.Warmup, c.warmup)
		}
		err = cfg.check()
		if (err != nil) != (c.bad != "") || err != nil && !strings.Contains(err.Error(), c.bad) {
			t.Errorf("parseFlags(%q).check() = %v, want an error saying %q", c.args, err, c.bad)
		}
	}
}

// DDP's bucket caps come from the flags, and a negative one is refused.
func TestBucketFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"--bucket-cap-mb", "1", "--first-bucket-mb", "0.5"})
	if err != nil || cfg.BucketCapMB != 1 || cfg.FirstBucketCapMB != 0.5 || cfg.check() != nil {
		t.Errorf("got %v, %v, check %v", cfg.BucketCapMB, cfg.FirstBucketCapMB, cfg.check())
	}
	if cfg, err := parseFlags([]string{"--autocast", "fp8"}); err != nil || cfg.check() == nil {
		t.Errorf("--autocast fp8: parsed %v, check accepted it", err)
	}
	if cfg, err := parseFlags([]string{"--autocast", "bf16"}); err != nil || cfg.Autocast != "bf16" || cfg.check() != nil {
		t.Errorf("--autocast bf16: %q, %v, check %v", cfg.Autocast, err, cfg.check())
	}
	if cfg, err := parseFlags([]string{"--auto-bucket-caps"}); err != nil || !cfg.AutoBucketCaps {
		t.Errorf("--auto-bucket-caps: %v, %v", cfg.AutoBucketCaps, err)
	}
	cfg, err = parseFlags([]string{"--bucket-cap-mb", "-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.check(); err == nil || !strings.Contains(err.Error(), "--bucket-cap-mb -1") {
		t.Errorf("check() = %v, want an error naming --bucket-cap-mb -1", err)
	}
}

// TestFloat16 (issue 33): --autocast fp16 trains under a GradScaler to
// within 2% of float32's validation loss, at world 1 and under FSDP at
// world 2 (whose ranks agree on every skip); a run stopped and resumed
// from its checkpoint ends where the whole run does, the scaler's state
// (scale, growth count) included; and a scale so large that the first
// steps' gradients overflow float16 makes the scaler skip them and back
// off, and training goes on.
func TestFloat16(t *testing.T) {
	base := parityConfig(t)
	base.Steps, base.EvalEvery = 14, 100
	f32, err := train(context.Background(), solo(t), base, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := base
	c.Autocast = "fp16"
	whole, err := train(context.Background(), solo(t), c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("validation loss float32 %.5f, float16 %.5f; scale %v, %d steps skipped", f32.ValLoss, whole.ValLoss, whole.LossScale, whole.SkippedSteps)
	if d := math.Abs(whole.ValLoss - f32.ValLoss); d > 0.02*f32.ValLoss || whole.LossScale == 0 {
		t.Fatalf("float16: validation loss %.5f against float32's %.5f, scale %v", whole.ValLoss, f32.ValLoss, whole.LossScale)
	}

	stopped := c
	stopped.ckpt = filepath.Join(t.TempDir(), "stopped.safetensors")
	stopped.stopAt = 7
	if _, err := train(context.Background(), solo(t), stopped, io.Discard); err != nil {
		t.Fatal(err)
	}
	stopped.stopAt, stopped.resume = 0, true
	if _, err := train(context.Background(), solo(t), stopped, io.Discard); err != nil {
		t.Fatal(err)
	}
	a, _, _ := checkpoint.LoadFile(c.ckpt)
	b, _, _ := checkpoint.LoadFile(stopped.ckpt)
	if a["scaler.scale"] == nil || a["scaler._growth_tracker"].Item() != 14 {
		t.Fatalf("the checkpoint's scaler: %v", a["scaler._growth_tracker"])
	}
	for k, w := range a {
		if k != "history.val" && !tensor.Equal(b[k], w) {
			t.Errorf("%s differs after resuming", k)
		}
	}

	var fs *result
	fc := c
	fc.Strategy, fc.Batch, fc.ckpt = "fsdp", c.Batch/2, ""
	disttest.SpawnWith(t, 2, disttest.Options{Timeout: time.Minute}, func(_ *disttest.Job, g *dist.Group) error {
		r, err := train(context.Background(), g, fc, io.Discard)
		if g.Rank() == 0 {
			fs = r
		}
		return err
	})
	if fs == nil {
		t.FailNow()
	}
	if d := math.Abs(fs.ValLoss - whole.ValLoss); d > 1e-3*whole.ValLoss {
		t.Errorf("FSDP at world 2 in float16: validation loss %.6f, one process %.6f", fs.ValLoss, whole.ValLoss)
	}

	big := c
	big.InitScale, big.ckpt = 1<<26, ""
	over, err := train(context.Background(), solo(t), big, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("from a scale of 2^26: %d steps skipped, scale %v, validation loss %.5f", over.SkippedSteps, over.LossScale, over.ValLoss)
	if over.SkippedSteps == 0 || over.SkippedSteps >= big.Steps || over.LossScale >= 1<<26 || math.IsNaN(over.ValLoss) {
		t.Errorf("from a scale of 2^26: %d of %d steps skipped, scale %v, validation loss %v", over.SkippedSteps, big.Steps, over.LossScale, over.ValLoss)
	}
	// Stopped during the skips and resumed from a distributed
	// checkpoint: the scaler goes on from its backed-off scale (from
	// 2^26 again, it would skip four more steps).
	part := big
	part.ckptDir, part.stopAt = filepath.Join(t.TempDir(), "dcp"), 4
	if _, err := train(context.Background(), solo(t), part, io.Discard); err != nil {
		t.Fatal(err)
	}
	part.stopAt, part.resume = 0, true
	rest, err := train(context.Background(), solo(t), part, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rest.ResumedFromStep != 4 || rest.ValLoss != over.ValLoss || rest.SkippedSteps != over.SkippedSteps-4 {
		t.Errorf("resumed at step %d from a distributed checkpoint: %d steps skipped, validation loss %v; the whole run %d after step 4, %v",
			rest.ResumedFromStep, rest.SkippedSteps, rest.ValLoss, over.SkippedSteps-4, over.ValLoss)
	}
	if _, err := parseFlags([]string{"--init-scale", "1024"}); err == nil {
		if cfg, _ := parseFlags([]string{"--init-scale", "1024"}); cfg.check() == nil {
			t.Error("--init-scale without --autocast fp16 accepted")
		}
	}
}
