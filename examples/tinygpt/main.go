// Command tinygpt trains a small GPT-style language model, byte by byte,
// on the Go source tree that ships with every Go installation
// ($(go env GOROOT)/src, tens of MB of real code), in one process or under
// the launcher with DistributedDataParallel:
//
//	go run ./examples/tinygpt --steps 200
//	godist run --standalone --nproc-per-node 2 ./tinygpt --steps 2000
//
// The model is models.GPT (pre-LayerNorm causal transformer
// blocks, tied input and output embeddings); the optimizer AdamW with no
// weight decay on biases, LayerNorms and embeddings, a linear warm-up then
// a cosine learning-rate schedule, and gradient clipping by global norm
// (after DDP's all-reduce). Files are split into training and validation
// by a hash of their path (data.TextCorpus); every step draws random
// windows of block+1 bytes, and the ranks share each global batch.
//
// Rank 0 shows a progress bar with the loss and tokens/s, evaluates the
// validation loss and bits per byte every --eval-every steps (the ranks
// split the validation windows), writes a checkpoint (safetensors: the
// model under PyTorch's names, the optimizer, the step) and a PNG of the
// curves, and ends with --sample bytes generated from --prompt, then one
// JSON line. --resume continues from the checkpoint. --dump writes what
// the PyTorch twin (tools/peers/gpt_twin.py) needs to train the same model
// on the same batches.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint/dcp"
	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/examples/progress"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/store"
	"github.com/godist/godist/tensor"
)

type config struct {
	Layers      int     `json:"layers"`
	Heads       int     `json:"heads"`
	Dim         int     `json:"dim"`
	Block       int     `json:"block"`
	Batch       int     `json:"batch"` // per rank
	Steps       int     `json:"steps"`
	LR          float64 `json:"lr"`
	MinLR       float64 `json:"min_lr"`
	Warmup      int     `json:"warmup"`
	WeightDecay float64 `json:"weight_decay"`
	Beta2       float64 `json:"beta2"`
	Clip        float64 `json:"clip"`
	Dropout     float64 `json:"dropout"`
	EvalEvery   int     `json:"eval_every"`
	EvalBatches int     `json:"eval_batches"`
	Seed        uint64  `json:"seed"`
	World       int     `json:"world"`

	Strategy  string `json:"strategy"`
	ShardSize int    `json:"shard_size,omitempty"`
	// FSDP's prefetching (PyTorch's defaults: backward on, forward off).
	ForwardPrefetch    bool `json:"forward_prefetch,omitempty"`
	NoBackwardPrefetch bool `json:"no_backward_prefetch,omitempty"`
	// DDP's bucket caps in MiB (0: ddp.Options' defaults, 25 and 1).
	BucketCapMB      float64 `json:"bucket_cap_mb,omitempty"`
	FirstBucketCapMB float64 `json:"first_bucket_cap_mb,omitempty"`
	AutoBucketCaps   bool    `json:"auto_bucket_caps,omitempty"`
	// Autocast is "bf16" to run the training steps' forward passes under
	// autograd.Autocast(bfloat16), "fp16" under Autocast(float16) with an
	// optim.GradScaler (evaluation stays float32).
	Autocast string `json:"autocast,omitempty"`
	// InitScale is --autocast fp16's first loss scale (0: the
	// GradScaler's 65,536).
	InitScale float64 `json:"init_scale,omitempty"`

	data, ckpt, ckptDir, plotPath, dump string
	resume                              bool
	stopAt                              int
	sample                              int
	prompt                              string
	temperature                         float64
	topK                                int
	stepSleep                           time.Duration // after each step: holds a test's job in the air
}

// phases split a training step's time: the forward pass, backward (with
// FSDP's and hybrid sharding's communication), DDP's Wait after
// backward, the gradients' clip (a norm's all-reduce where sharded), the
// optimizer's step.
type phases struct {
	Forward  float64 `json:"forward"`
	Backward float64 `json:"backward"`
	Wait     float64 `json:"ddp_wait,omitempty"`
	Clip     float64 `json:"clip"`
	Step     float64 `json:"step"`
}

