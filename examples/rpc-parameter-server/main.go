// Command rpc-parameter-server is PyTorch's "Implementing a Parameter
// Server Using Distributed RPC Framework" tutorial on packages rpc,
// distautograd and distoptim, training on Fashion-MNIST. Start it with the
// launcher, one parameter server and two trainers:
//
//	godist run --standalone --nproc-per-node 3 ./rpc-parameter-server
//
// Rank 0 ("parameter_server") holds the model, a ParameterServer object
// that the trainers reach through an RRef. Ranks 1..N ("trainer1"..)
// each train on their shard of the training set (DistributedSampler's
// split): every batch, inside a distributed autograd context, the
// trainer's forward calls the server's forward by RPC (the tutorial's
// TrainerNet), gets the logits back as a Var, computes the loss locally,
// runs distautograd.Backward (the gradients of the server's parameters
// stay on the server, in the context) and steps its own distributed
// optimizer, whose SGD lives on the server, over RRefs to the
// parameters. The trainers run asynchronously (Hogwild-style, as the
// tutorial): nothing orders one trainer's steps against another's.
//
// The model is the 784-256-128-10 MLP of models rather than the
// tutorial's CNN (two 3×3 convolutions, 32 and 64 channels, and a
// 9216-128 layer: 1.2M parameters, ~100× the MLP's multiply-adds per
// sample), which would take tens of minutes per epoch on this two-core
// machine; the MLP reaches the 83% in one epoch at the
// tutorial's batch (32) and learning rate (SGD, 0.03).
//
// Each forward copies the parameters under a read lock (an identity in
// the graph, so the gradients still reach the parameters); a step takes
// the write lock. So a forward never reads half a step, and backward on
// the server never reads parameters a step is changing, which in Go would
// be a data race; steps from different trainers interleave freely
// between forwards, as in the tutorial.
//
// When the trainers are done the server evaluates test accuracy and
// prints one JSON line on stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"github.com/godist/godist/examples/progress"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/rpc/distoptim"
	"github.com/godist/godist/tensor"
)

type config struct {
	epochs     int
	batch      int
	lr         float64
	seed       uint64
	maxBatches int // per trainer per epoch (0: all); for tests
	dir        string
	logEvery   int
}

type result struct {
	Epochs      int     `json:"epochs"`
	Trainers    int     `json:"trainers"`
	TestAcc     float64 `json:"test_accuracy"`
	SamplesPerS float64 `json:"samples_per_s"`
	Samples     int     `json:"samples"`
	WallS       float64 `json:"wall_s"`
	Model       string  `json:"model"`
	Data        string  `json:"data"`
	// ParamChange is ‖θ−θ₀‖/‖θ₀‖ over all the server's parameters.
	ParamChange float64 `json:"param_change"`
}

func main() {
	var c config
	flag.IntVar(&c.epochs, "epochs", 1, "epochs each trainer runs over its shard")
	flag.IntVar(&c.batch, "batch", 32, "batch size of each trainer (the tutorial's 32)")
	flag.Float64Var(&c.lr, "lr", 0.03, "SGD learning rate (the tutorial's 0.03)")
	flag.Uint64Var(&c.seed, "seed", 0, "seed of the weights and of the samplers' shuffle")
	flag.IntVar(&c.maxBatches, "max-batches", 0, "stop each trainer's epoch after this many batches (0: the whole shard)")
	flag.StringVar(&c.dir, "data", os.Getenv(data.FashionMNISTEnv), "Fashion-MNIST directory (default: $GODIST_FASHION_MNIST, else the installed set, else the shipped subset)")
	flag.IntVar(&c.logEvery, "log-interval", 200, "trainers log their loss every this many batches")
	flag.Parse()
	os.Exit(worker(context.Background(), c, os.Stdout, os.Stderr))
}

