// Command rpc-pipeline is PyTorch's "Distributed Pipeline Parallelism
// Using RPC" tutorial on packages rpc, rpc/distautograd and
// rpc/distoptim, training a small convolutional network on
// Fashion-MNIST. Start it with the launcher, a master and two workers:
//
//	godist run --standalone --nproc-per-node 3 ./rpc-pipeline
//
// The master (rank 0) creates the model's two shards on "worker1" and
// "worker2" with Remote and keeps RRefs to them: shard 1 is the
// convolutions (conv 1→8 5×5, ReLU, max pool; conv 8→16 5×5, ReLU, max
// pool), shard 2 the classifier (256→120, ReLU, 120→10). Each step, in a
// distributed autograd context of its own, the master splits the batch
// into --micro-batches parts and, for each, wraps it in an RRef, asks
// worker1 with Remote for shard 1's output (an RRef: the activation stays
// on worker1), and starts shard 2's forward on that RRef with Go; each
// shard's forward fetches its input with ToHere. Every micro-batch is in
// flight at once, so worker1 computes one while worker2 computes the one
// before. The master concatenates the outputs, takes the cross entropy
// of the whole batch, runs distautograd.Backward across both workers and
// steps a distributed optimizer (SGD) over RRefs to both shards'
// parameters.
//
// Unlike the tutorial (ResNet-50 on random images with an MSE loss of
// one-hot labels), the model is small enough to train on this machine's
// CPUs, and the loss is the cross entropy of real labels.
//
// The loss of every step goes to stderr; at the end the master fetches
// the parameters' values, evaluates test accuracy with a local copy of
// the model and prints one JSON line on stdout.
// tools/peers/rpc_pipeline.py is the tutorial's PyTorch code on the same
// model, weights, batches and optimizer.
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
	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/rpc/distoptim"
	"github.com/godist/godist/tensor"
)

// The workers' names, as the tutorial's.
const (
	masterName = "master"
	worker1    = "worker1"
	worker2    = "worker2"
)

type config struct {
	epochs       int
	maxSteps     int // per epoch (0: the whole training set)
	batch        int
	microBatches int
	lr           float64
	seed         uint64
	dir          string
	logEvery     int
	// keepParams makes train return the parameters' final values (for
	// tests); noEval skips the test set.
	keepParams, noEval bool
}

type result struct {
	Epochs       int     `json:"epochs"`
	Steps        int     `json:"steps"`
	Batch        int     `json:"batch"`
	MicroBatches int     `json:"micro_batches"`
	LR           float64 `json:"lr"`
	Samples      int     `json:"samples"`
	WallS        float64 `json:"wall_s"`
	SamplesPerS  float64 `json:"samples_per_s"`
	LossFirst    float64 `json:"loss_first"`
	LossLast     float64 `json:"loss_last"`
	TestAcc      float64 `json:"test_accuracy"`
	Data         string  `json:"data"`

	losses []float64
	params []*tensor.Tensor // with keepParams: shard 1's, then shard 2's
}

func main() {
	var c config
	flag.IntVar(&c.epochs, "epochs", 1, "epochs over the training set")
	flag.IntVar(&c.maxSteps, "max-steps", 0, "stop each epoch after this many steps (0: the whole training set)")
	flag.IntVar(&c.batch, "batch", 64, "batch size")
	flag.IntVar(&c.microBatches, "micro-batches", 4, "micro-batches a batch is split into, all in flight at once")
	flag.Float64Var(&c.lr, "lr", 0.05, "SGD's learning rate (the tutorial's 0.05)")
	flag.Uint64Var(&c.seed, "seed", 0, "seed of the weights (shard i from seed+i, as torch.manual_seed) and of the shuffle")
	flag.StringVar(&c.dir, "data", os.Getenv(data.FashionMNISTEnv), "Fashion-MNIST directory (default: $GODIST_FASHION_MNIST, else the installed set, else the shipped subset)")
	flag.IntVar(&c.logEvery, "log-interval", 1, "log the loss every this many steps")
	flag.Parse()
	os.Exit(worker(context.Background(), c, os.Stdout, os.Stderr))
}

// worker is one process of the job: rank 0 the master, ranks 1 and 2 the
// shards' workers. The master's result ends as one JSON line on stdout;
// the exit status is 0, or 1 with the error recorded for the launcher.
func worker(ctx context.Context, c config, stdout, stderr io.Writer) int {
	return dist.Main(ctx, "rpc-pipeline", dist.Options{}, stderr, func(ctx context.Context, g *dist.Group) error {
		return progress.JSONLine[*result](stdout)(run(ctx, g, c, stderr))
	})
}

