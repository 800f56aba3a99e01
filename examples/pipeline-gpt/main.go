// Command pipeline-gpt trains the tiny GPT of examples/tinygpt (a
// byte-level transformer, on the Go source tree that ships with Go) with
// pipeline parallelism composed with data parallelism: the job's ranks form
// a device mesh of --pp pipeline stages by world/--pp data-parallel
// replicas. Each replica cuts the model into stages (balanced by parameter
// count: the embeddings, the blocks, the output head), runs every step's
// batch as --micro micro-batches through them with the chosen schedule
// (gpipe, 1f1b, interleaved1f1b with --chunks stages per rank, or zbh1),
// and the replicas average their gradients. The token embedding, tied to
// the output head, lives on the first and the last stage and is kept in
// step by summing its two gradients.
//
//	godist run --nproc-per-node 4 ./bin/pipeline-gpt --pp 2 --schedule 1f1b --steps 200
//
// With --pp 1 it is plain data parallelism over the same data, and the
// loss curve is the same (see main_test.go). The last line is one JSON
// object: the configuration, the losses, tokens/s and ms per step, and the
// schedule's bubble as the simulator predicts it.
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
	"runtime"
	"slices"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/pipeline"
	"github.com/godist/godist/parallel/pipeline/schedule"
	"github.com/godist/godist/store"
	"github.com/godist/godist/tensor"
)

type config struct {
	PP          int     `json:"pp"`
	Inner       string  `json:"inner"` // the mesh dimension of adjacent ranks: "dp" or "pp"
	Micro       int     `json:"micro"`
	Chunks      int     `json:"chunks"`
	Schedule    string  `json:"schedule"`
	Layers      int     `json:"layers"`
	Heads       int     `json:"heads"`
	Dim         int     `json:"width"`
	Block       int     `json:"block"`
	Batch       int     `json:"batch"` // sequences per step, all replicas together
	Steps       int     `json:"steps"`
	Warmup      int     `json:"warmup"`
	LR          float64 `json:"lr"`
	MinLR       float64 `json:"min_lr"`
	Clip        float64 `json:"clip"`
	EvalEvery   int     `json:"eval_every"`
	EvalBatches int     `json:"eval_batches"`
	Seed        uint64  `json:"seed"`
	data        string
	log         int
}

type result struct {
	Config         config  `json:"config"`
	World          int     `json:"world"`
	DP             int     `json:"dp"`
	Stages         int     `json:"stages"`
	Params         int     `json:"params"`
	Steps          int     `json:"steps"`
	TrainLoss      float64 `json:"train_loss"`
	ValLoss        float64 `json:"val_loss"`
	ValBitsPerByte float64 `json:"val_bits_per_byte"`
	TokensPerS     float64 `json:"tokens_per_s"`
	MsPerStep      float64 `json:"ms_per_step"`
	PredBubble     float64 `json:"pred_bubble"` // the schedule's bubble with F=1, B=2 per stage
	// PredMsPerStep is the step time predicted from the stages' measured
	// costs, the links and the CPUs (predict.go); PredTransferMs one
	// activation's transfer between adjacent stages in it.
	// MedianMsPerStep is the median step: the first steps are slower, as
	// they touch memory the process has not used before.
	MedianMsPerStep float64   `json:"median_ms_per_step"`
	PredMsPerStep   float64   `json:"pred_ms_per_step"`
	PredTransferMs  float64   `json:"pred_transfer_ms"`
	Losses          []float64 `json:"losses"` // every step's training loss
}

