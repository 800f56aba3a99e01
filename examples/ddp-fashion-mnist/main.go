// Command ddp-fashion-mnist trains the MLP, LeNet or an LSTM classifier on
// Fashion-MNIST with DistributedDataParallel, with the settings of
// tools/peers/train_ddp.py, its PyTorch twin (batch 64 per rank,
// SGD lr 0.01 momentum 0.9, DistributedSampler with seed 0; the same
// models, the LSTM and GRU classifiers too: a 1-layer cell of hidden 64
// over the 28 rows of each image, then a Linear), so its accuracy and
// speed compare with PyTorch DDP's. Start it with the launcher:
//
//	godist run --standalone --nproc-per-node 2 ./ddp-fashion-mnist --epochs 3
//
// It uses the full dataset from /usr/share/datasets/fashion-mnist when
// installed, else the real subset shipped in testdata/fashion-mnist, and
// says which. Rank 0 shows a progress bar (plain lines when stderr is not a
// terminal), evaluates test accuracy after every epoch, writes a checkpoint
// (ddp.SaveCheckpoint: model, optimizer, position, history and DDP's
// bucket plan, safetensors) and a loss/accuracy plot (PNG), and ends with
// one JSON line. --resume continues from the checkpoint, at the same world
// size ending bit for bit where the run that never stopped ends.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gonum.org/v1/plot/vg"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/examples/progress"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/tensor"
)

type config struct {
	model     string
	epochs    int
	batch     int
	lr, mom   float64
	seed      uint64
	dir       string
	ckpt      string
	plotPath  string
	resume    bool
	noOverlap bool
	syncBN    bool
	maxSteps  int // stop an epoch after this many steps (0: all); for tests
	bucketMB  float64
	firstMB   float64
	killAt    string  // "RANK:STEP": that rank SIGKILLs itself at that global step (fault tests)
	unsynced  bool    // replicas that never reduce gradients: the baseline for the sync overhead
	commHook  string  // "", allreduce, fp16, bf16 or powersgd[:RANK]
	targetAcc float64 // stop once the test accuracy reaches this (0: never)
	evalEvery int     // with targetAcc, steps between evaluations
	stepLog   string  // prefix of per-rank files of step timestamps
	stopAt    int     // tests: return errStopped, saving nothing, before this run's step stopAt (0: never)
}

// errStopped is train's error when config.stopAt stops it: a run that died
// mid-epoch, for the resume tests.
var errStopped = errors.New("stopped by config.stopAt")

type result struct {
	Model       string    `json:"model"`
	World       int       `json:"world"`
	Epochs      int       `json:"epochs"`
	TestAcc     float64   `json:"test_acc"`
	SamplesPerS float64   `json:"samples_per_s"`
	MsPerStep   float64   `json:"ms_per_step"`
	EpochAcc    []float64 `json:"epoch_test_acc"`
	Data        string    `json:"data"`
	BLAS        string    `json:"blas"`
	Overlap     bool      `json:"overlap"`
	BackwardMs  float64   `json:"backward_ms_per_step"`
	WaitMs      float64   `json:"wait_ms_per_step"`
	LastLoss    float64   `json:"last_loss"`
	// With --target-acc: whether the run reached it, after how many
	// steps, and the training time until then (evaluations excluded).
	Reached     bool    `json:"reached,omitempty"`
	TargetSteps int     `json:"target_steps,omitempty"`
	TargetS     float64 `json:"target_s,omitempty"`
}

