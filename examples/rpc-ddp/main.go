// Command rpc-ddp is PyTorch's tutorial "Combining Distributed
// DataParallel with Distributed RPC Framework" on packages parallel/ddp,
// rpc, rpc/distautograd and rpc/distoptim: a model whose sparse part (an
// embedding table) lives on a parameter server and is reached by RPC,
// and whose dense part (a linear layer) is replicated on two trainers
// and trained with DDP. Start it with the launcher, four workers:
//
//	godist run --standalone --nproc-per-node 4 ./rpc-ddp
//
// The ranks are the tutorial's: "trainer0" and "trainer1" (ranks 0 and
// 1), "master" (rank 2) and "ps" (rank 3). Every worker makes the
// trainers' subgroup with NewGroup (the tutorial's trainers call
// init_process_group among themselves). The master creates the
// embedding table on the parameter server with Remote, as the tutorial's
// RemoteModule, and starts both trainers' loops by RPC, passing each the
// RRef to the table (the tutorial's rpc_async(run_trainer)); it waits
// for both, then prints one JSON line on stdout. Driving the trainers
// from the master costs nothing here: the loop is a registered function
// that finds the trainers' subgroup and this worker's flags in its
// closure, and the master collects the trainers' losses in the replies.
//
// The table is the tutorial's nn.EmbeddingBag(mode="sum"), which godist's
// nn lacks: an nn.Embedding whose forward sums the rows of each bag
// (autograd.Embedding, then Narrow and Sum a bag, then Stack). Each
// trainer wraps an nn.Linear(dim, 8) in DDP over the trainers' subgroup,
// asks the parameter server for RRefs to the table's parameters (the
// tutorial's remote_parameters), adds RRefs to its own layer's, and
// builds a distributed optimizer (SGD) over all of them. Each step, in a
// distributed autograd context of its own, it draws a random batch
// (bags of 1 to 10 indices, a random target class a bag, seeded by the
// trainer and the step), looks the bags up in the table by RPC, runs the
// sums through its DDP layer, takes the cross entropy, runs
// distautograd.Backward across both workers, waits for DDP (Wait: the
// layer's gradients in the context are now the trainers' average) and
// steps the optimizer with the context's gradients: its own copy of the
// layer with the average, the table with this trainer's gradient. The
// two trainers step the table independently, as the tutorial's do, so
// their updates of it interleave as they come (a lock on the parameter
// server only keeps a lookup from reading rows that a step is writing).
// Each trainer's loss of every step goes to its stderr.
//
// Unlike the tutorial, a batch has a fixed number of bags (--batch)
// where the tutorial's draws 20 to 50 indices and cuts them into as many
// bags as its random offsets make. The targets are random, as the
// tutorial's, so the loss can only fall to about ln 8 ≈ 2.08 (the
// uniform guess), from wherever the initial weights put it. And unlike
// PyTorch's DDP, whose reducer finishes inside the autograd engine's
// final callback, godist's needs Wait after backward (see parallel/ddp's
// Wait).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/godist/godist/examples/progress"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/rpc/distoptim"
	"github.com/godist/godist/tensor"
)

// The workers' ranks and names, as the tutorial's.
const (
	trainers   = 2
	masterRank = 2
	psRank     = 3
	world      = 4
	masterName = "master"
	psName     = "ps"
)

func trainerName(r int) string { return fmt.Sprintf("trainer%d", r) }

type config struct {
	steps   int
	batch   int // bags a trainer's step
	sizes   sizes
	lr      float64
	seed    uint64
	timeout time.Duration // of the trainers' loops, as the master waits for them

	// For tests. keepParams makes the master return the table's and the
	// trainers' layers' final values. lockstep orders the trainers'
	// optimizer steps (trainer 0's, then trainer 1's, both before either
	// looks the next batch up) with barriers over their subgroup, so that
	// the table's updates come in one order; without it they come as they
	// may, as in the tutorial. inspect, when set, is called in each
	// trainer after DDP's Wait with the context's gradients.
	keepParams bool
	lockstep   bool
	inspect    func(trainer, step int, lin *nn.Linear, grads map[*autograd.Var]*tensor.Tensor)
}

type result struct {
	Steps       int     `json:"steps"`
	Trainers    int     `json:"trainers"`
	Batch       int     `json:"batch"`
	LossFirst   float64 `json:"loss_first"` // the trainers' mean
	LossLast    float64 `json:"loss_last"`
	WallS       float64 `json:"wall_s"`
	SamplesPerS float64 `json:"samples_per_s"` // bags, both trainers

	trainers [trainers]*trainerResult
	table    *tensor.Tensor // with keepParams
}