func main() {
	var c config
	flag.IntVar(&c.PP, "pp", 2, "pipeline stages' ranks per replica (the world must be a multiple)")
	flag.StringVar(&c.Inner, "inner", "dp", "which ranks are adjacent (and so share a host under godist run): dp, a replica group's (stages across hosts), or pp, a pipeline's (replicas across hosts)")
	flag.StringVar(&c.Schedule, "schedule", "1f1b", "gpipe, 1f1b, interleaved1f1b or zbh1")
	flag.IntVar(&c.Micro, "micro", 4, "micro-batches per step (interleaved1f1b: a multiple of --pp)")
	flag.IntVar(&c.Chunks, "chunks", 2, "interleaved1f1b: stages per rank")
	flag.IntVar(&c.Layers, "layers", 4, "transformer blocks")
	flag.IntVar(&c.Heads, "heads", 4, "attention heads")
	flag.IntVar(&c.Dim, "width", 128, "model width (divisible by --heads)")
	flag.IntVar(&c.Block, "block", 64, "context length in bytes")
	flag.IntVar(&c.Batch, "batch", 32, "sequences per step, split across the replicas and then into --micro micro-batches (a multiple of replicas × micro)")
	flag.IntVar(&c.Steps, "steps", 200, "optimizer steps")
	flag.IntVar(&c.Warmup, "warmup", 20, "steps of linear learning-rate warm-up")
	flag.Float64Var(&c.LR, "lr", 3e-3, "peak learning rate")
	flag.Float64Var(&c.MinLR, "min-lr", 3e-4, "learning rate at the end of the cosine")
	flag.Float64Var(&c.Clip, "clip", 1, "clip gradients to this global L2 norm (0: no clipping)")
	flag.IntVar(&c.EvalEvery, "eval-every", 100, "validation loss every N steps, and at the end")
	flag.IntVar(&c.EvalBatches, "eval-batches", 8, "validation batches per evaluation")
	flag.Uint64Var(&c.Seed, "seed", 1, "seed of the weights and the batches")
	flag.StringVar(&c.data, "data", "", "directory whose *.go files are the corpus (default: $(go env GOROOT)/src)")
	flag.IntVar(&c.log, "log-every", 10, "print the loss every N steps")
	flag.Parse()
	ctx := context.Background()
	g, err := join(ctx)
	if err == nil {
		var res *result
		res, err = run(ctx, g, c, os.Stdout)
		if err == nil && res != nil {
			b, _ := json.Marshal(res)
			fmt.Println(string(b))
		}
		g.Destroy()
	}
	if err != nil {
		dist.RecordError(err)
		fmt.Fprintln(os.Stderr, "pipeline-gpt:", err)
		os.Exit(1)
	}
}

func join(ctx context.Context) (*dist.Group, error) {
	if os.Getenv("WORLD_SIZE") != "" {
		return dist.Init(ctx, dist.Options{})
	}
	return dist.Init(ctx, dist.Options{Rank: 0, WorldSize: 1, Store: store.NewMem()})
}

func (c config) check(world int) error {
	switch {
	case c.PP < 1 || world%c.PP != 0:
		return fmt.Errorf("--pp %d: want a divisor of the world size %d", c.PP, world)
	case c.Micro < 1 || c.Batch < 1 || c.Batch%(world/c.PP*c.Micro) != 0:
		return fmt.Errorf("--batch %d, --micro %d: want a batch divisible into %d replicas' micro-batches", c.Batch, c.Micro, world/c.PP)
	case c.Steps < 1 || c.Warmup < 0 || c.Warmup > c.Steps:
		return fmt.Errorf("--steps %d, --warmup %d: want 0 <= warmup <= steps, steps >= 1", c.Steps, c.Warmup)
	case !(c.LR > 0) || c.MinLR < 0 || c.MinLR > c.LR:
		return fmt.Errorf("--lr %g, --min-lr %g: want 0 <= min-lr <= lr, lr > 0", c.LR, c.MinLR)
	case c.EvalEvery < 1 || c.EvalBatches < 1 || c.log < 1:
		return errors.New("--eval-every, --eval-batches and --log-every must be positive")
	case c.Inner != "dp" && c.Inner != "pp":
		return fmt.Errorf("--inner %q: want dp or pp", c.Inner)
	}
	return nil
}