// worker is one process of the job: rank 0 the parameter server, the
// others Hogwild-style trainers whose forward passes run on it by RPC.
// The server's result ends as one JSON line on stdout; the exit status is
// 0, or 1 with the error recorded for the launcher.
func worker(ctx context.Context, c config, stdout, stderr io.Writer) int {
	return dist.Main(ctx, "rpc-parameter-server", dist.Options{}, stderr, func(ctx context.Context, g *dist.Group) error {
		return progress.JSONLine[*result](stdout)(run(ctx, g, c, stderr))
	})
}

// paramServer is the tutorial's ParameterServer: the model's parameters
// and the lock between forwards (readers) and optimizer steps (writers).
type paramServer struct {
	mu     sync.RWMutex
	params []*autograd.Var // W1 b1 W2 b2 W3 b3 of the MLP
}

func newParamServer(seed uint64) *paramServer {
	return &paramServer{params: nn.Parameters(models.MLP(tensor.NewTorchRNG(seed)))}
}

// snapshot is the identity whose output is a copy of its input: the
// forward computes with the copy, and the gradient goes to the parameter.
type snapshot struct{}

func (snapshot) Forward(in []*tensor.Tensor) *tensor.Tensor { return in[0].Clone() }
func (snapshot) Backward(g *tensor.Tensor) []*tensor.Tensor { return []*tensor.Tensor{g} }

// forward is the MLP on a batch of images (N×1×28×28): the logits.
func (s *paramServer) forward(x *autograd.Var) *autograd.Var {
	s.mu.RLock()
	ps := make([]*autograd.Var, len(s.params))
	for i, p := range s.params {
		ps[i] = autograd.Apply(snapshot{}, p)
	}
	s.mu.RUnlock()
	h := autograd.Flatten(x, 1, -1)
	for l := 0; l < len(ps); l += 2 {
		h = autograd.Linear(h, ps[l], ps[l+1])
		if l+2 < len(ps) {
			h = autograd.Relu(h)
		}
	}
	return h
}

// accuracy evaluates the model on (x, y) in chunks.
func (s *paramServer) accuracy(x, y *tensor.Tensor) float64 {
	correct := 0
	autograd.NoGrad(func() {
		for i := 0; i < x.Size(0); i += 1000 {
			n := min(1000, x.Size(0)-i)
			pred := tensor.Argmax(s.forward(autograd.Const(x.Narrow(0, i, n))).Value(), 1).Int64s()
			for j, p := range pred {
				if int64(y.At(i+j)) == p {
					correct++
				}
			}
		}
	})
	return float64(correct) / float64(x.Size(0))
}

// servers finds a parameter's server, for the optimizer constructor
// (constructors get only the parameters).
var servers sync.Map // *autograd.Var → *paramServer

// lockedStep is the server's optimizer: its step takes the write lock.
type lockedStep struct {
	optim.Optimizer
	mu *sync.RWMutex
}

func (o lockedStep) Step() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.Optimizer.Step()
}

// funcs are the functions every worker registers.
type funcs struct {
	// getServer returns the server's ParameterServer (called with
	// Remote: the trainers hold RRefs to it).
	getServer rpc.Fn[struct{}, *paramServer]
	// param returns the server's i-th parameter (called with Remote:
	// the distributed optimizer's RRefs).
	param rpc.Fn[int, *autograd.Var]
	// forward runs the model on the server, in the caller's context.
	forward rpc.Method[*paramServer, *distautograd.Var, *distautograd.Var]
}

func register(reg *rpc.Registry, server *paramServer) (*funcs, error) {
	f := &funcs{}
	var errs [4]error
	errs[0] = distoptim.Register(reg)
	noServer := errors.New("the parameter server is rank 0")
	f.getServer, errs[1] = rpc.Register(reg, "get_parameter_server", func(context.Context, struct{}) (*paramServer, error) {
		if server == nil {
			return nil, noServer
		}
		return server, nil
	})
	f.param, errs[2] = rpc.Register(reg, "parameter", func(_ context.Context, i int) (*autograd.Var, error) {
		if server == nil {
			return nil, noServer
		}
		if i < 0 || i >= len(server.params) {
			return nil, fmt.Errorf("no parameter %d (the model has %d)", i, len(server.params))
		}
		return server.params[i], nil
	})
	f.forward, errs[3] = rpc.RegisterMethod(reg, "parameter_server.forward", func(_ context.Context, s *paramServer, x *distautograd.Var) (*distautograd.Var, error) {
		return distautograd.Wrap(s.forward(x.Var)), nil
	})
	return f, errors.Join(errs[:]...)
}