func main() {
	c := config{}
	flag.IntVar(&c.steps, "steps", 200, "training steps of each trainer")
	flag.IntVar(&c.batch, "batch", 32, "bags in a trainer's batch")
	flag.IntVar(&c.sizes.Rows, "rows", 100, "rows of the embedding table")
	flag.IntVar(&c.sizes.Dim, "dim", 16, "size of an embedding")
	flag.Float64Var(&c.lr, "lr", 0.05, "SGD's learning rate")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the weights and the batches")
	flag.DurationVar(&c.timeout, "timeout", 30*time.Minute, "how long the master waits for the trainers")
	flag.Parse()
	os.Exit(worker(context.Background(), c, os.Stdout, os.Stderr))
}

// worker is one process of the job. The master's result ends as one JSON
// line on stdout; the exit status is 0, or 1 with the error recorded.
func worker(ctx context.Context, c config, stdout, stderr io.Writer) int {
	return dist.Main(ctx, "rpc-ddp", dist.Options{}, stderr, func(ctx context.Context, g *dist.Group) error {
		return progress.JSONLine[*result](stdout)(run(ctx, g, c, stderr))
	})
}

func (c config) check() error {
	switch {
	case c.steps < 1 || c.batch < 1:
		return fmt.Errorf("--steps %d --batch %d: want at least 1 each", c.steps, c.batch)
	case c.sizes.Rows < 1 || c.sizes.Dim < 1:
		return fmt.Errorf("--rows %d --dim %d: want at least 1 each", c.sizes.Rows, c.sizes.Dim)
	case c.lr <= 0:
		return fmt.Errorf("--lr %v: want > 0", c.lr)
	case c.timeout <= 0:
		return fmt.Errorf("--timeout %v: want > 0", c.timeout)
	}
	return nil
}

// sgdName names the optimizer constructor, which every worker registers
// under the same name (code does not cross the wire).
func sgdName(lr float64) string { return fmt.Sprintf("rpc-ddp.sgd(lr=%g)", lr) }

func newSGD(lr float64) distoptim.Constructor {
	return func(ps []*autograd.Var) optim.Optimizer {
		return optim.NewSGD(ps, optim.SGDOptions{LR: lr})
	}
}