type result struct {
	Config          config  `json:"config"`
	Steps           int     `json:"steps"`
	ValLoss         float64 `json:"val_loss"`
	ValBitsPerByte  float64 `json:"val_bits_per_byte"`
	TrainLoss       float64 `json:"train_loss"`
	TokensPerS      float64 `json:"tokens_per_s"`
	MsPerStep       float64 `json:"ms_per_step"`
	World           int     `json:"world"`
	BLAS            string  `json:"blas"`
	Params          int     `json:"params"`
	TrainBytes      int     `json:"train_bytes"`
	ValBytes        int     `json:"val_bytes"`
	Sample          string  `json:"sample,omitempty"`
	ResumedFromStep int     `json:"resumed_from_step,omitempty"`
	Memory          memory  `json:"memory"`
	// DDP's buckets as they ended: how many, and the caps in bytes (with
	// --auto-bucket-caps, the ones chosen).
	Buckets int `json:"buckets,omitempty"`
	// PhaseMs is rank 0's mean time a step in each phase.
	PhaseMs    phases         `json:"phase_ms"`
	BucketCaps ddp.BucketCaps `json:"bucket_caps,omitzero"`
	// BucketTrials are the caps --auto-bucket-caps tried, with rank 0's
	// median ns from the first ready gradient to the end of DDP's Wait.
	BucketTrials []ddp.BucketTrial `json:"bucket_trials,omitempty"`
	// SkippedSteps are the steps --autocast fp16's GradScaler skipped
	// (their gradients overflowed float16); LossScale is its last scale.
	SkippedSteps int     `json:"skipped_steps,omitempty"`
	LossScale    float64 `json:"loss_scale,omitempty"`

	losses []float64 // every step's training loss (rank 0's batch), resumed ones too
}