func workerName(rank int) string {
	if rank == 0 {
		return "parameter_server"
	}
	return fmt.Sprintf("trainer%d", rank)
}

// shard is one trainer's data: its sampler over the training set.
type dataset struct {
	xtr, ytr, xte, yte *tensor.Tensor
	which              string
}

func loadData(c config) (*dataset, error) {
	d := &dataset{which: "given"}
	if c.dir == "" {
		var full bool
		c.dir, full = data.FindFashionMNIST()
		d.which = "subset"
		if full {
			d.which = "full"
		}
	}
	var err error
	if d.xtr, d.ytr, err = data.LoadFashionMNIST(c.dir, true); err != nil {
		return nil, err
	}
	if d.xte, d.yte, err = data.LoadFashionMNIST(c.dir, false); err != nil {
		return nil, err
	}
	return d, nil
}

// batchesPerEpoch is how many batches a trainer with n samples runs.
func batchesPerEpoch(n int, c config) int {
	nb := (n + c.batch - 1) / c.batch
	if c.maxBatches > 0 {
		nb = min(nb, c.maxBatches)
	}
	return nb
}

// run is one worker: the server returns the result, trainers nil. Every
// worker shuts its RPC agent down gracefully.
func run(ctx context.Context, g *dist.Group, c config, log io.Writer) (*result, error) {
	if g.Size() < 2 {
		return nil, fmt.Errorf("rpc-parameter-server needs a server and at least one trainer: start it with godist run --nproc-per-node 3 (world size %d)", g.Size())
	}
	d, err := loadData(c)
	if err != nil {
		return nil, err
	}
	var server *paramServer
	if g.Rank() == 0 {
		server = newParamServer(c.seed)
		for _, p := range server.params {
			servers.Store(p, server)
			defer servers.Delete(p)
		}
	}
	lr := c.lr
	distoptim.RegisterConstructor("ps-sgd", func(ps []*autograd.Var) optim.Optimizer {
		s, _ := servers.Load(ps[0])
		return lockedStep{Optimizer: optim.NewSGD(ps, optim.SGDOptions{LR: lr}), mu: &s.(*paramServer).mu}
	})
	reg := rpc.NewRegistry()
	f, err := register(reg, server)
	if err != nil {
		return nil, err
	}
	var res *result
	err = rpc.Run(ctx, workerName(g.Rank()), rpc.Options{Group: g, Functions: reg}, func(ctx context.Context, a *rpc.Agent) (err error) {
		if g.Rank() == 0 {
			res, err = serve(ctx, g, server, d, c, log)
		} else {
			err = train(ctx, g, a, f, d, c, log)
		}
		return err
	})
	return res, err
}