func main() {
	var c config
	flag.StringVar(&c.model, "model", "mlp", "model: mlp, lenet, lstm or gru (the recurrent ones read each image's 28 rows as a sequence)")
	flag.IntVar(&c.epochs, "epochs", 1, "epochs to train (in total, counting resumed ones)")
	flag.IntVar(&c.batch, "batch", 64, "batch size per rank")
	flag.Float64Var(&c.lr, "lr", 0.01, "SGD learning rate")
	flag.Float64Var(&c.mom, "momentum", 0.9, "SGD momentum")
	flag.Uint64Var(&c.seed, "seed", 0, "torch.manual_seed-compatible seed for the weights, and the sampler's seed")
	flag.StringVar(&c.dir, "data", os.Getenv(data.FashionMNISTEnv), "Fashion-MNIST directory (default: $GODIST_FASHION_MNIST, else the installed set, else the shipped subset)")
	flag.StringVar(&c.ckpt, "checkpoint", "ddp-fashion-mnist.safetensors", "checkpoint file written after every epoch (empty: none)")
	flag.StringVar(&c.plotPath, "plot", "ddp-fashion-mnist.png", "loss/accuracy plot written by rank 0 (empty: none)")
	flag.BoolVar(&c.resume, "resume", false, "continue from the checkpoint if it exists (else start afresh)")
	flag.BoolVar(&c.noOverlap, "no-overlap", false, "all-reduce only after backward (to measure what overlap gains)")
	flag.BoolVar(&c.syncBN, "sync-bn", false, "LeNet with BatchNorm after each convolution, as SyncBatchNorm")
	flag.IntVar(&c.maxSteps, "max-steps", 0, "stop each epoch after this many steps (0: the whole epoch)")
	flag.Float64Var(&c.bucketMB, "bucket-cap-mb", 25, "DDP bucket size cap in MiB")
	flag.StringVar(&c.stepLog, "step-log", "", "write PREFIX.rankN: per step, its number and the Unix ns times backward began, backward ended and the gradients were reduced (to measure skew between ranks: tools/ddpcmp/skew.py)")
	flag.BoolVar(&c.unsynced, "unsynced", false, "independent replicas, gradients never reduced (accuracy meaningless): the step time without synchronisation, as train_ddp.py --no-ddp at world 2")
	flag.StringVar(&c.killAt, "kill-at", "", "RANK:STEP: that rank kills itself (SIGKILL) at that step, to test recovery")
	flag.Float64Var(&c.firstMB, "first-bucket-mb", 1, "DDP first bucket size cap in MiB")
	flag.StringVar(&c.commHook, "comm-hook", "allreduce", "how DDP reduces a bucket: allreduce, fp16 or bf16 (sent in half precision), or powersgd:R (PowerSGD of rank R, 1 by default, after 10 plain steps), as PyTorch's ddp_comm_hooks")
	flag.Float64Var(&c.targetAcc, "target-acc", 0, "stop once rank 0's test accuracy, taken every --eval-every steps (outside the timed training), reaches this (0: train the epochs); the result then says when")
	flag.IntVar(&c.evalEvery, "eval-every", 50, "with --target-acc, steps between evaluations")
	flag.Parse()
	ctx := context.Background()
	g, err := dist.Init(ctx, dist.Options{})
	if err != nil {
		dist.RecordError(err)
		fmt.Fprintln(os.Stderr, "ddp-fashion-mnist:", err)
		os.Exit(1)
	}
	// GODIST_CPUPROFILE=prefix: dist.Init writes one profile per rank,
	// prefix.rank<R>, until Destroy, for looking at where a step's time goes.
	res, err := train(ctx, g, c, os.Stderr)
	if err != nil {
		// The launcher's root-cause report tells, from this, a rank that
		// failed on its own from one that lost it.
		dist.RecordError(err)
		fmt.Fprintf(os.Stderr, "ddp-fashion-mnist: rank %d: %v\n", g.Rank(), err)
		g.Destroy()
		os.Exit(1)
	}
	if g.Rank() == 0 {
		line, _ := json.Marshal(res)
		fmt.Println(string(line))
	}
	g.Destroy()
}

// buildModel returns the model; with syncBN, LeNet gets a BatchNorm after
// each convolution, converted to SyncBatchNorm.
func buildModel(c config, g *dist.Group) (nn.Layer, error) {
	rng := tensor.NewTorchRNG(c.seed)
	if c.syncBN {
		if c.model != "lenet" {
			return nil, errors.New("--sync-bn needs --model lenet")
		}
		m := nn.NewSequential(
			nn.NewConv2d(rng, 1, 6, 5, tensor.Conv2dParams{PadH: 2, PadW: 2}, true), nn.NewBatchNorm2d(6), nn.NewReLU(), nn.NewMaxPool2d(2),
			nn.NewConv2d(rng, 6, 16, 5, tensor.Conv2dParams{}, true), nn.NewBatchNorm2d(16), nn.NewReLU(), nn.NewMaxPool2d(2),
			nn.NewFlatten(), nn.NewLinear(rng, 400, 120, true), nn.NewReLU(),
			nn.NewLinear(rng, 120, 84, true), nn.NewReLU(), nn.NewLinear(rng, 84, 10, true))
		return ddp.ConvertSyncBatchNorm(m, g).(nn.Layer), nil
	}
	switch c.model {
	case "lstm":
		return models.LSTMClassifier(rng), nil
	case "gru":
		return models.GRUClassifier(rng), nil
	}
	return models.New(c.model, rng)
}