// parseFlags parses the command line. A --warmup not given explicitly
// shrinks with a short run (defaultWarmup); one given is taken as it is,
// and config.check refuses it if it cannot work.
func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("tinygpt", flag.ContinueOnError)
	fs.IntVar(&c.Layers, "layers", 4, "transformer blocks")
	fs.IntVar(&c.Heads, "heads", 4, "attention heads")
	fs.IntVar(&c.Dim, "width", 128, "model width (divisible by --heads)")
	fs.IntVar(&c.Block, "block", 128, "context length in bytes")
	fs.IntVar(&c.Batch, "batch", 16, "sequences per rank per step")
	fs.IntVar(&c.Steps, "steps", 2000, "optimizer steps (in total, counting resumed ones)")
	fs.Float64Var(&c.LR, "lr", 3e-3, "peak learning rate")
	fs.Float64Var(&c.MinLR, "min-lr", 3e-4, "learning rate at the end of the cosine")
	fs.IntVar(&c.Warmup, "warmup", 100, "steps of linear warm-up (default: 100, or a tenth of --steps when that is fewer)")
	fs.Float64Var(&c.WeightDecay, "weight-decay", 0.1, "AdamW weight decay (matrices only)")
	fs.Float64Var(&c.Beta2, "beta2", 0.99, "AdamW beta2")
	fs.Float64Var(&c.Clip, "clip", 1, "clip gradients to this global L2 norm (0: no clipping)")
	fs.Float64Var(&c.Dropout, "dropout", 0, "dropout probability")
	fs.IntVar(&c.EvalEvery, "eval-every", 250, "evaluate (and checkpoint) every N steps, and at the end")
	fs.IntVar(&c.EvalBatches, "eval-batches", 20, "validation batches per evaluation (0: the whole split)")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the initial weights and of the batches")
	fs.StringVar(&c.data, "data", "", "directory whose *.go files are the corpus (default: $(go env GOROOT)/src)")
	fs.StringVar(&c.ckpt, "checkpoint", "tinygpt.safetensors", "checkpoint written at every evaluation (empty: none)")
	fs.StringVar(&c.plotPath, "plot", "tinygpt.png", "training and validation curves written by rank 0 (empty: none)")
	fs.StringVar(&c.ckptDir, "checkpoint-dir", "", "also write a distributed checkpoint (checkpoint/dcp: each rank its shards) to this directory at every evaluation; --resume prefers it, and it loads under any strategy and world size")
	fs.DurationVar(&c.stepSleep, "step-sleep", 0, "sleep this long after every step (tests: a job that lasts while hosts come and go)")
	fs.BoolVar(&c.resume, "resume", false, "continue from --checkpoint-dir, else --checkpoint, if it exists")
	fs.IntVar(&c.stopAt, "stop-at", 0, "stop after this step, writing a checkpoint, as a preempted job would (0: run to --steps)")
	fs.IntVar(&c.sample, "sample", 300, "bytes to generate at the end (0: none)")
	fs.StringVar(&c.prompt, "prompt", "func (", "the generated sample's beginning")
	fs.Float64Var(&c.temperature, "temperature", 0.8, "sampling temperature")
	fs.IntVar(&c.topK, "top-k", 20, "sample among the k likeliest bytes (0: all)")
	fs.StringVar(&c.Strategy, "strategy", "ddp", "data parallelism: ddp, zero (DDP with a ZeroRedundancyOptimizer), fsdp (FullShard), fsdp-grad-op (ShardGradOp), no-shard or hybrid (HybridShard over groups of --shard-size ranks); fsdp's units are the transformer blocks")
	fs.BoolVar(&c.ForwardPrefetch, "forward-prefetch", false, "FSDP: gather the next block while one runs forward")
	fs.BoolVar(&c.NoBackwardPrefetch, "no-backward-prefetch", false, "FSDP: do not gather the next block of backward while one runs backward")
	fs.Float64Var(&c.BucketCapMB, "bucket-cap-mb", 0, "DDP: the gradient buckets' size in MiB (default 25, as PyTorch's); smaller ones start their all-reduces earlier in backward")
	fs.Float64Var(&c.FirstBucketCapMB, "first-bucket-mb", 0, "DDP: the first bucket's size in MiB (default 1, as PyTorch's)")
	fs.Float64Var(&c.InitScale, "init-scale", 0, "with --autocast fp16, the GradScaler's first loss scale (0: 65536, PyTorch's)")
	fs.StringVar(&c.Autocast, "autocast", "", "bf16: train with the matrix products in bfloat16 (autograd.Autocast, as torch.autocast(\"cpu\", dtype=torch.bfloat16)); fp16: in float16, the loss scaled by an optim.GradScaler; float32 master weights, float32 evaluation")
	fs.BoolVar(&c.AutoBucketCaps, "auto-bucket-caps", false, "DDP across hosts: choose the bucket caps after the second step from the measured backward and the links' cost model (ddp.Options.AutoBucketCaps)")
	fs.IntVar(&c.ShardSize, "shard-size", 0, "ranks a hybrid run shards over (default: the ranks of each host, from the group's topology; hosts replicate)")
	fs.StringVar(&c.dump, "dump", "", "write the data, initial weights, batches and config for tools/peers/gpt_twin.py to this directory, then train")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if !explicit["warmup"] {
		c.Warmup = defaultWarmup(c.Steps)
	}
	return c, nil
}

// defaultWarmup is --warmup's default for a run of steps: 100 steps, or a
// tenth of the run when that is fewer, as a warm-up is a small part of
// any run.
func defaultWarmup(steps int) int { return max(0, min(100, steps/10)) }

func main() {
	c, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		os.Exit(2) // the flag package has said why
	}
	ctx := context.Background()

	g, err := join(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tinygpt:", err)
		os.Exit(1)
	}
	// GODIST_CPUPROFILE=prefix: dist.Init writes prefix.rank<R> until Destroy.
	res, err := train(ctx, g, c, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "tinygpt: rank %d: %v\n", g.Rank(), err)
		dist.RecordError(err)
		g.Destroy()
		os.Exit(1)
	}
	if g.Rank() == 0 {
		line, _ := json.Marshal(res)
		fmt.Println(string(line))
	}
	g.Destroy()
}