// serve is the server's main goroutine: the agent serves the trainers
// while it waits for them between two barriers, then it evaluates.
func serve(ctx context.Context, g *dist.Group, s *paramServer, d *dataset, c config, log io.Writer) (*result, error) {
	trainers := g.Size() - 1
	before := make([]*tensor.Tensor, len(s.params))
	for i, p := range s.params {
		before[i] = p.Value().Clone()
	}
	fmt.Fprintf(log, "parameter_server: %s Fashion-MNIST (%d train, %d test), MLP, %d trainers, batch %d, SGD lr %g\n",
		d.which, d.xtr.Size(0), d.xte.Size(0), trainers, c.batch, c.lr)
	if err := g.Barrier(ctx); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := g.Barrier(ctx); err != nil { // the trainers are done
		return nil, err
	}
	wall := time.Since(t0)
	samples := 0
	for r := range trainers {
		sm, err := data.NewDistributedSampler(d.xtr.Size(0), trainers, r, true, c.seed, false)
		if err != nil {
			return nil, err
		}
		samples += c.epochs * min(sm.Len(), batchesPerEpoch(sm.Len(), c)*c.batch)
	}
	var num, den float64
	s.mu.RLock()
	for i, p := range s.params {
		num += sq(new(tensor.Tensor).Sub(p.Value(), before[i]))
		den += sq(before[i])
	}
	s.mu.RUnlock()
	res := &result{
		Epochs: c.epochs, Trainers: trainers, Samples: samples, WallS: wall.Seconds(),
		SamplesPerS: float64(samples) / wall.Seconds(), Model: "mlp", Data: d.which,
		ParamChange: math.Sqrt(num / den),
		TestAcc:     s.accuracy(d.xte, d.yte),
	}
	fmt.Fprintf(log, "parameter_server: %d samples in %.2f s (%.0f samples/s), test accuracy %.4f\n",
		samples, res.WallS, res.SamplesPerS, res.TestAcc)
	return res, nil
}

func sq(t *tensor.Tensor) float64 {
	s := 0.0
	for _, v := range t.Values() {
		s += v * v
	}
	return s
}

// train is a trainer (the tutorial's run_training_loop).
func train(ctx context.Context, g *dist.Group, a *rpc.Agent, f *funcs, d *dataset, c config, log io.Writer) error {
	trainers, me := g.Size()-1, g.Rank()-1
	ps, err := f.getServer.Remote(ctx, a, "parameter_server", struct{}{})
	if err != nil {
		return err
	}
	defer ps.Release()
	refs := make([]*rpc.RRef[*autograd.Var], 6)
	for i := range refs {
		if refs[i], err = f.param.Remote(ctx, a, "parameter_server", i); err != nil {
			return err
		}
		defer refs[i].Release()
	}
	opt, err := distoptim.New(ctx, a, "ps-sgd", refs)
	if err != nil {
		return err
	}
	defer opt.Release()
	sampler, err := data.NewDistributedSampler(d.xtr.Size(0), trainers, me, true, c.seed, false)
	if err != nil {
		return err
	}
	ds := data.NewTensorDataset(d.xtr, d.ytr)
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	var batch []*tensor.Tensor
	for ep := range c.epochs {
		sampler.SetEpoch(ep)
		idx := sampler.Indices()
		nb := batchesPerEpoch(len(idx), c)
		for b := range nb {
			batch = ds.BatchInto(batch, idx[b*c.batch:min((b+1)*c.batch, len(idx))])
			loss, err := step(ctx, a, f, ps, opt, batch[0], batch[1])
			if err != nil {
				return fmt.Errorf("epoch %d batch %d: %w", ep+1, b, err)
			}
			if c.logEvery > 0 && (b+1)%c.logEvery == 0 {
				fmt.Fprintf(log, "%s: epoch %d batch %d/%d loss %.4f\n", a.Self().Name, ep+1, b+1, nb, loss)
			}
		}
	}
	return g.Barrier(ctx)
}

// step is one batch: forward through the server in a new context, the
// loss here, backward across both, and the distributed optimizer's step.
func step(ctx context.Context, a *rpc.Agent, f *funcs, ps *rpc.RRef[*paramServer], opt *distoptim.Optimizer, x, y *tensor.Tensor) (float64, error) {
	cctx, id, err := distautograd.NewContext(ctx, a)
	if err != nil {
		return 0, err
	}
	defer distautograd.Release(cctx, id)
	out, err := f.forward.Call(cctx, a, ps, distautograd.Wrap(autograd.Const(x)))
	if err != nil {
		return 0, err
	}
	loss := nn.CrossEntropy(out.Var, y)
	if err := distautograd.Backward(cctx, id, loss); err != nil {
		return 0, err
	}
	if err := opt.Step(cctx, id); err != nil {
		return 0, err
	}
	return loss.Value().Item(), nil
}
