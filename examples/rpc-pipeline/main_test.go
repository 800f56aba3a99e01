package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

// testConfig trains on the shipped subset, without the test set's
// evaluation unless a test asks.
func testConfig(t *testing.T, steps, microBatches int) config {
	t.Helper()
	dir, err := data.SubsetDir()
	if err != nil {
		t.Fatal(err)
	}
	return config{epochs: 1, maxSteps: steps, batch: 32, microBatches: microBatches, lr: 0.05, seed: 3,
		dir: dir, logEvery: 1, keepParams: true, noEval: true}
}

// spawn runs the master and the two workers as goroutines over the
// in-process transport and returns the master's result and log.
func spawn(t *testing.T, c config) (*result, string) {
	t.Helper()
	var (
		mu  sync.Mutex
		res *result
		log bytes.Buffer
	)
	disttest.SpawnWith(t, 3, disttest.Options{Timeout: 50 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
		var buf bytes.Buffer
		r, err := run(context.Background(), g, c, &buf)
		mu.Lock()
		defer mu.Unlock()
		log.Write(buf.Bytes())
		if g.Rank() == 0 {
			res = r
		} else if r != nil {
			t.Errorf("worker %d returned a result", g.Rank())
		}
		return err
	})
	if res == nil {
		t.Fatalf("no result from the master; log:\n%s", log.String())
	}
	return res, log.String()
}

// trainLocal trains both shards in one process with local autograd and
// optim.SGD on the same batches. With split, each batch goes through the
// model in the same micro-batches as the pipeline's, whose logits are
// concatenated before the loss (microBatches and lossOf, the code the
// master runs); without, the whole batch goes through at once. It
// returns the losses and the final parameters, shard 1's first.
func trainLocal(t *testing.T, c config, split bool) ([]float64, []*tensor.Tensor) {
	t.Helper()
	d, err := loadData(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := newShard(shard1, c.seed)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := newShard(shard2, c.seed)
	if err != nil {
		t.Fatal(err)
	}
	params := append(nn.Parameters(s1.seq), nn.Parameters(s2.seq)...)
	opt := optim.NewSGD(params, optim.SGDOptions{LR: c.lr})
	sampler, err := data.NewDistributedSampler(d.xtr.Size(0), 1, 0, true, c.seed, false)
	if err != nil {
		t.Fatal(err)
	}
	ds := data.NewTensorDataset(d.xtr, d.ytr)
	var losses []float64
	for ep := range c.epochs {
		sampler.SetEpoch(ep)
		idx := sampler.Indices()
		for b := range stepsPerEpoch(len(idx), c) {
			batch := ds.Batch(idx[b*c.batch : min((b+1)*c.batch, len(idx))])
			opt.ZeroGrad(true)
			parts := []*tensor.Tensor{batch[0]}
			if split {
				parts = microBatches(batch[0], c.microBatches)
			}
			var outs []*autograd.Var
			for _, xb := range parts {
				outs = append(outs, s2.forward(s1.forward(autograd.Const(xb))))
			}
			loss := lossOf(outs, batch[1])
			if err := loss.Backward(nil); err != nil {
				t.Fatal(err)
			}
			opt.Step()
			losses = append(losses, loss.Value().Item())
		}
	}
	final := make([]*tensor.Tensor, len(params))
	for i, p := range params {
		final[i] = p.Value()
	}
	return losses, final
}

// compare reports the largest difference between the pipeline's losses
// and parameters and the local ones, and whether all are equal bit for
// bit.
func compare(t *testing.T, res *result, want []float64, wantParams []*tensor.Tensor) (maxLoss, maxParam float64, equal bool) {
	t.Helper()
	if len(res.losses) != len(want) || len(res.params) != len(wantParams) || len(wantParams) != 8 {
		t.Fatalf("%d losses and %d parameters from the pipeline, %d and %d in one process (want 8 parameters)",
			len(res.losses), len(res.params), len(want), len(wantParams))
	}
	equal = true
	for i, l := range res.losses {
		maxLoss = max(maxLoss, math.Abs(l-want[i]))
		equal = equal && l == want[i]
	}
	for i, p := range res.params {
		if !tensor.Equal(p, wantParams[i]) {
			equal = false
		}
		a, b := p.Values(), wantParams[i].Values()
		for j := range a {
			maxParam = max(maxParam, math.Abs(a[j]-b[j]))
		}
	}
	return maxLoss, maxParam, equal
}

// TestMatchesLocal: the pipeline's training equals local training of the
// same model on the same batches bit for bit (every loss, and every
// parameter after the last step), when no parameter gathers more than two
// gradient contributions in a step (distributed autograd's documented
// condition): with one micro-batch against local training on the whole
// batch, and with two against local training on the same two
// micro-batches, whose outputs are concatenated before the loss. (Two
// micro-batches against local training on the whole batch are not equal:
// a parameter's gradient is then a sum of two per-micro-batch gradients,
// not one product over the batch.)
func TestMatchesLocal(t *testing.T) {
	for _, tc := range []struct {
		name         string
		microBatches int
		split        bool
	}{{"1 micro-batch, whole batch", 1, false}, {"2 micro-batches, split alike", 2, true}} {
		t.Run(tc.name, func(t *testing.T) {
			const steps = 6
			c := testConfig(t, steps, tc.microBatches)
			res, log := spawn(t, c)
			want, wantParams := trainLocal(t, c, tc.split)
			if n := strings.Count(log, "\tloss "); n != steps {
				t.Errorf("%d loss lines, want %d:\n%s", n, steps, log)
			}
			maxLoss, maxParam, equal := compare(t, res, want, wantParams)
			if !equal {
				t.Errorf("not bit for bit: losses differ by up to %g, parameters by up to %g\npipeline: %.9g\nlocal:    %.9g",
					maxLoss, maxParam, res.losses, want)
			}
			if !(want[steps-1] < want[0]) {
				t.Errorf("the loss did not fall in %d steps: %v", steps, want)
			}
			if res.Steps != steps || res.Samples != steps*c.batch || res.LossFirst != res.losses[0] || res.LossLast != res.losses[steps-1] {
				t.Errorf("result %+v for losses %v", res, res.losses)
			}
		})
	}
}

// TestFourMicroBatches: with four micro-batches, a parameter gathers
// four contributions a step, which distributed autograd may add in
// another order than local backward (they arrive as the workers finish
// them); the training is the local one on the same split up to rounding.
func TestFourMicroBatches(t *testing.T) {
	const steps = 6
	c := testConfig(t, steps, 4)
	res, _ := spawn(t, c)
	want, wantParams := trainLocal(t, c, true)
	maxLoss, maxParam, equal := compare(t, res, want, wantParams)
	t.Logf("4 micro-batches, %d steps: bit for bit %v; losses differ by up to %g, parameters by up to %g", steps, equal, maxLoss, maxParam)
	if maxLoss > 1e-5 || maxParam > 1e-5 {
		t.Errorf("losses differ by up to %g, parameters by up to %g: more than rounding", maxLoss, maxParam)
	}
}

// TestAccuracy trains three epochs of the shipped subset (3,000 images,
// 47 steps of 64 an epoch) through the pipeline and evaluates: the test
// accuracy beats chance by far, and the result marshals as the JSON line
// the command prints.
func TestAccuracy(t *testing.T) {
	c := testConfig(t, 0, 4)
	c.epochs, c.batch, c.noEval, c.keepParams, c.logEvery = 3, 64, false, false, 47
	res, log := spawn(t, c)
	line, _ := json.Marshal(res)
	t.Logf("%s", line)
	if res.TestAcc < 0.5 || res.SamplesPerS <= 0 || res.Samples != 3*3000 || res.Steps != 3*47 || res.Data != "given" {
		t.Errorf("result %s\n%s", line, log)
	}
	var back map[string]any
	if err := json.Unmarshal(line, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"samples_per_s", "test_accuracy", "micro_batches", "batch", "steps", "wall_s"} {
		if _, ok := back[k]; !ok {
			t.Errorf("the JSON line has no %q: %s", k, line)
		}
	}
}

func TestWorldSize(t *testing.T) {
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		_, err := run(context.Background(), g, config{epochs: 1, batch: 8, microBatches: 2, lr: 0.1}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--nproc-per-node 3") {
			t.Errorf("world size 2: %v", err)
		}
		return nil
	})
}

