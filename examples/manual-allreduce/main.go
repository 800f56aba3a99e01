// Command manual-allreduce is data-parallel training written out by hand,
// without DDP: the "manual pattern" of PyTorch's distributed tutorial. Rank
// 0 sends its initial weights to every other rank with point-to-point
// Send/Recv; after each backward pass every parameter's gradient is summed
// with AllReduce and divided by the world size; then every rank takes the
// same optimizer step, so the replicas stay equal. It trains the MLP of
// models on Fashion-MNIST (the full set when installed, else the
// shipped subset), each rank on its own shard from a DistributedSampler.
//
//	go build ./examples/manual-allreduce
//	godist run --standalone --nproc-per-node 2 ./manual-allreduce --steps 200
//
// It joins its group with dist.Init's env:// defaults, so it runs under any
// launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
// (godist run, torchrun, Slurm, mpirun). Rank 0 prints the loss every
// --log-every steps and ends with one JSON line.
//
// DDP does the same arithmetic, overlapped with backward and in buckets;
// main_test.go checks that the gradients agree.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

// config is what the flags set.
type config struct {
	Steps, Batch int
	LR, Momentum float64
	Seed         uint64
	// Dir is the Fashion-MNIST directory; "" finds it (data.FindFashionMNIST).
	Dir      string
	LogEvery int
	// Log receives rank 0's progress lines (nil: none).
	Log io.Writer
}

// result is rank 0's final JSON line.
type result struct {
	Example     string    `json:"example"`
	Model       string    `json:"model"`
	World       int       `json:"world"`
	Steps       int       `json:"steps"`
	Batch       int       `json:"batch"`
	Data        string    `json:"data"`
	FirstLoss   float64   `json:"first_loss"`
	LastLoss    float64   `json:"last_loss"`
	SamplesPerS float64   `json:"samples_per_s"`
	MsPerStep   float64   `json:"ms_per_step"`
	Losses      []float64 `json:"-"` // this rank's loss at every step
}

func main() {
	var cfg config
	flag.IntVar(&cfg.Steps, "steps", 200, "optimizer steps to train")
	flag.IntVar(&cfg.Batch, "batch", 64, "batch size per rank")
	flag.Float64Var(&cfg.LR, "lr", 0.01, "SGD learning rate")
	flag.Float64Var(&cfg.Momentum, "momentum", 0.9, "SGD momentum")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "seed of rank 0's initial weights and of the sampler's shuffle")
	flag.StringVar(&cfg.Dir, "data", os.Getenv(data.FashionMNISTEnv), "Fashion-MNIST directory (default: $GODIST_FASHION_MNIST, else the installed set, else the shipped subset)")
	flag.IntVar(&cfg.LogEvery, "log-every", 20, "print rank 0's loss every `n` steps")
	flag.Parse()
	if err := run(cfg); err != nil {
		dist.RecordError(err) // for godist run's root-cause report
		fmt.Fprintln(os.Stderr, "manual-allreduce:", err)
		os.Exit(1)
	}
}

func run(cfg config) error {
	ctx := context.Background()
	g, err := dist.Init(ctx, dist.Options{})
	if err != nil {
		return err
	}
	defer g.Destroy()
	if g.Rank() == 0 {
		cfg.Log = os.Stderr
	}
	// Each rank draws its own weights; only rank 0's survive syncParams.
	net := models.MLP(tensor.NewTorchRNG(cfg.Seed + uint64(g.Rank())))
	res, err := train(ctx, g, net, cfg)
	if err != nil {
		return fmt.Errorf("rank %d: %w", g.Rank(), err)
	}
	if g.Rank() == 0 {
		line, _ := json.Marshal(res)
		fmt.Println(string(line))
	}
	return nil
}

