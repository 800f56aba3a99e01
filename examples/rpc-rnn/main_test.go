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
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

const gosrc = "../../testdata/gosrc"

func testConfig(steps int) config {
	return config{steps: steps, seed: 3, lr: 1, data: gosrc, batch: 8, block: 32,
		sizes: sizes{Emb: 32, Hidden: 64, Layers: 1, Dropout: 0.1}}
}

// spawn runs the parameter server and the trainer as goroutines over the
// in-process transport and returns the trainer's result and log.
func spawn(t *testing.T, c config) (*result, string) {
	t.Helper()
	var (
		mu  sync.Mutex
		res *result
		log bytes.Buffer
	)
	disttest.SpawnWith(t, 2, disttest.Options{Timeout: 50 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
		var buf bytes.Buffer
		r, err := run(context.Background(), g, c, &buf)
		mu.Lock()
		defer mu.Unlock()
		if g.Rank() == 1 {
			res = r
			log.Write(buf.Bytes())
		}
		return err
	})
	if res == nil {
		t.Fatalf("no result from the trainer; log:\n%s", log.String())
	}
	return res, log.String()
}

// trainLocal trains the same model in one process with local autograd and
// optim.SGD on the same batches: the parts built from the same seeds, the
// same code (model.loss) run with plain calls instead of RPCs. It returns
// the losses and the final parameters in parameterRRefs' order.
func trainLocal(t *testing.T, c config) ([]float64, []*tensor.Tensor) {
	t.Helper()
	w, err := windows(c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	table, dec := newEmbeddingTable(c.seed, c.sizes), newDecoder(c.seed, c.sizes)
	m := &model{
		embed:  func(_ context.Context, x *tensor.Tensor) (*autograd.Var, error) { return table.forward(x), nil },
		rnn:    newRNN(c.seed, c.sizes),
		decode: func(_ context.Context, h *autograd.Var) (*autograd.Var, error) { return dec.forward(h), nil },
	}
	params := append(append(nn.Parameters(table), nn.Parameters(m.rnn)...), nn.Parameters(dec)...)
	opt := optim.NewSGD(params, optim.SGDOptions{LR: c.lr})
	var losses []float64
	for step := range c.steps {
		x, y := w.Batch(step)
		opt.ZeroGrad(true)
		loss, err := m.loss(context.Background(), x, y)
		if err != nil {
			t.Fatal(err)
		}
		if err := loss.Backward(nil); err != nil {
			t.Fatal(err)
		}
		opt.Step()
		losses = append(losses, loss.Value().Item())
	}
	final := make([]*tensor.Tensor, len(params))
	for i, p := range params {
		final[i] = p.Value()
	}
	return losses, final
}

// TestMatchesOneProcess is issue 15's "what it must show" 2: the RNN
// trained across the parameter server and the trainer gives, step for
// step, the losses of the same model trained in one process with local
// autograd and the same SGD, bit for bit, and ends with the same
// parameters, bit for bit; with dropout on both workers and with a
// two-layer LSTM (on smaller batches, to keep the race build quick).
func TestMatchesOneProcess(t *testing.T) {
	for _, tc := range []struct {
		name         string
		layers       int
		dropout      float64
		batch, block int
	}{{"1 layer, dropout", 1, 0.1, 8, 32}, {"2 layers", 2, 0, 4, 16}} {
		t.Run(tc.name, func(t *testing.T) {
			const steps = 20
			c := testConfig(steps)
			c.sizes.Layers, c.sizes.Dropout = tc.layers, tc.dropout
			c.batch, c.block = tc.batch, tc.block
			c.keepParams = true
			res, log := spawn(t, c)
			want, wantParams := trainLocal(t, c)
			if len(res.losses) != steps || strings.Count(log, "\tloss ") != steps {
				t.Fatalf("%d losses, %d progress lines; want %d:\n%s", len(res.losses), strings.Count(log, "\tloss "), steps, log)
			}
			var maxDiff float64
			for i, l := range res.losses {
				d := math.Abs(l - want[i])
				maxDiff = max(maxDiff, d)
				if l != want[i] {
					t.Errorf("step %d: loss %.9g across 2 workers, %.9g in one process (differ by %.3g)", i+1, l, want[i], d)
				}
			}
			t.Logf("losses, step 1..%d, across 2 workers: %.7g; in one process: %.7g; largest difference %g", steps, res.losses, want, maxDiff)
			if !(want[steps-1] < want[0]) {
				t.Errorf("the loss did not fall in %d steps: %v", steps, want)
			}
			if res.LossFirst != res.losses[0] || res.LossLast != res.losses[steps-1] || res.Steps != steps {
				t.Errorf("result %+v for losses %v", res, res.losses)
			}
			if len(res.params) != len(wantParams) || len(wantParams) != 3+4*tc.layers {
				t.Fatalf("%d parameters across 2 workers, %d in one process", len(res.params), len(wantParams))
			}
			for i, p := range res.params {
				if !tensor.Equal(p, wantParams[i]) {
					t.Errorf("parameter %d (shape %v) differs after %d steps", i, p.Shape(), steps)
				}
			}
		})
	}
}

func TestWorldSize(t *testing.T) {
	disttest.Spawn(t, 3, func(g *dist.Group) error {
		_, err := run(context.Background(), g, testConfig(1), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--nproc-per-node 2") {
			t.Errorf("world size 3: %v", err)
		}
		return nil
	})
}

const workerEnv = "GODIST_RPC_RNN_TEST_WORKER"

// TestProcesses runs the two workers as processes over env://, as godist
// run starts them: the trainer's last line is the JSON result.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ps := disttest.StartProcs(t, 2, "TestProcessWorker", "rpc-rnn", workerEnv+"=1")
	errs := disttest.WaitProcs(t, ps, 40*time.Second)
	for r, p := range ps {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v\nstdout:\n%s\nstderr:\n%s", r, errs[r], p.Stdout.String(), p.Stderr.String())
		}
	}
	// The test binary's own "PASS" follows the example's output.
	out := strings.TrimSuffix(strings.TrimSpace(ps[1].Stdout.String()), "PASS")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var res result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("last line of the trainer: %v\n%s", err, ps[1].Stdout.String())
	}
	if res.Steps != 5 || !(res.LossLast < res.LossFirst) || res.LossFirst > 6 || res.WallS <= 0 || res.TokensPerS <= 0 {
		t.Errorf("result %+v", res)
	}
	if n := strings.Count(ps[1].Stderr.String(), "\tloss "); n != 5 {
		t.Errorf("%d loss lines on the trainer's stderr:\n%s", n, ps[1].Stderr.String())
	}
}

// TestProcessWorker is one rank of TestProcesses.
func TestProcessWorker(t *testing.T) {
	if os.Getenv(workerEnv) == "" {
		t.Skip("a rank of TestProcesses")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
	defer cancel()
	if code := worker(ctx, testConfig(5), os.Stdout, os.Stderr); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}