// run is one worker: the master returns the result; the trainers and the
// parameter server serve until the master is done and return nil.
func run(ctx context.Context, g *dist.Group, c config, log io.Writer) (*result, error) {
	if g.Size() != world {
		return nil, fmt.Errorf("rpc-ddp runs on two trainers, a master and a parameter server: start it with godist run --nproc-per-node 4 (world size %d)", g.Size())
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	// The trainers' DDP group (the tutorial's trainers' own
	// init_process_group): every worker takes part in making it.
	sub, err := g.NewGroup(ctx, []int{0, 1})
	if err != nil {
		return nil, err
	}
	reg := rpc.NewRegistry()
	var f *funcs
	f, err = register(reg, func(ctx context.Context, args trainerArgs) (*trainerResult, error) {
		if sub == nil || args.Trainer != g.Rank() {
			return nil, fmt.Errorf("run_trainer(%d) called on rank %d: only trainers 0 and 1 train, each as itself", args.Trainer, g.Rank())
		}
		a, _ := rpc.AgentFrom(ctx)
		return train(ctx, a, f, sub, args, c, log)
	})
	if err != nil {
		return nil, err
	}
	if err := distoptim.Register(reg); err != nil {
		return nil, err
	}
	distoptim.RegisterConstructor(sgdName(c.lr), newSGD(c.lr))
	var name string
	switch g.Rank() {
	case masterRank:
		name = masterName
	case psRank:
		name = psName
	default:
		name = trainerName(g.Rank())
	}
	var res *result
	// The trainers and the parameter server serve until the master is
	// done.
	err = rpc.Run(ctx, name, rpc.Options{Group: g, Functions: reg}, func(ctx context.Context, a *rpc.Agent) (err error) {
		if g.Rank() == masterRank {
			res, err = master(ctx, a, f, c, log)
		}
		return err
	})
	return res, err
}

// master is the tutorial's master: it creates the table on the parameter
// server, runs both trainers' loops and waits for them.
func master(ctx context.Context, a *rpc.Agent, f *funcs, c config, log io.Writer) (*result, error) {
	table, err := f.newTable.Remote(ctx, a, psName, tableArgs{Seed: c.seed, Sizes: c.sizes})
	if err != nil {
		return nil, err
	}
	defer table.Release()
	fmt.Fprintf(log, "master: embedding bag table %d×%d on %s; %d trainers, each a DDP linear %d→%d, %d steps of %d bags; SGD lr %g\n",
		c.sizes.Rows, c.sizes.Dim, psName, trainers, c.sizes.Dim, classes, c.steps, c.batch, c.lr)
	tctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	futs := make([]*rpc.Future[*trainerResult], trainers)
	for r := range trainers {
		futs[r] = f.runTrainer.Go(tctx, a, trainerName(r), trainerArgs{Table: table, Trainer: r})
	}
	outs, err := rpc.WaitAll(tctx, futs)
	if err != nil {
		return nil, err
	}
	res := &result{Steps: c.steps, Trainers: trainers, Batch: c.batch, WallS: time.Since(start).Seconds()}
	samples := 0
	for r, o := range outs {
		if o == nil || len(o.Losses) != c.steps {
			return nil, fmt.Errorf("trainer %d returned %v, want %d losses", r, o, c.steps)
		}
		res.trainers[r] = o
		res.LossFirst += o.Losses[0] / trainers
		res.LossLast += o.Losses[c.steps-1] / trainers
		samples += o.Samples
	}
	res.SamplesPerS = float64(samples) / res.WallS
	if c.keepParams {
		if res.table, err = f.tableValue.Call(ctx, a, table, struct{}{}); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// train is a trainer's loop (the tutorial's _run_trainer), run by the
// master's call.
func train(ctx context.Context, a *rpc.Agent, f *funcs, sub *dist.Group, args trainerArgs, c config, log io.Writer) (res *trainerResult, err error) {
	r := args.Trainer
	lin := newLinear(c.seed, c.sizes, r)
	model, err := ddp.New(ctx, lin, sub, ddp.Options{})
	if err != nil {
		return nil, err
	}
	m := &hybrid{
		embed: func(ctx context.Context, indices, offsets []int64) (*autograd.Var, error) {
			e, err := f.lookup.Call(ctx, a, args.Table, bagArgs{Indices: indices, Offsets: offsets})
			if err != nil {
				return nil, err
			}
			return e.Var, nil
		},
		fc: model,
	}
	// The table's parameters (on the parameter server), then the layer's
	// (here).
	params, err := f.tableParams.Call(ctx, a, args.Table, struct{}{})
	if err != nil {
		return nil, err
	}
	params = append(params, distoptim.ParameterRRefs(a, lin)...)
	defer func() {
		for _, p := range params {
			p.Release()
		}
	}()
	opt, err := distoptim.New(ctx, a, sgdName(c.lr), params)
	if err != nil {
		return nil, err
	}
	defer opt.Release()

	res = &trainerResult{}
	for step := range c.steps {
		indices, offsets, target := batch(c.seed, r, step, c.batch, c.sizes.Rows)
		loss, err := trainStep(ctx, a, m, model, lin, opt, sub, c, r, step, indices, offsets, target)
		if err != nil {
			return nil, fmt.Errorf("trainer %d, step %d: %w", r, step+1, err)
		}
		res.Losses = append(res.Losses, loss)
		res.Samples += c.batch
		fmt.Fprintf(log, "%s step %d\tloss %.4f\n", trainerName(r), step+1, loss)
	}
	if c.keepParams {
		res.Weight, res.Bias = lin.Weight.Value().Clone(), lin.Bias.Value().Clone()
	}
	return res, nil
}

// trainStep is one step in a distributed autograd context of its own (the
// tutorial's `with dist_autograd.context() as context_id`). It returns the
// loss.
func trainStep(ctx context.Context, a *rpc.Agent, m *hybrid, model *ddp.DDP, lin *nn.Linear, opt *distoptim.Optimizer, sub *dist.Group,
	c config, r, step int, indices, offsets []int64, target *tensor.Tensor) (loss float64, err error) {
	cctx, id, err := distautograd.NewContext(ctx, a)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, distautograd.Release(cctx, id)) }()
	l, err := m.loss(cctx, indices, offsets, target)
	if err != nil {
		return 0, err
	}
	if err := distautograd.Backward(cctx, id, l); err != nil {
		return 0, err
	}
	// The layer's gradients in the context become the trainers' average.
	if err := model.Wait(ctx); err != nil {
		return 0, err
	}
	if c.inspect != nil {
		grads, err := distautograd.GetGradients(cctx, id)
		if err != nil {
			return 0, err
		}
		c.inspect(r, step, lin, grads)
	}
	if c.lockstep && r == 1 {
		if err := sub.Barrier(ctx); err != nil { // after trainer 0's step
			return 0, err
		}
	}
	if err := opt.Step(cctx, id); err != nil {
		return 0, err
	}
	if c.lockstep {
		if r == 0 {
			if err := sub.Barrier(ctx); err != nil { // trainer 1 steps now
				return 0, err
			}
		}
		if err := sub.Barrier(ctx); err != nil { // both stepped
			return 0, err
		}
	}
	return l.Value().Item(), nil
}
