package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/rpc"
)

func TestBatcher(t *testing.T) {
	b := newBatcher(3)
	futs := []*rpc.Future[int]{rpc.NewFuture[int](), rpc.NewFuture[int](), rpc.NewFuture[int](), rpc.NewFuture[int]()}
	// Requests arrive in any order; the batch comes out by observer.
	if full, err := b.add(3, []float64{3}, futs[0]); full != nil || err != nil {
		t.Fatalf("first of 3: %v %v", full, err)
	}
	if full, err := b.add(1, []float64{1}, futs[1]); full != nil || err != nil {
		t.Fatalf("second of 3: %v %v", full, err)
	}
	if _, err := b.add(3, []float64{3}, futs[3]); err == nil {
		t.Error("observer 3 asked twice in one batch")
	}
	full, err := b.add(2, []float64{2}, futs[2])
	if err != nil || full == nil {
		t.Fatalf("third of 3: %v %v", full, err)
	}
	if !slices.Equal(full.observers, []int{1, 2, 3}) || full.obs[0][0] != 1 || full.obs[2][0] != 3 ||
		full.futs[0] != futs[1] || full.futs[1] != futs[2] || full.futs[2] != futs[0] {
		t.Errorf("batch %v %v", full.observers, full.obs)
	}
	// A new batch begins.
	if full, err := b.add(3, []float64{3}, futs[3]); full != nil || err != nil {
		t.Errorf("first of the next batch: %v %v", full, err)
	}
}

// spawn runs world ranks of the example as goroutines over the in-process
// transport and returns rank 0's result and log.
func spawn(t *testing.T, world int, c config) (*result, string) {
	t.Helper()
	var (
		mu  sync.Mutex
		res *result
		log bytes.Buffer
	)
	disttest.SpawnWith(t, world, disttest.Options{Timeout: 30 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
		var buf bytes.Buffer
		r, err := run(context.Background(), g, c, &buf)
		mu.Lock()
		defer mu.Unlock()
		if g.Rank() == 0 {
			res = r
			log.Write(buf.Bytes())
		}
		return err
	})
	if res == nil {
		t.Fatalf("no result from rank 0; log:\n%s", log.String())
	}
	return res, log.String()
}

// TestBatchedAndNot runs three observers batched and unbatched: both take
// the same steps, the batched agent runs one forward pass per step
// instead of one per request, training moves the running reward, and
// the batched run, whose rows come in observer order, is reproducible.
func TestBatchedAndNot(t *testing.T) {
	const obs, episodes, steps = 3, 3, 40
	c := config{episodes: episodes, steps: steps, seed: 5, gamma: 0.99, lr: 1e-2, logInterval: 1}
	results := map[bool]*result{}
	for _, batch := range []bool{true, false} {
		c.batch = batch
		res, log := spawn(t, obs+1, c)
		t.Logf("%+v\n%s", res, log)
		results[batch] = res
		if res.Steps != obs*episodes*steps || res.Episodes != episodes || res.Observers != obs || res.Batch != batch {
			t.Errorf("batch %v: %+v", batch, res)
		}
		if res.RunningReward <= 0 {
			t.Errorf("batch %v: running reward %v", batch, res.RunningReward)
		}
		if n := strings.Count(log, "Episode "); n != episodes {
			t.Errorf("batch %v: %d progress lines", batch, n)
		}
	}
	if f := results[true].Forwards; f != episodes*steps {
		t.Errorf("batched: %d forward passes, want one per step, %d", f, episodes*steps)
	}
	if f := results[false].Forwards; f != obs*episodes*steps {
		t.Errorf("unbatched: %d forward passes, want one per request, %d", f, obs*episodes*steps)
	}
	c.batch = true
	if again, _ := spawn(t, obs+1, c); again.RunningReward != results[true].RunningReward {
		t.Errorf("batched runs with the same seed: running reward %v, then %v", results[true].RunningReward, again.RunningReward)
	}
}

func TestObserversFlag(t *testing.T) {
	disttest.Spawn(t, 3, func(g *dist.Group) error {
		_, err := run(context.Background(), g, config{observers: 4, episodes: 1, steps: 1, logInterval: 1}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "--nproc-per-node 5") {
			t.Errorf("--observers 4 at world size 3: %v", err)
		}
		return nil
	})
}

const workerEnv = "GODIST_RPC_BATCH_TEST_WORKER"

// TestProcesses runs the ranks as processes over env://, as godist run
// starts them: rank 0's last line is the JSON result.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ps := disttest.StartProcs(t, 3, "TestProcessWorker", "rpc-batch", workerEnv+"=1")
	errs := disttest.WaitProcs(t, ps, 30*time.Second)
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
		t.Fatalf("last line of rank 0: %v\n%s", err, ps[0].Stdout.String())
	}
	if !res.Batch || res.Observers != 2 || res.Steps != 2*2*100 || res.Forwards != 2*100 || res.StepsPerS <= 0 {
		t.Errorf("result %+v", res)
	}
}

// TestProcessWorker is one rank of TestProcesses.
func TestProcessWorker(t *testing.T) {
	if os.Getenv(workerEnv) == "" {
		t.Skip("a rank of TestProcesses")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	c := config{batch: true, observers: 2, episodes: 2, steps: 100, seed: 1, gamma: 0.99, lr: 1e-2, logInterval: 1}
	if code := worker(ctx, c, os.Stdout, os.Stderr); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}