// run trains on this rank's part of the mesh; rank 0 returns the result
// and writes the log (other ranks return nil and write nothing).
func run(ctx context.Context, g *dist.Group, c config, log io.Writer) (*result, error) {
	if err := c.check(g.Size()); err != nil {
		return nil, err
	}
	if g.Rank() != 0 {
		log = io.Discard
	}
	if c.Schedule != "interleaved1f1b" {
		c.Chunks = 1
	}
	dpSize := g.Size() / c.PP
	batch := c.Batch / dpSize // this replica's share of each step
	// The mesh's last dimension is the one whose ranks are adjacent.
	shape, names := []int{c.PP, dpSize}, []string{"pp", "dp"}
	if c.Inner == "pp" {
		shape, names = []int{dpSize, c.PP}, []string{"dp", "pp"}
	}
	mesh, err := dist.NewMesh(ctx, g, shape, names)
	if err != nil {
		return nil, err
	}
	pp, dp := mesh.Group("pp"), mesh.Group("dp")
	sched, err := schedule.ByName(c.Schedule, c.PP, c.Chunks, c.Micro)
	if err != nil {
		return nil, err
	}
	stages := sched.Stages

	m, err := models.NewGPT(tensor.NewRNG(c.Seed), models.GPTConfig{Vocab: 256, Block: c.Block, Layers: c.Layers, Heads: c.Heads, Dim: c.Dim})
	if err != nil {
		return nil, err
	}
	// The head's weight: the token embedding's own when one rank holds
	// both ends of the model, else a copy kept in step by a Tie.
	lastRank := sched.RankOf(stages - 1)
	var head *autograd.Var
	if lastRank != 0 {
		head = autograd.Param(m.Wte.Weight.Value().Clone())
	}
	layers := m.PipelineLayers(head)
	if len(layers) < stages {
		return nil, fmt.Errorf("%d stages for %d layers (embeddings, %d blocks, head): lower --pp or --chunks, or add --layers", stages, len(layers), c.Layers)
	}
	points, err := pipeline.Balance(layers, stages)
	if err != nil {
		return nil, err
	}
	parts, err := pipeline.Split(layers, points)
	if err != nil {
		return nil, err
	}
	var mine []pipeline.Stage
	var tie *dist.Group
	for _, s := range sched.StagesOf(pp.Rank()) {
		mine = append(mine, pipeline.Stage{Index: s, Module: parts[s]})
	}
	opts := pipeline.Options{
		Loss:         func(out *autograd.Var, y *tensor.Tensor) *autograd.Var { return models.Loss(out, y) },
		DataParallel: dp,
		Watch:        []*dist.Group{g},
	}
	if head != nil {
		tie, err = pp.NewGroup(ctx, []int{0, lastRank})
		if err != nil {
			return nil, err
		}
		switch pp.Rank() {
		case 0:
			opts.Tied = []pipeline.Tie{{Param: m.Wte.Weight, Group: tie}}
		case lastRank:
			opts.Tied = []pipeline.Tie{{Param: head, Group: tie}}
		}
	}
	p, err := pipeline.New(pp, sched, mine, opts)
	if err != nil {
		return nil, err
	}

	// AdamW: weight decay on the matrices of the blocks only (not on
	// biases, LayerNorms or the embeddings), as examples/tinygpt.
	var decay, keep []*autograd.Var
	for _, q := range p.Parameters() {
		if q.Value().Dim() < 2 || q == m.Wte.Weight || q == m.Wpe.Weight || q == head {
			keep = append(keep, q)
		} else {
			decay = append(decay, q)
		}
	}
	opt := optim.NewAdamWGroups([]optim.ParamGroup{{Params: decay, WeightDecay: 0.1}, {Params: keep}}, optim.AdamOptions{LR: c.LR, Beta2: 0.99})
	lr := optim.NewWarmupCosine(opt, c.Warmup, c.Steps, c.MinLR/c.LR)

	root := c.data
	if root == "" {
		if root, err = data.GoRootSource(); err != nil {
			return nil, err
		}
	}
	corpus, err := data.NewTextCorpus(root, data.TextCorpusOptions{})
	if err != nil {
		return nil, err
	}
	train, err := corpus.RandomWindows(data.Train, data.WindowOptions{BatchSize: batch, Block: c.Block, Seed: c.Seed, World: dpSize, Rank: dp.Rank()})
	if err != nil {
		return nil, err
	}
	val, err := corpus.EvalWindows(data.Validation, data.EvalOptions{BatchSize: batch, Block: c.Block, World: dpSize, Rank: dp.Rank(), MaxBatches: c.EvalBatches})
	if err != nil {
		return nil, err
	}
	micro := func(x, y *tensor.Tensor) (xs, ys []*tensor.Tensor) {
		n := batch / c.Micro
		for i := range c.Micro {
			xs = append(xs, x.Narrow(0, i*n, n).Contiguous())
			ys = append(ys, y.Narrow(0, i*n, n).Contiguous())
		}
		return xs, ys
	}
	// report brings a value known on the last stage of replica 0 to
	// rank 0 (an all-reduce of the world: every rank calls it).
	report := func(v float64) (float64, error) {
		if !(p.HasLast() && dp.Rank() == 0) {
			v = 0
		}
		t := tensor.FromFloat64([]float64{v})
		err := g.AllReduce(ctx, t, dist.Sum)
		return t.Float64s()[0], err
	}
	evaluate := func() (float64, error) {
		var sum float64
		for i := range val.Len() {
			xs, ys := micro(val.Batch(i))
			l, err := p.Eval(ctx, xs, ys)
			if err != nil {
				return 0, err
			}
			sum += l
		}
		t := tensor.FromFloat64([]float64{sum / float64(val.Len())})
		if err := dp.AllReduce(ctx, t, dist.Avg); err != nil {
			return 0, err
		}
		return report(t.Float64s()[0])
	}

	bubble, err := schedule.Simulate(sched, schedule.Costs{Forward: 1, Backward: 2, BackwardInput: 1, BackwardWeight: 1})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "pipeline-gpt: %d ranks = %d stages' ranks × %d replicas, %s with %d micro-batches, %d stages (cut before layers %v of %d), %d parameters; predicted bubble %.1f%%\n",
		g.Size(), c.PP, dpSize, c.Schedule, c.Micro, stages, points, len(layers), nn.NumParameters(m), 100*bubble.Bubble)
	res := &result{Config: c, World: g.Size(), DP: dpSize, Stages: stages, Params: nn.NumParameters(m), Steps: c.Steps, PredBubble: bubble.Bubble}
	var trained time.Duration
	var stepTimes, optTimes []time.Duration // every step's, and its optimizer's
	for step := range c.Steps {
		xs, ys := micro(train.Batch(step))
		begin := time.Now()
		opt.ZeroGrad(true)
		if err := p.Step(ctx, xs, ys); err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		if c.Clip > 0 {
			if _, err := p.ClipGradNorm(ctx, c.Clip); err != nil {
				return nil, fmt.Errorf("step %d: %w", step, err)
			}
		}
		optBegin := time.Now()
		opt.Step()
		lr.Step()
		optTimes = append(optTimes, time.Since(optBegin))
		stepTimes = append(stepTimes, time.Since(begin))
		trained += time.Since(begin)
		loss, err := replicasMean(ctx, p, dp, report)
		if err != nil {
			return nil, err
		}
		res.Losses = append(res.Losses, loss)
		res.TrainLoss = loss
		if (step+1)%c.log == 0 || step == 0 {
			tokens := float64((step+1)*c.Batch*c.Block) / trained.Seconds()
			fmt.Fprintf(log, "step %4d  loss %.4f  lr %.2e  %.0f tokens/s  %.1f ms/step\n", step+1, loss, opt.LR(), tokens, trained.Seconds()*1e3/float64(step+1))
		}
		if (step+1)%c.EvalEvery == 0 || step+1 == c.Steps {
			v, err := evaluate()
			if err != nil {
				return nil, fmt.Errorf("validation at step %d: %w", step+1, err)
			}
			res.ValLoss, res.ValBitsPerByte = v, v/math.Ln2
			fmt.Fprintf(log, "step %4d  validation loss %.4f  %.3f bits/byte\n", step+1, v, v/math.Ln2)
		}
	}
	res.MsPerStep = trained.Seconds() * 1e3 / float64(c.Steps)
	res.TokensPerS = float64(c.Steps*c.Batch*c.Block) / trained.Seconds()
	res.MedianMsPerStep = ms(median(stepTimes))
	xs, ys := micro(train.Batch(0))
	pred, err := predictRun(ctx, g, pp, dp, tie, m.Wte.Weight.Value().Numel(), sched, parts, p, c, xs[0], ys[0])
	if err != nil {
		return nil, err
	}
	pred.Optimizer = median(optTimes)
	pred.Step += pred.Optimizer
	res.PredMsPerStep, res.PredTransferMs = ms(pred.Step), ms(pred.Transfer)
	fmt.Fprintf(log, "measured %.1f ms a step (median; mean %.1f, the first steps touching fresh memory); predicted %s\n", res.MedianMsPerStep, res.MsPerStep, pred)
	if g.Rank() != 0 {
		return nil, nil
	}
	return res, nil
}

