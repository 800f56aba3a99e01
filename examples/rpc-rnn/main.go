// Command rpc-rnn is the model-parallel RNN of PyTorch's "Getting Started
// with Distributed RPC Framework" tutorial ("Distributed RNN using
// Distributed Autograd and Distributed Optimizer") on packages rpc,
// rpc/distautograd and rpc/distoptim, trained as a byte-level language
// model of Go source. Start it with the launcher, two workers:
//
//	godist run --standalone --nproc-per-node 2 ./rpc-rnn
//
// Rank 0 ("ps", the parameter server) holds the embedding table and the
// decoder, which rank 1 ("trainer") creates there with Remote and keeps
// RRefs to; the LSTM lives on the trainer. Each step the trainer draws a
// batch of random windows of the corpus (data.RandomWindows), and, in a
// distributed autograd context, sends the indices to the embedding table
// by RPC, runs the LSTM on the rows that come back, sends its output to
// the decoder by RPC, and computes the cross entropy of the logits that
// come back. distautograd.Backward carries the gradients back across
// both workers, and a distributed optimizer (SGD, as the tutorial's), made
// from RRefs to every parameter (the parameter server's, which it hands
// out, and the LSTM's, which the trainer wraps itself), steps each
// worker's parameters with them. The loss of every step goes to stderr,
// and the trainer prints one JSON line to stdout.
//
// Unlike the tutorial, each window starts from a zero LSTM state: the
// windows are drawn at random, so a state carried from the last batch
// would mean nothing.
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
	"github.com/godist/godist/optim"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/rpc/distoptim"
	"github.com/godist/godist/tensor"
)

// The workers' names, as the tutorial's.
const (
	psName      = "ps"
	trainerName = "trainer"
)

type config struct {
	steps        int
	seed         uint64
	lr           float64
	data         string // "" means Go's own source tree
	batch, block int
	sizes        sizes
	// keepParams makes train return the final values of the parameters
	// (for tests).
	keepParams bool
}

type result struct {
	Steps      int     `json:"steps"`
	LossFirst  float64 `json:"loss_first"`
	LossLast   float64 `json:"loss_last"`
	WallS      float64 `json:"wall_s"`
	TokensPerS float64 `json:"tokens_per_s"`

	losses []float64
	params []*tensor.Tensor // with keepParams, in parameterRRefs' order
}

func main() {
	c := config{}
	flag.IntVar(&c.steps, "steps", 500, "training steps")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the weights, the dropout masks and the windows")
	flag.Float64Var(&c.lr, "lr", 2, "SGD's learning rate")
	flag.StringVar(&c.data, "data", "", "directory of Go source to train on (default: $(go env GOROOT)/src)")
	flag.IntVar(&c.batch, "batch", 8, "windows per step")
	flag.IntVar(&c.block, "block", 32, "bytes per window (the sequence length)")
	flag.IntVar(&c.sizes.Emb, "emb", 32, "embedding size")
	flag.IntVar(&c.sizes.Hidden, "hidden", 64, "LSTM hidden size")
	flag.IntVar(&c.sizes.Layers, "layers", 1, "LSTM layers")
	flag.Float64Var(&c.sizes.Dropout, "dropout", 0.1, "dropout of the embedding table's output and the decoder's input")
	flag.Parse()
	os.Exit(worker(context.Background(), c, os.Stdout, os.Stderr))
}

// worker is one process of the job: rank 0 the parameter server holding
// the embedding and the decoder, rank 1 the trainer driving the LSTM
// through distributed autograd. The trainer's losses end as one JSON line
// on stdout; the exit status is 0, or 1 with the error recorded.
func worker(ctx context.Context, c config, stdout, stderr io.Writer) int {
	return dist.Main(ctx, "rpc-rnn", dist.Options{}, stderr, func(ctx context.Context, g *dist.Group) error {
		return progress.JSONLine[*result](stdout)(run(ctx, g, c, stderr))
	})
}

func (c config) check() error {
	switch {
	case c.steps < 1:
		return fmt.Errorf("--steps %d: want at least 1", c.steps)
	case c.lr <= 0:
		return fmt.Errorf("--lr %v: want > 0", c.lr)
	case c.batch < 1 || c.block < 1:
		return fmt.Errorf("--batch %d --block %d: want at least 1 each", c.batch, c.block)
	case c.sizes.Emb < 1 || c.sizes.Hidden < 1 || c.sizes.Layers < 1:
		return fmt.Errorf("--emb %d --hidden %d --layers %d: want at least 1 each", c.sizes.Emb, c.sizes.Hidden, c.sizes.Layers)
	case c.sizes.Dropout < 0 || c.sizes.Dropout >= 1:
		return fmt.Errorf("--dropout %v: want 0 <= p < 1", c.sizes.Dropout)
	}
	return nil
}