func (c config) check() error {
	switch {
	case c.epochs < 1:
		return fmt.Errorf("--epochs %d: want at least 1", c.epochs)
	case c.maxSteps < 0:
		return fmt.Errorf("--max-steps %d: want 0 (all) or more", c.maxSteps)
	case c.batch < 1:
		return fmt.Errorf("--batch %d: want at least 1", c.batch)
	case c.microBatches < 1 || c.microBatches > c.batch:
		return fmt.Errorf("--micro-batches %d: want 1 to --batch (%d)", c.microBatches, c.batch)
	case c.lr <= 0:
		return fmt.Errorf("--lr %v: want > 0", c.lr)
	}
	return nil
}

// sgdName names the optimizer constructor, which every worker registers
// under the same name (code does not cross the wire).
func sgdName(lr float64) string { return fmt.Sprintf("rpc-pipeline.sgd(lr=%g)", lr) }

func newSGD(lr float64) distoptim.Constructor {
	return func(ps []*autograd.Var) optim.Optimizer { return optim.NewSGD(ps, optim.SGDOptions{LR: lr}) }
}

func workerName(rank int) string {
	if rank == 0 {
		return masterName
	}
	return fmt.Sprintf("worker%d", rank)
}

// run is one worker: the master trains and returns the result; the
// shards' workers serve until it is done and return nil.
func run(ctx context.Context, g *dist.Group, c config, log io.Writer) (*result, error) {
	if g.Size() != 3 {
		return nil, fmt.Errorf("rpc-pipeline runs on a master and two workers: start it with godist run --nproc-per-node 3 (world size %d)", g.Size())
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	reg := rpc.NewRegistry()
	f, err := register(reg)
	if err != nil {
		return nil, err
	}
	if err := distoptim.Register(reg); err != nil {
		return nil, err
	}
	distoptim.RegisterConstructor(sgdName(c.lr), newSGD(c.lr))
	var d *dataset
	if g.Rank() == 0 {
		if d, err = loadData(c.dir); err != nil {
			return nil, err
		}
	}
	var res *result
	err = rpc.Run(ctx, workerName(g.Rank()), rpc.Options{Group: g, Functions: reg}, func(ctx context.Context, a *rpc.Agent) (err error) {
		if g.Rank() == 0 {
			res, err = train(ctx, a, f, d, c, log)
		}
		return err
	})
	return res, err
}

type dataset struct {
	xtr, ytr, xte, yte *tensor.Tensor
	which              string
}

func loadData(dir string) (*dataset, error) {
	d := &dataset{which: "given"}
	if dir == "" {
		var full bool
		dir, full = data.FindFashionMNIST()
		d.which = "subset"
		if full {
			d.which = "full"
		}
	}
	var err error
	if d.xtr, d.ytr, err = data.LoadFashionMNIST(dir, true); err != nil {
		return nil, err
	}
	if d.xte, d.yte, err = data.LoadFashionMNIST(dir, false); err != nil {
		return nil, err
	}
	return d, nil
}

// stepsPerEpoch is how many batches an epoch over n samples runs.
func stepsPerEpoch(n int, c config) int {
	nb := (n + c.batch - 1) / c.batch
	if c.maxSteps > 0 {
		nb = min(nb, c.maxSteps)
	}
	return nb
}

// train is the master's loop (the tutorial's run_master).
func train(ctx context.Context, a *rpc.Agent, f *funcs, d *dataset, c config, log io.Writer) (res *result, err error) {
	m, err := newDistModel(ctx, a, f, worker1, worker2, c.seed, c.microBatches)
	if err != nil {
		return nil, err
	}
	defer m.release()
	params, err := m.parameterRRefs(ctx)
	if err != nil {
		return nil, err
	}
	opt, err := distoptim.New(ctx, a, sgdName(c.lr), params)
	if err != nil {
		return nil, err
	}
	defer opt.Release()
	fmt.Fprintf(log, "master: %s Fashion-MNIST (%d train, %d test); shard 1 (convolutions) on %s, shard 2 (classifier) on %s, %d parameters; batch %d in %d micro-batches, SGD lr %g\n",
		d.which, d.xtr.Size(0), d.xte.Size(0), worker1, worker2, len(params), c.batch, c.microBatches, c.lr)

	sampler, err := data.NewDistributedSampler(d.xtr.Size(0), 1, 0, true, c.seed, false)
	if err != nil {
		return nil, err
	}
	ds := data.NewTensorDataset(d.xtr, d.ytr)
	res = &result{Epochs: c.epochs, Batch: c.batch, MicroBatches: c.microBatches, LR: c.lr, Data: d.which}
	var batch []*tensor.Tensor
	start := time.Now()
	for ep := range c.epochs {
		sampler.SetEpoch(ep)
		idx := sampler.Indices()
		nb := stepsPerEpoch(len(idx), c)
		for b := range nb {
			batch = ds.BatchInto(batch, idx[b*c.batch:min((b+1)*c.batch, len(idx))])
			loss, err := m.step(ctx, opt, batch[0], batch[1])
			if err != nil {
				return nil, fmt.Errorf("epoch %d step %d: %w", ep+1, b+1, err)
			}
			res.losses = append(res.losses, loss)
			res.Samples += batch[0].Size(0)
			if c.logEvery > 0 && (b+1)%c.logEvery == 0 {
				fmt.Fprintf(log, "epoch %d step %d/%d\tloss %.4f\n", ep+1, b+1, nb, loss)
			}
		}
	}
	res.WallS = time.Since(start).Seconds()
	res.Steps = len(res.losses)
	res.SamplesPerS = float64(res.Samples) / res.WallS
	res.LossFirst, res.LossLast = res.losses[0], res.losses[len(res.losses)-1]

	values := make([]*tensor.Tensor, len(params))
	for i, p := range params {
		if values[i], err = f.value.Call(ctx, a, p, struct{}{}); err != nil {
			return nil, err
		}
	}
	if c.keepParams {
		res.params = values
	}
	if !c.noEval {
		if res.TestAcc, err = accuracy(values, c.seed, d.xte, d.yte); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(log, "master: %d samples in %.2f s (%.0f samples/s), test accuracy %.4f\n",
		res.Samples, res.WallS, res.SamplesPerS, res.TestAcc)
	return res, nil
}

// step is one training step in a distributed autograd context of its own
// (the tutorial's `with dist_autograd.context() as context_id`): forward
// through the pipeline, the loss here, distributed backward, a step of
// both shards' optimizers. It returns the loss.
func (m *distModel) step(ctx context.Context, opt *distoptim.Optimizer, x, y *tensor.Tensor) (loss float64, err error) {
	cctx, id, err := distautograd.NewContext(ctx, m.a)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, distautograd.Release(cctx, id)) }()
	outs, err := m.forward(cctx, x)
	if err != nil {
		return 0, err
	}
	l := lossOf(outs, y)
	if err := distautograd.Backward(cctx, id, l); err != nil {
		return 0, err
	}
	if err := opt.Step(cctx, id); err != nil {
		return 0, err
	}
	return l.Value().Item(), nil
}

