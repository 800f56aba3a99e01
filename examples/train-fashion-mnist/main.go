// Command train-fashion-mnist trains the MLP or LeNet on Fashion-MNIST in
// one process, with the settings of shared/anchors/train_ddp.py (batch 64,
// SGD lr 0.01 momentum 0.9, inputs normalised with mean 0.2860 and std
// 0.3530), so its accuracy and speed compare with PyTorch's: with the same
// seed the initial weights and the order of the examples are exactly
// PyTorch's (tensor.NewTorchRNG).
//
//	go run ./examples/train-fashion-mnist --model mlp --epochs 1
//
// It uses the full dataset from /usr/share/datasets/fashion-mnist when
// installed (Debian package dataset-fashion-mnist), else the real subset
// shipped in testdata/fashion-mnist, and says which. While it runs it shows
// a progress bar (plain periodic lines when stderr is not a terminal); the
// last line of stdout is one JSON object for scripts.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/data"
	"github.com/godist/godist/examples/progress"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

type result struct {
	Model       string  `json:"model"`
	Epochs      int     `json:"epochs"`
	TestAcc     float64 `json:"test_acc"`
	SamplesPerS float64 `json:"samples_per_s"`
	MsPerStep   float64 `json:"ms_per_step"`
	Data        string  `json:"data"`
	TrainN      int     `json:"train_examples"`
	BLAS        string  `json:"blas"`
	LastLoss    float64 `json:"last_loss"`
}

func main() {
	model := flag.String("model", "mlp", "model: mlp or lenet")
	epochs := flag.Int("epochs", 1, "epochs to train")
	batch := flag.Int("batch", 64, "batch size")
	lr := flag.Float64("lr", 0.01, "SGD learning rate")
	momentum := flag.Float64("momentum", 0.9, "SGD momentum")
	seed := flag.Uint64("seed", 0, "seed for initialisation and shuffling (torch.manual_seed and DistributedSampler's seed)")
	dir := flag.String("data", os.Getenv(data.FashionMNISTEnv), "Fashion-MNIST directory (default: $GODIST_FASHION_MNIST, else the installed set, else the shipped subset)")
	flag.Parse()
	if err := run(*model, *epochs, *batch, *lr, *momentum, *seed, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "train-fashion-mnist:", err)
		os.Exit(1)
	}
}

func run(model string, epochs, batch int, lr, momentum float64, seed uint64, dir string) error {
	which := "given"
	if dir == "" {
		var full bool
		dir, full = data.FindFashionMNIST()
		which = "subset"
		if full {
			which = "full"
		}
	}
	xtr, ytr, err := data.LoadFashionMNIST(dir, true)
	if err != nil {
		return err
	}
	xte, yte, err := data.LoadFashionMNIST(dir, false)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "data: %s Fashion-MNIST from %s (%d train, %d test)\n", which, dir, xtr.Size(0), xte.Size(0))

	// PyTorch's generator: the initial weights are those of
	// torch.manual_seed(seed) and the order that of DistributedSampler(seed),
	// as in shared/anchors/train_ddp.py.
	rng := tensor.NewTorchRNG(seed)
	net, err := models.New(model, rng)
	if err != nil {
		return err
	}
	opt := optim.NewSGD(nn.Parameters(net), optim.SGDOptions{LR: lr, Momentum: momentum})
	loader := data.NewLoader(data.NewTensorDataset(xtr, ytr), data.LoaderOptions{BatchSize: batch, Shuffle: true, Seed: seed})
	res := result{Model: model, Epochs: epochs, Data: which, TrainN: xtr.Size(0), BLAS: tensor.BLAS()}
	var trainTime time.Duration
	steps := 0
	for ep := range epochs {
		loader.SetEpoch(ep)
		nn.Train(net)
		bar := progress.New(os.Stderr, fmt.Sprintf("epoch %d/%d", ep+1, epochs), loader.Len(), 1)
		start := time.Now()
		for b := range loader.Batches() {
			opt.ZeroGrad(true)
			loss := nn.CrossEntropy(nn.Call(net, autograd.Const(b[0])), b[1])
			loss.Backward(nil)
			opt.Step()
			steps++
			res.LastLoss = loss.Value().Item()
			bar.Step(res.LastLoss, b[0].Size(0))
		}
		dt := time.Since(start)
		trainTime += dt
		bar.Done()
		res.TestAcc = progress.Accuracy(net, xte, yte)
		fmt.Fprintf(os.Stderr, "epoch %d: %.2f s, %.0f samples/s, loss %.4f, test accuracy %.4f\n",
			ep+1, dt.Seconds(), float64(xtr.Size(0))/dt.Seconds(), res.LastLoss, res.TestAcc)
	}
	res.SamplesPerS = float64(xtr.Size(0)*epochs) / trainTime.Seconds()
	res.MsPerStep = trainTime.Seconds() * 1e3 / float64(steps)
	line, _ := json.Marshal(res)
	fmt.Println(string(line))
	return nil
}