// sgdName names the optimizer constructor, which every worker registers
// under the same name (code does not cross the wire).
func sgdName(lr float64) string { return fmt.Sprintf("rpc-rnn.sgd(lr=%g)", lr) }

func newSGD(lr float64) distoptim.Constructor {
	return func(ps []*autograd.Var) optim.Optimizer { return optim.NewSGD(ps, optim.SGDOptions{LR: lr}) }
}

// run is one worker: the trainer trains and returns the result; the
// parameter server serves until the trainer is done and returns nil.
func run(ctx context.Context, g *dist.Group, c config, log io.Writer) (*result, error) {
	if g.Size() != 2 {
		return nil, fmt.Errorf("rpc-rnn runs on a parameter server and a trainer: start it with godist run --nproc-per-node 2 (world size %d)", g.Size())
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
	name := psName
	if g.Rank() == 1 {
		name = trainerName
	}
	var res *result
	// The parameter server serves until the trainer is done.
	err = rpc.Run(ctx, name, rpc.Options{Group: g, Functions: reg}, func(ctx context.Context, a *rpc.Agent) (err error) {
		if g.Rank() == 1 {
			res, err = train(ctx, a, f, c, log)
		}
		return err
	})
	return res, err
}

// windows reads the corpus and returns its training windows.
func windows(c config, log io.Writer) (*data.RandomWindows, error) {
	dir := c.data
	if dir == "" {
		var err error
		if dir, err = data.GoRootSource(); err != nil {
			return nil, fmt.Errorf("%w; pass --data DIR", err)
		}
	}
	t0 := time.Now()
	corpus, err := data.NewTextCorpus(dir, data.TextCorpusOptions{})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "data: %s: %d files, %.1f MB of training bytes (read in %.1f s); batch %d×%d bytes\n",
		dir, corpus.NumFiles(data.Train), float64(corpus.Len(data.Train))/1e6, time.Since(t0).Seconds(), c.batch, c.block)
	return corpus.RandomWindows(data.Train, data.WindowOptions{BatchSize: c.batch, Block: c.block, Seed: c.seed})
}

// train is the trainer's loop (the tutorial's run_trainer).
func train(ctx context.Context, a *rpc.Agent, f *funcs, c config, log io.Writer) (res *result, err error) {
	w, err := windows(c, log)
	if err != nil {
		return nil, err
	}
	m, err := newRemoteModel(ctx, a, f, psName, c.seed, c.sizes)
	if err != nil {
		return nil, err
	}
	defer m.release()
	params, err := m.parameterRRefs(ctx, a, f)
	if err != nil {
		return nil, err
	}
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
	fmt.Fprintf(log, "trainer: embedding table and decoder on %s, LSTM (%d→%d, %d layers) here; %d parameters in all; SGD lr %g\n",
		psName, c.sizes.Emb, c.sizes.Hidden, c.sizes.Layers, len(params), c.lr)

	res = &result{}
	start := time.Now()
	for step := range c.steps {
		x, y := w.Batch(step)
		loss, err := m.step(ctx, opt, x, y)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", step+1, err)
		}
		res.losses = append(res.losses, loss)
		fmt.Fprintf(log, "step %d\tloss %.4f\n", step+1, loss)
	}
	res.WallS = time.Since(start).Seconds()
	res.Steps = c.steps
	res.LossFirst, res.LossLast = res.losses[0], res.losses[len(res.losses)-1]
	res.TokensPerS = float64(c.steps*c.batch*c.block) / res.WallS
	if c.keepParams {
		for _, p := range params {
			v, err := f.value.Call(ctx, a, p, struct{}{})
			if err != nil {
				return nil, err
			}
			res.params = append(res.params, v)
		}
	}
	return res, nil
}

// step is one training step in a distributed autograd context of its own
// (the tutorial's `with dist_autograd.context() as context_id`): forward
// across the workers, distributed backward, a step of every worker's
// optimizer. It returns the loss.
func (m *remoteModel) step(ctx context.Context, opt *distoptim.Optimizer, x, y *tensor.Tensor) (loss float64, err error) {
	cctx, id, err := distautograd.NewContext(ctx, m.a)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, distautograd.Release(cctx, id)) }()
	l, err := m.loss(cctx, x, y)
	if err != nil {
		return 0, err
	}
	if err := distautograd.Backward(cctx, id, l); err != nil {
		return 0, err
	}
	if err := opt.Step(cctx, id); err != nil {
		return 0, err
	}
	return l.Value().Item(), nil
}