// join returns the job's group under a launcher (WORLD_SIZE set), else a
// group of this process alone.
func join(ctx context.Context) (*dist.Group, error) {
	if os.Getenv("WORLD_SIZE") != "" {
		return dist.Init(ctx, dist.Options{})
	}
	return dist.Init(ctx, dist.Options{Rank: 0, WorldSize: 1, Store: store.NewMem()})
}

// check reports the first flag whose value cannot work.
func (c config) check() error {
	switch {
	case c.Steps < 1:
		return fmt.Errorf("--steps %d: want at least 1", c.Steps)
	case c.Warmup < 0 || c.Warmup > c.Steps:
		return fmt.Errorf("--warmup %d: want 0..--steps (%d)", c.Warmup, c.Steps)
	case c.LR <= 0 || c.MinLR < 0 || c.MinLR > c.LR:
		return fmt.Errorf("--lr %g --min-lr %g: want 0 <= min-lr <= lr and lr > 0", c.LR, c.MinLR)
	case c.Beta2 <= 0 || c.Beta2 >= 1:
		return fmt.Errorf("--beta2 %g: want (0, 1)", c.Beta2)
	case c.WeightDecay < 0 || c.Clip < 0:
		return fmt.Errorf("--weight-decay %g --clip %g: want both >= 0", c.WeightDecay, c.Clip)
	case c.EvalEvery < 1 || c.EvalBatches < 0:
		return fmt.Errorf("--eval-every %d --eval-batches %d: want at least 1 and at least 0", c.EvalEvery, c.EvalBatches)
	case c.Batch < 1 || c.Block < 1:
		return fmt.Errorf("--batch %d --block %d: want both at least 1", c.Batch, c.Block)
	case c.sample > 0 && c.temperature <= 0:
		return fmt.Errorf("--temperature %v: want > 0", c.temperature)
	case c.Autocast != "" && c.Autocast != "bf16" && c.Autocast != "fp16":
		return fmt.Errorf("--autocast %q: want bf16 or fp16 (or nothing, for float32)", c.Autocast)
	case c.InitScale < 0 || math.IsInf(c.InitScale, 0) || c.InitScale > 0 && c.Autocast != "fp16":
		return fmt.Errorf("--init-scale %g: want a positive finite scale, with --autocast fp16", c.InitScale)
	case c.BucketCapMB < 0 || c.FirstBucketCapMB < 0:
		return fmt.Errorf("--bucket-cap-mb %g --first-bucket-mb %g: want both >= 0 (0: the defaults)", c.BucketCapMB, c.FirstBucketCapMB)
	}
	return nil
}

