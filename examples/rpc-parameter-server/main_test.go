package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
)

// TestFewBatches runs a server and two trainers as goroutines for 40
// batches each: the server's parameters move, the accuracy beats chance
// by far, and the result marshals as the JSON line the command prints.
// It reads the shipped subset, not the full set a machine may have: three
// ranks loading and the server evaluating 60,000 + 10,000 images under the
// race detector took 24 s of its 50 on a quiet machine, more than 50 on
// a busy one.
func TestFewBatches(t *testing.T) {
	dir, err := data.SubsetDir()
	if err != nil {
		t.Fatal(err)
	}
	c := config{dir: dir, epochs: 1, batch: 32, lr: 0.03, seed: 0, maxBatches: 40, logEvery: 20}
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
			t.Errorf("trainer %d returned a result", g.Rank())
		}
		return err
	})
	t.Logf("%+v\n%s", res, log.String())
	if res == nil {
		t.Fatal("no result from the server")
	}
	if res.Trainers != 2 || res.Epochs != 1 || res.Samples != 2*40*32 || res.SamplesPerS <= 0 || res.WallS <= 0 {
		t.Errorf("result %+v", res)
	}
	if res.ParamChange <= 0.01 {
		t.Errorf("the server's parameters moved by %v (relative)", res.ParamChange)
	}
	if res.TestAcc < 0.4 {
		t.Errorf("test accuracy %v after 80 batches (chance is 0.1)", res.TestAcc)
	}
	if n := strings.Count(log.String(), "batch 40/"); n != 2 {
		t.Errorf("%d trainers logged their 40th batch:\n%s", n, log.String())
	}
	line, _ := json.Marshal(res)
	var back map[string]any
	if err := json.Unmarshal(line, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"epochs", "test_accuracy", "samples_per_s", "trainers", "wall_s"} {
		if _, ok := back[k]; !ok {
			t.Errorf("the JSON line has no %q: %s", k, line)
		}
	}
}

func TestOneWorker(t *testing.T) {
	disttest.Spawn(t, 1, func(g *dist.Group) error {
		if _, err := run(context.Background(), g, config{epochs: 1, batch: 32}, &bytes.Buffer{}); err == nil ||
			!strings.Contains(err.Error(), "--nproc-per-node 3") {
			t.Errorf("world size 1: %v", err)
		}
		return nil
	})
}