// predictRun profiles the model's stages on one micro-batch (x, y) on
// rank 0 while the others wait (so it measures each alone on a CPU: with
// every rank profiling at once, the ranks that finish first stop sharing
// the CPUs and the costs swing by 2×), and returns rank 0's prediction of
// the step from them (predict) with the links and CPUs its groups see;
// the other ranks return a zero prediction.
// tied is the tied embedding's size (summed over tie, when not nil).
func predictRun(ctx context.Context, g, pp, dp, tie *dist.Group, tied int, sched *schedule.Schedule, parts []nn.Layer, p *pipeline.Pipeline, c config, x, y *tensor.Tensor) (prediction, error) {
	if err := g.Barrier(ctx); err != nil {
		return prediction{}, err
	}
	var costs []schedule.StageCosts
	if g.Rank() == 0 {
		var err error
		costs, err = pipeline.Profile(parts, x, y, func(out *autograd.Var, y *tensor.Tensor) *autograd.Var { return models.Loss(out, y) }, 5)
		if err != nil {
			return prediction{}, err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return prediction{}, err
	}
	host := func(t algo.Topology, r int) int {
		for h, rs := range t.Hosts {
			if slices.Contains(rs, r) {
				return h
			}
		}
		return -1
	}
	ppTopo, world := pp.Topology(), g.Topology()
	place := placement{Link: g.Model().Local, CPUs: runtime.NumCPU(),
		RanksOnHost: len(world.Hosts[host(world, g.Rank())]), StagesOnHost: len(ppTopo.Hosts[host(ppTopo, pp.Rank())])}
	for s := 0; s+1 < sched.Stages; s++ {
		if host(ppTopo, sched.RankOf(s)) != host(ppTopo, sched.RankOf(s+1)) {
			place.Link = g.Model().Network
		}
	}
	var allReduce, others time.Duration
	if dp.Size() > 1 {
		n := 0
		for _, q := range p.Parameters() {
			n += q.Value().Numel()
		}
		ch, _ := dp.Choice("all_reduce", n, tensor.Float32)
		allReduce = ch.Predicted
	}
	if tie != nil {
		ch, _ := tie.Choice("all_reduce", tied, tensor.Float32)
		others += ch.Predicted
	}
	if c.Clip > 0 {
		ch, _ := pp.Choice("all_reduce", 1, tensor.Float64)
		others += ch.Predicted
	}
	act := c.Batch / dp.Size() / c.Micro * c.Block * c.Dim * 4
	if g.Rank() != 0 {
		return prediction{}, nil
	}
	return predict(sched, costs, place, act, allReduce, others)
}

// median returns the median of ds (0 for none).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// replicasMean is the step's training loss, the mean over the replicas,
// brought to rank 0.
func replicasMean(ctx context.Context, p *pipeline.Pipeline, dp *dist.Group, report func(float64) (float64, error)) (float64, error) {
	t := tensor.FromFloat64([]float64{p.Stats().Loss})
	if p.HasLast() {
		if err := dp.AllReduce(ctx, t, dist.Avg); err != nil {
			return 0, err
		}
	}
	return report(t.Float64s()[0])
}