func train(ctx context.Context, g *dist.Group, c config, log io.Writer) (*result, error) {
	which := "given"
	if c.dir == "" {
		var full bool
		c.dir, full = data.FindFashionMNIST()
		which = "subset"
		if full {
			which = "full"
		}
	}
	xtr, ytr, err := data.LoadFashionMNIST(c.dir, true)
	if err != nil {
		return nil, err
	}
	xte, yte, err := data.LoadFashionMNIST(c.dir, false)
	if err != nil {
		return nil, err
	}
	rank0 := g.Rank() == 0
	if rank0 {
		fmt.Fprintf(log, "data: %s Fashion-MNIST from %s (%d train, %d test); world %d, batch %d per rank\n",
			which, c.dir, xtr.Size(0), xte.Size(0), g.Size(), c.batch)
	}
	net, err := buildModel(c, g)
	if err != nil {
		return nil, err
	}
	opts := ddp.Options{NoOverlap: c.noOverlap, BucketCapMB: c.bucketMB, FirstBucketCapMB: c.firstMB, GradientAsBucketView: true}
	var traceStart time.Time
	if os.Getenv("GODIST_DDP_TRACE") != "" && rank0 {
		// When each bucket's reduction starts and ends, relative to the
		// start of backward.
		opts.CommHook = func(gr *dist.Group, b *ddp.GradBucket) *dist.Work {
			t0 := time.Since(traceStart)
			return ddp.AllReduceHook(gr, b).Then(func() error {
				fmt.Fprintf(log, "trace: bucket %d (%d floats) reduced %v..%v after backward began\n", b.Index, b.Buffer.Numel(), t0.Round(10*time.Microsecond), time.Since(traceStart).Round(10*time.Microsecond))
				return nil
			})
		}
	}
	if opts.CommHook == nil {
		if opts.CommHook, err = commHook(c.commHook); err != nil {
			return nil, err
		}
	}
	if c.unsynced {
		opts.CommHook = func(*dist.Group, *ddp.GradBucket) *dist.Work { return dist.Go(func() error { return nil }) }
	}
	model, err := ddp.New(ctx, net, g, opts)
	if err != nil {
		return nil, err
	}
	opt := optim.NewSGD(nn.Parameters(model), optim.SGDOptions{LR: c.lr, Momentum: c.mom})
	start, done := 0, 0 // epochs and optimizer steps before this run
	var hist history
	if _, statErr := os.Stat(c.ckpt); c.resume && c.ckpt != "" && statErr == nil {
		var pos ddp.Position
		if pos, hist, err = load(ctx, c.ckpt, model, opt); err != nil {
			return nil, fmt.Errorf("resume: %w", err)
		}
		start, done = pos.Epoch, pos.Step
		if rank0 {
			fmt.Fprintf(log, "resumed from %s after epoch %d\n", c.ckpt, start)
		}
	} else if c.resume && rank0 && c.ckpt == "" {
		fmt.Fprintf(log, "no checkpoint (--checkpoint \"\"): starting afresh\n")
	} else if c.resume && rank0 {
		fmt.Fprintf(log, "no checkpoint at %s: starting afresh\n", c.ckpt)
	}
	killRank, killStep := -1, -1
	if c.killAt != "" {
		if _, err := fmt.Sscanf(c.killAt, "%d:%d", &killRank, &killStep); err != nil {
			return nil, fmt.Errorf("--kill-at %q: want RANK:STEP", c.killAt)
		}
	}
	sampler, err := data.NewDistributedSampler(xtr.Size(0), g.Size(), g.Rank(), true, c.seed, false)
	if err != nil {
		return nil, err
	}
	ds := data.NewTensorDataset(xtr, ytr)
	res := &result{Model: c.model, World: g.Size(), Epochs: c.epochs, Data: which, BLAS: tensor.BLAS(), Overlap: !c.noOverlap}
	var trainTime, backwardTime, waitTime time.Duration
	var steplog *bufio.Writer
	if c.stepLog != "" {
		f, err := os.Create(fmt.Sprintf("%s.rank%d", c.stepLog, g.Rank()))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		steplog = bufio.NewWriter(f)
		defer steplog.Flush()
	}
	steps := 0
	var batch []*tensor.Tensor
	if c.targetAcc > 0 && c.evalEvery < 1 {
		return nil, fmt.Errorf("--eval-every %d: want at least 1", c.evalEvery)
	}
	// reached evaluates the model on rank 0, every --eval-every steps
	// with --target-acc, and tells every rank whether it reached the
	// target; the time it takes is left out of the training time.
	var evalTime time.Duration
	reached := func() (bool, error) {
		if c.targetAcc <= 0 || steps%c.evalEvery != 0 {
			return false, nil
		}
		t0 := time.Now()
		defer func() { evalTime += time.Since(t0) }()
		acc := tensor.FromFloat64([]float64{0})
		if rank0 {
			nn.Eval(model)
			acc.Float64s()[0] = progress.Accuracy(model.Module, xte, yte)
			nn.Train(model)
		}
		if err := g.Broadcast(ctx, acc, 0); err != nil {
			return false, err
		}
		return acc.Float64s()[0] >= c.targetAcc, nil
	}
	stop := false
	for ep := start; ep < c.epochs && !stop; ep++ {
		sampler.SetEpoch(ep)
		idx := sampler.Indices()
		nb := (len(idx) + c.batch - 1) / c.batch
		if c.maxSteps > 0 {
			nb = min(nb, c.maxSteps)
		}
		nn.Train(model)
		var bar *progress.Bar
		if rank0 {
			bar = progress.New(log, fmt.Sprintf("epoch %d/%d", ep+1, c.epochs), nb, g.Size())
		}
		if err := g.Barrier(ctx); err != nil {
			return nil, err
		}
		t0 := time.Now()
		for s := range nb {
			if c.stopAt > 0 && steps == c.stopAt {
				return nil, errStopped
			}
			if g.Rank() == killRank && steps == killStep && os.Getenv("GODIST_RESTART_COUNT") == "0" {
				fmt.Fprintf(log, "rank %d: killing myself at step %d (--kill-at)\n", g.Rank(), steps)
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
			// The previous step's batch is done with: reuse its memory.
			batch = ds.BatchInto(batch, idx[s*c.batch:min((s+1)*c.batch, len(idx))])
			b := batch
			opt.ZeroGrad(true)
			if err := model.Prepare(ctx); err != nil {
				return nil, err
			}
			loss := nn.CrossEntropy(nn.Call(model, autograd.Const(b[0])), b[1])
			tb := time.Now()
			traceStart = tb
			loss.Backward(nil)
			tw := time.Now()
			if err := model.Wait(ctx); err != nil {
				return nil, fmt.Errorf("epoch %d step %d: %w", ep+1, s, err)
			}
			if steplog != nil {
				fmt.Fprintf(steplog, "%d %d %d %d\n", steps, tb.UnixNano(), tw.UnixNano(), time.Now().UnixNano())
			}
			backwardTime += tw.Sub(tb)
			waitTime += time.Since(tw)
			opt.Step()
			steps++
			res.LastLoss = loss.Value().Item()
			hist.Loss = append(hist.Loss, res.LastLoss)
			if bar != nil {
				bar.Step(res.LastLoss, b[0].Size(0))
			}
			if stop, err = reached(); err != nil {
				return nil, fmt.Errorf("epoch %d step %d: evaluating: %w", ep+1, s, err)
			} else if stop {
				res.Reached, res.TargetSteps = true, steps
				res.TargetS = (trainTime + time.Since(t0) - evalTime).Seconds()
				break
			}
		}
		if err := g.Barrier(ctx); err != nil {
			return nil, err
		}
		dt := time.Since(t0)
		trainTime += dt - evalTime
		evalTime = 0
		if bar != nil {
			bar.Done()
		}
		acc := 0.0
		if rank0 {
			acc = progress.Accuracy(model.Module, xte, yte)
			fmt.Fprintf(log, "epoch %d: %.2f s, %.0f samples/s, loss %.4f, test accuracy %.4f\n",
				ep+1, dt.Seconds(), float64(len(idx)*g.Size())/dt.Seconds(), res.LastLoss, acc)
		}
		hist.Acc = append(hist.Acc, acc)
		res.TestAcc = acc
		if c.ckpt != "" {
			if err := save(ctx, c.ckpt, model, opt, ep+1, done+steps, hist); err != nil {
				return nil, err
			}
		}
		if rank0 && c.plotPath != "" {
			if err := hist.plot(c.plotPath); err != nil {
				fmt.Fprintln(log, "plot:", err)
			}
		}
	}
	res.EpochAcc = hist.Acc
	if steps > 0 {
		n := float64(steps * c.batch * g.Size())
		res.SamplesPerS = n / trainTime.Seconds()
		res.MsPerStep = trainTime.Seconds() * 1e3 / float64(steps)
		res.BackwardMs = backwardTime.Seconds() * 1e3 / float64(steps)
		res.WaitMs = waitTime.Seconds() * 1e3 / float64(steps)
	}
	return res, nil
}

// history is what the plot shows: the loss at every step of rank 0 and
// the test accuracy after every epoch.
type history struct {
	Loss []float64
	Acc  []float64
}

// Checkpoint metadata keys of the history: the values, comma-separated,
// each as strconv.FormatFloat(v, 'g', -1, 64) writes it (exact, and NaN
// and infinities too).
const (
	metaLoss = "history.loss"
	metaAcc  = "history.acc"
)

// save writes the checkpoint through ddp.SaveCheckpoint (rank 0 writes,
// every rank waits for the file): model, optimizer, the position (the
// next epoch, from its start), the history and DDP's bucket plan. The plan
// matters for exact resume: from world 3 on, the layout of a bucket
// decides the order in which each gradient element's sum over the ranks
// is taken (the chunk it falls in), and a resumed run that reduced its
// first step in the initial layout, as a new DDP does before it rebuilds
// its buckets, would drift from the run that never stopped.
func save(ctx context.Context, path string, model *ddp.DDP, opt optim.Optimizer, epoch, steps int, h history) error {
	meta := ddp.Position{Epoch: epoch, Step: steps}.Meta()
	meta[metaLoss], meta[metaAcc] = formatFloats(h.Loss), formatFloats(h.Acc)
	return ddp.SaveCheckpoint(ctx, path, model, opt, meta)
}

// load reads a checkpoint written by save into model and opt on every
// rank, and returns the epoch to go on from, the optimizer steps taken
// and the history.
func load(ctx context.Context, path string, model *ddp.DDP, opt optim.Optimizer) (ddp.Position, history, error) {
	meta, err := ddp.LoadCheckpoint(ctx, path, model, opt)
	if err != nil {
		return ddp.Position{}, history{}, err
	}
	pos, err := ddp.ParsePosition(meta)
	if err != nil {
		return ddp.Position{}, history{}, err
	}
	if _, ok := meta[ddp.MetaEpoch]; !ok || pos.Batch != 0 {
		return ddp.Position{}, history{}, fmt.Errorf("checkpoint %s holds no epoch boundary (metadata %s=%q, %s=%q)", path, ddp.MetaEpoch, meta[ddp.MetaEpoch], ddp.MetaBatch, meta[ddp.MetaBatch])
	}
	var h history
	for _, f := range []struct {
		key string
		dst *[]float64
	}{{metaLoss, &h.Loss}, {metaAcc, &h.Acc}} {
		if *f.dst, err = parseFloats(meta[f.key]); err != nil {
			return ddp.Position{}, history{}, fmt.Errorf("checkpoint %s: metadata %s: %w", path, f.key, err)
		}
	}
	return pos, h, nil
}

func formatFloats(vs []float64) string {
	var b []byte
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, v, 'g', -1, 64)
	}
	return string(b)
}