func train(ctx context.Context, g *dist.Group, c config, log io.Writer) (*result, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	c.World = g.Size()
	rank0 := g.Rank() == 0
	if c.data == "" {
		dir, err := data.GoRootSource()
		if err != nil {
			return nil, fmt.Errorf("%w; pass --data DIR", err)
		}
		c.data = dir
	}
	t0 := time.Now()
	corpus, err := data.NewTextCorpus(c.data, data.TextCorpusOptions{})
	if err != nil {
		return nil, err
	}
	if rank0 {
		fmt.Fprintf(log, "data: %s: %d files, %.1f MB train, %.1f MB validation (read in %.1f s); world %d, batch %d×%d bytes per rank\n",
			c.data, corpus.NumFiles(data.Train)+corpus.NumFiles(data.Validation), float64(corpus.Len(data.Train))/1e6,
			float64(corpus.Len(data.Validation))/1e6, time.Since(t0).Seconds(), g.Size(), c.Batch, c.Block)
	}
	windows, err := corpus.RandomWindows(data.Train, data.WindowOptions{BatchSize: c.Batch, Block: c.Block, Seed: c.Seed, World: g.Size(), Rank: g.Rank()})
	if err != nil {
		return nil, err
	}
	evals, err := corpus.EvalWindows(data.Validation, data.EvalOptions{BatchSize: c.Batch, Block: c.Block, World: g.Size(), Rank: g.Rank(), MaxBatches: c.EvalBatches})
	if err != nil {
		return nil, err
	}

	gpt, err := models.NewGPT(tensor.NewRNG(c.Seed), models.GPTConfig{Vocab: data.TextVocab, Block: c.Block, Layers: c.Layers, Heads: c.Heads, Dim: c.Dim, Dropout: c.Dropout})
	if err != nil {
		return nil, err
	}
	params := nn.Parameters(gpt)
	res := &result{World: g.Size(), BLAS: tensor.BLAS(), TrainBytes: corpus.Len(data.Train), ValBytes: corpus.Len(data.Validation)}
	for _, p := range params {
		res.Params += p.Value().Numel()
	}
	if c.dump != "" && rank0 {
		if err := dump(c, gpt, corpus, windows); err != nil {
			return nil, fmt.Errorf("--dump: %w", err)
		}
	}
	// One process trains the model itself; several wrap it in DDP, which
	// starts every rank from rank 0's weights.
	rep, err := replicate(ctx, gpt, g, c)
	if err != nil {
		return nil, err
	}
	model := rep.model
	opt, err := rep.optimizer(g, c)
	if err != nil {
		return nil, err
	}
	sched := optim.NewWarmupCosine(opt, c.Warmup, c.Steps, c.MinLR/c.LR)

	start := 0
	var hist history
	_, dirErr := dcp.Entries(c.ckptDir)
	if _, statErr := os.Stat(c.ckpt); c.resume && c.ckptDir != "" && dirErr == nil {
		if start, hist, err = loadDistributed(ctx, g, c.ckptDir, gpt, rep, opt); err != nil {
			return nil, fmt.Errorf("resume from %s: %w", c.ckptDir, err)
		}
		sched.SetEpoch(start)
		res.ResumedFromStep = start
		if rank0 {
			fmt.Fprintf(log, "resumed from the distributed checkpoint %s at step %d\n", c.ckptDir, start)
		}
	} else if c.resume && c.ckpt != "" && statErr == nil {
		if rep.fsdp != nil {
			return nil, fmt.Errorf("--resume with --strategy %s: the checkpoint holds the whole optimizer state, FSDP's is sharded; resume with --strategy ddp", c.Strategy)
		}
		var order string
		if start, hist, order, err = load(c.ckpt, gpt, opt, rep.scaler); err != nil {
			return nil, fmt.Errorf("resume from %s: %w", c.ckpt, err)
		}
		if rep.ddp != nil && order != "" {
			if err := rep.ddp.SetBucketOrder(order); err != nil {
				return nil, fmt.Errorf("resume from %s: %w", c.ckpt, err)
			}
		}
		sched.SetEpoch(start)
		res.ResumedFromStep = start
		if rank0 {
			fmt.Fprintf(log, "resumed from %s at step %d\n", c.ckpt, start)
		}
	}
	if rank0 {
		fmt.Fprintf(log, "model: %d layers, %d heads, width %d, block %d: %d parameters; BLAS %s\n",
			c.Layers, c.Heads, c.Dim, c.Block, res.Params, res.BLAS)
	}

	var bar *progress.Bar
	if rank0 {
		bar = progress.New(log, "train", c.Steps-start, g.Size())
		bar.Unit = "tokens"
	}
	var x, y *tensor.Tensor
	var trainTime time.Duration
	var phase [5]time.Duration // forward, backward, (wait), clip, step
	steps := 0
	if err := g.Barrier(ctx); err != nil {
		return nil, err
	}
	for step := start; step < c.Steps; step++ {
		ts := time.Now()
		x, y = windows.BatchInto(x, y, step)
		nn.Train(gpt)
		opt.ZeroGrad(true)
		var loss *autograd.Var
		forward := func() { loss = models.Loss(nn.Call(model, autograd.Const(x)), y) }
		switch c.Autocast {
		case "bf16":
			autograd.Autocast(tensor.BFloat16, forward)
		case "fp16":
			autograd.Autocast(tensor.Float16, forward)
		default:
			forward()
		}
		t1 := time.Now()
		if err := rep.backward(ctx, rep.scaler.Scale(loss)); err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		t2 := time.Now()
		if c.Clip > 0 {
			// The norm of the true gradients, not the scaled ones.
			if err := rep.scaler.Unscale(ctx, opt); err != nil {
				return nil, fmt.Errorf("step %d: %w", step, err)
			}
			if err := rep.clip(ctx, c.Clip); err != nil {
				return nil, fmt.Errorf("step %d: %w", step, err)
			}
		}
		t3 := time.Now()
		// ZeRO's step broadcasts, and can meet a dead peer: the scaler's
		// Step (optim.Step) returns its error, which opt.Step() could
		// only keep. With fp16 it skips a step whose gradients overflowed.
		stepped, err := rep.scaler.Step(ctx, opt)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		if !stepped {
			res.SkippedSteps++
		}
		if err := rep.scaler.Update(); err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		sched.Step()
		t4 := time.Now()
		trainTime += t4.Sub(ts)
		phase[0] += t1.Sub(ts)
		phase[1] += t2.Sub(t1)
		phase[3] += t3.Sub(t2)
		phase[4] += t4.Sub(t3)
		time.Sleep(c.stepSleep)
		steps++
		res.TrainLoss = loss.Value().Item()
		hist.Loss = append(hist.Loss, res.TrainLoss)
		if bar != nil {
			bar.Step(res.TrainLoss, c.Batch*c.Block)
		}
		stop := step+1 == c.stopAt
		if (step+1)%c.EvalEvery == 0 || step+1 == c.Steps || stop {
			vl, err := evaluate(ctx, g, gpt, rep.eval, evals)
			if err != nil {
				return nil, err
			}
			res.ValLoss, res.ValBitsPerByte = vl, vl/math.Ln2
			hist.Val = append(hist.Val, [2]float64{float64(step + 1), res.ValBitsPerByte})
			if bar != nil {
				bar.Done()
				fmt.Fprintf(log, "step %d: train loss %.4f, validation loss %.4f (%.3f bits per byte), lr %.2e\n",
					step+1, res.TrainLoss, vl, res.ValBitsPerByte, opt.LR())
			}
			if err := save(ctx, g, c, rep, opt, step+1, hist); err != nil {
				return nil, err
			}
		}
		if stop {
			break
		}
	}
	if bar != nil {
		bar.Done()
	}
	res.Steps = start + steps
	res.losses = hist.Loss
	res.Memory = rep.memory(opt)
	if rep.scaler.Enabled() {
		res.LossScale = rep.scaler.GetScale()
	}
	if rep.ddp != nil {
		res.Buckets, res.BucketCaps, res.BucketTrials = len(rep.ddp.Buckets()), rep.ddp.BucketCaps(), rep.ddp.BucketTrials()
	}
	if steps > 0 {
		res.MsPerStep = trainTime.Seconds() * 1e3 / float64(steps)
		ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(steps) }
		phase[2] = rep.waited
		res.PhaseMs = phases{Forward: ms(phase[0]), Backward: ms(phase[1] - phase[2]), Wait: ms(phase[2]), Clip: ms(phase[3]), Step: ms(phase[4])}
		res.TokensPerS = float64(steps*c.Batch*c.Block*g.Size()) / trainTime.Seconds()
	}
	if c.sample > 0 {
		// Under FSDP every rank takes part in gathering the weights; rank
		// 0 alone generates.
		err := rep.full(ctx, func() error {
			if rank0 {
				res.Sample = generate(gpt, []byte(c.prompt), c.sample, c.temperature, c.topK, tensor.NewRNG(c.Seed+1))
				fmt.Fprintf(log, "sample (temperature %.2f, top-k %d):\n%s\n", c.temperature, c.topK, res.Sample)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("sample: %w", err)
		}
	}
	res.Config = c
	return res, nil
}