// train runs the manual pattern on g: syncParams, then cfg.Steps steps of
// forward, backward, averageGradients and an SGD step, over this rank's
// shard of the training set (DistributedSampler with the seed, shuffled,
// a new order each epoch). Every member of g must call it with the same
// architecture and cfg; it returns this rank's losses and timings.
func train(ctx context.Context, g *dist.Group, net nn.Layer, cfg config) (result, error) {
	res := result{Example: "manual-allreduce", Model: "mlp", World: g.Size(), Steps: cfg.Steps, Batch: cfg.Batch}
	loader, which, err := newLoader(g, cfg)
	if err != nil {
		return res, err
	}
	res.Data = which
	if err := syncParams(ctx, g, net); err != nil {
		return res, err
	}
	params := nn.Parameters(net)
	opt := optim.NewSGD(params, optim.SGDOptions{LR: cfg.LR, Momentum: cfg.Momentum})
	start := time.Now()
	for epoch := 0; len(res.Losses) < cfg.Steps; epoch++ {
		loader.SetEpoch(epoch)
		for b := range loader.Batches() {
			if len(res.Losses) == cfg.Steps {
				break
			}
			opt.ZeroGrad(true)
			loss := nn.CrossEntropy(nn.Call(net, autograd.Const(b[0])), b[1])
			loss.Backward(nil)
			if err := averageGradients(ctx, g, params); err != nil {
				return res, fmt.Errorf("step %d: %w", len(res.Losses), err)
			}
			opt.Step()
			res.Losses = append(res.Losses, loss.Value().Item())
			step := len(res.Losses)
			if cfg.Log != nil && cfg.LogEvery > 0 && (step%cfg.LogEvery == 0 || step == 1 || step == cfg.Steps) {
				fmt.Fprintf(cfg.Log, "step %d/%d loss %.4f\n", step, cfg.Steps, res.Losses[step-1])
			}
		}
	}
	dt := time.Since(start)
	if n := len(res.Losses); n > 0 {
		res.FirstLoss, res.LastLoss = res.Losses[0], res.Losses[n-1]
		res.SamplesPerS = float64(n*cfg.Batch*g.Size()) / dt.Seconds()
		res.MsPerStep = dt.Seconds() * 1e3 / float64(n)
	}
	return res, nil
}

// newLoader returns this rank's loader over the Fashion-MNIST training set
// and says which set it is ("full", "subset" or "given").
func newLoader(g *dist.Group, cfg config) (*data.Loader, string, error) {
	dir, which := cfg.Dir, "given"
	if dir == "" {
		var full bool
		dir, full = data.FindFashionMNIST()
		which = "subset"
		if full {
			which = "full"
		}
		if dir == "" {
			return nil, "", fmt.Errorf("no Fashion-MNIST found (install dataset-fashion-mnist, or run inside the repository for the shipped subset)")
		}
	}
	x, y, err := data.LoadFashionMNIST(dir, true)
	if err != nil {
		return nil, "", err
	}
	sampler, err := data.NewDistributedSampler(x.Size(0), g.Size(), g.Rank(), true, cfg.Seed, false)
	if err != nil {
		return nil, "", err
	}
	return data.NewLoader(data.NewTensorDataset(x, y), data.LoaderOptions{BatchSize: cfg.Batch, Sampler: sampler}), which, nil
}

// syncParams makes every rank's parameters rank 0's with point-to-point
// messages: rank 0 sends each parameter, in registration order and tagged
// with its index, to every other rank, which receives it in place. (A
// Broadcast does this in one collective; the tutorial's pattern spells it
// out.)
func syncParams(ctx context.Context, g *dist.Group, net nn.Module) error {
	params := nn.NamedParameters(net)
	if g.Rank() == 0 {
		for dst := 1; dst < g.Size(); dst++ {
			for i, p := range params {
				if err := g.Send(ctx, p.Value.Value(), dst, i); err != nil {
					return fmt.Errorf("send parameter %s to rank %d: %w", p.Name, dst, err)
				}
			}
		}
		return nil
	}
	for i, p := range params {
		if _, err := g.Recv(ctx, p.Value.Value(), 0, i); err != nil {
			return fmt.Errorf("receive parameter %s from rank 0: %w", p.Name, err)
		}
	}
	return nil
}

// averageGradients replaces every parameter's gradient by its average over
// the group: an AllReduce (sum) per parameter, in the same order on every
// rank, then a division by the world size. A parameter without a gradient
// contributes zeros, so that every rank issues the same collectives.
func averageGradients(ctx context.Context, g *dist.Group, params []*autograd.Var) error {
	for i, p := range params {
		grad := p.Grad()
		if grad == nil {
			grad = tensor.New(p.DType(), p.Shape()...)
			p.SetGrad(grad)
		}
		if err := g.AllReduce(ctx, grad, dist.Sum); err != nil {
			return fmt.Errorf("all-reduce the gradient of parameter %d: %w", i, err)
		}
		grad.Scale(1 / float64(g.Size()))
	}
	return nil
}