func parseFloats(s string) ([]float64, error) {
	if s == "" {
		return nil, nil
	}
	fs := strings.Split(s, ",")
	out := make([]float64, len(fs))
	for i, f := range fs {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (h history) plot(path string) error {
	per := float64(len(h.Loss)) / float64(max(len(h.Acc), 1))
	acc := make([][2]float64, len(h.Acc))
	for i, v := range h.Acc {
		acc[i] = [2]float64{per * float64(i+1), v}
	}
	return progress.Curves{Title: "DDP on Fashion-MNIST (rank 0)", YLabel: "loss / test accuracy",
		StepLabel: "training loss", Steps: h.Loss, EvalLabel: "test accuracy", Evals: acc}.Save(path, 4*vg.Inch)
}

// commHook returns the DDP communication hook that --comm-hook names (nil
// for DDP's own all-reduce).
func commHook(name string) (ddp.CommHook, error) {
	kind, arg, _ := strings.Cut(name, ":")
	switch kind {
	case "", "allreduce":
		return nil, nil
	case "fp16":
		return ddp.FP16CompressHook, nil
	case "bf16":
		return ddp.BF16CompressHook, nil
	case "powersgd":
		rank := 1
		if arg != "" {
			r, err := strconv.Atoi(arg)
			if err != nil || r < 1 {
				return nil, fmt.Errorf("--comm-hook %q: want powersgd:RANK, RANK at least 1", name)
			}
			rank = r
		}
		return ddp.NewPowerSGD(rank, 10).Hook(), nil
	}
	return nil, fmt.Errorf("--comm-hook %q: want allreduce, fp16, bf16 or powersgd[:RANK]", name)
}