// localShards builds both shards here with the parameters' values (shard
// 1's, then shard 2's, as parameterRRefs orders them).
func localShards(values []*tensor.Tensor, seed uint64) (*shard, *shard, error) {
	s1, err := newShard(shard1, seed)
	if err != nil {
		return nil, nil, err
	}
	s2, err := newShard(shard2, seed)
	if err != nil {
		return nil, nil, err
	}
	ps := append(nn.Parameters(s1.seq), nn.Parameters(s2.seq)...)
	if len(ps) != len(values) {
		return nil, nil, fmt.Errorf("%d parameter values for a model of %d", len(values), len(ps))
	}
	for i, p := range ps {
		p.Value().Copy(values[i])
	}
	return s1, s2, nil
}

// accuracy evaluates the model with these parameters on (x, y), locally,
// in chunks.
func accuracy(values []*tensor.Tensor, seed uint64, x, y *tensor.Tensor) (float64, error) {
	s1, s2, err := localShards(values, seed)
	if err != nil {
		return 0, err
	}
	correct := 0
	autograd.NoGrad(func() {
		for i := 0; i < x.Size(0); i += 1000 {
			n := min(1000, x.Size(0)-i)
			logits := s2.forward(s1.forward(autograd.Const(x.Narrow(0, i, n))))
			for j, p := range tensor.Argmax(logits.Value(), 1).Int64s() {
				if int64(y.At(i+j)) == p {
					correct++
				}
			}
		}
	})
	return float64(correct) / float64(x.Size(0)), nil
}