func TestMicroBatches(t *testing.T) {
	x := tensor.Zeros(10, 3)
	var sizes []int
	for _, p := range microBatches(x, 4) {
		sizes = append(sizes, p.Size(0))
	}
	if want := []int{3, 3, 3, 1}; !equalInts(sizes, want) {
		t.Errorf("10 rows in 4: %v, want %v (torch's split(3))", sizes, want)
	}
	if n := len(microBatches(x, 1)); n != 1 {
		t.Errorf("10 rows in 1: %d parts", n)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

const workerEnv = "GODIST_RPC_PIPELINE_TEST_WORKER"

// TestProcesses runs the three workers as processes over env://, as godist
// run starts them: the master's last line is the JSON result.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ps := disttest.StartProcs(t, 3, "TestProcessWorker", "rpc-pipeline", workerEnv+"=1")
	errs := disttest.WaitProcs(t, ps, 40*time.Second)
	for r, p := range ps {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v\nstdout:\n%s\nstderr:\n%s", r, errs[r], p.Stdout.String(), p.Stderr.String())
		}
	}
	// The test binary's own "PASS" follows the example's output.
	out := strings.TrimSuffix(strings.TrimSpace(ps[0].Stdout.String()), "PASS")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var res result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("last line of the master: %v\n%s", err, ps[0].Stdout.String())
	}
	if res.Steps != 20 || res.MicroBatches != 4 || !(res.LossLast < res.LossFirst) || res.SamplesPerS <= 0 || res.TestAcc < 0.2 {
		t.Errorf("result %+v", res)
	}
	if n := strings.Count(ps[0].Stderr.String(), "\tloss "); n != 20 {
		t.Errorf("%d loss lines on the master's stderr:\n%s", n, ps[0].Stderr.String())
	}
}

// TestProcessWorker is one rank of TestProcesses.
func TestProcessWorker(t *testing.T) {
	if os.Getenv(workerEnv) == "" {
		t.Skip("a rank of TestProcesses")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
	defer cancel()
	c := testConfig(t, 20, 4)
	c.keepParams, c.noEval = false, false
	if code := worker(ctx, c, os.Stdout, os.Stderr); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}
