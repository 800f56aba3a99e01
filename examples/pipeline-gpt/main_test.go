package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
)

func small(pp int, sched string) config {
	return config{PP: pp, Inner: "dp", Schedule: sched, Micro: 4, Chunks: 2, Layers: 2, Heads: 2, Dim: 32, Block: 32, Batch: 16,
		Steps: 12, Warmup: 3, LR: 3e-3, MinLR: 3e-4, Clip: 0.5, EvalEvery: 6, EvalBatches: 2, Seed: 3,
		data: filepath.Join("..", "..", "testdata", "gosrc"), log: 4}
}

// spawn runs 4 ranks of the example as goroutines and returns rank 0's
// result and log.
func spawn(t *testing.T, c config) (*result, string) {
	t.Helper()
	var (
		mu  sync.Mutex
		res *result
		log bytes.Buffer
	)
	disttest.SpawnWith(t, 4, disttest.Options{Timeout: 60 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
		var buf bytes.Buffer
		r, err := run(context.Background(), g, c, &buf)
		mu.Lock()
		defer mu.Unlock()
		if g.Rank() == 0 {
			res = r
			log.Write(buf.Bytes())
		} else if r != nil || buf.Len() > 0 {
			t.Errorf("rank %d returned %+v and wrote %q", g.Rank(), r, buf.String())
		}
		return err
	})
	if res == nil {
		t.Fatalf("no result from rank 0; log:\n%s", log.String())
	}
	return res, log.String()
}

// TestMeshesFollowOneCurve: 4 ranks as 4 data-parallel replicas, as
// 2 stages × 2 replicas (GPipe, 1F1B, ZB-H1, interleaved with 2 stages per
// rank, and 1F1B with a pipeline's ranks adjacent instead of a replica
// group's) and as one 4-stage pipeline train the same GPT on the same
// batches, and every step's loss and the validation loss agree within
// 1e-5 of data parallelism's. The loss falls, and the result is one JSON
// object with a predicted step time.
func TestMeshesFollowOneCurve(t *testing.T) {
	want, log := spawn(t, small(1, "1f1b"))
	t.Logf("pp 1 × dp 4:\n%s", log)
	if !(want.Losses[len(want.Losses)-1] < want.Losses[0]-0.3) || want.DP != 4 || want.Stages != 1 {
		t.Fatalf("data parallelism alone: %+v", want)
	}
	ppInner := small(2, "1f1b")
	ppInner.Inner = "pp"
	for _, c := range []config{small(2, "gpipe"), small(2, "1f1b"), small(2, "zbh1"), small(2, "interleaved1f1b"), small(4, "1f1b"), ppInner} {
		t.Run(c.Schedule+"/pp"+string(rune('0'+c.PP))+"/inner-"+c.Inner, func(t *testing.T) {
			got, log := spawn(t, c)
			if got.DP != 4/c.PP || !strings.Contains(log, "validation loss") {
				t.Fatalf("%+v\n%s", got, log)
			}
			if !(got.PredMsPerStep > 0) || !strings.Contains(log, "predicted") {
				t.Errorf("no predicted step time: %v\n%s", got.PredMsPerStep, log)
			}
			for i := range want.Losses {
				if d := math.Abs(got.Losses[i] - want.Losses[i]); d > 1e-5*want.Losses[i] {
					t.Fatalf("step %d: loss %.7f, data parallelism %.7f\n%s", i+1, got.Losses[i], want.Losses[i], log)
				}
			}
			if d := math.Abs(got.ValLoss - want.ValLoss); d > 1e-5*want.ValLoss {
				t.Fatalf("validation loss %.7f, data parallelism %.7f", got.ValLoss, want.ValLoss)
			}
			b, err := json.Marshal(got)
			if err != nil || !strings.Contains(string(b), `"schedule":"`+c.Schedule+`"`) {
				t.Fatalf("JSON %s: %v", b, err)
			}
		})
	}
}

func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		mod  func(*config)
		want string
	}{
		{func(c *config) { c.PP = 3 }, "divisor of the world size 4"},
		{func(c *config) { c.Micro = 3 }, "divisible into 2 replicas' micro-batches"},
		{func(c *config) { c.PP, c.Layers, c.Schedule = 4, 1, "1f1b" }, "4 stages for 3 layers"},
		{func(c *config) { c.Schedule = "pipedream" }, "pipedream"},
		{func(c *config) { c.Inner = "tp" }, `--inner "tp"`},
	} {
		cfg := small(2, "1f1b")
		c.mod(&cfg)
		errs := make([]error, 4)
		disttest.SpawnWith(t, 4, disttest.Options{Timeout: 20 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
			_, errs[g.Rank()] = run(context.Background(), g, cfg, &bytes.Buffer{})
			return nil
		})
		if errs[0] == nil || !strings.Contains(errs[0].Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", cfg, errs[0], c.want)
		}
	}
}
