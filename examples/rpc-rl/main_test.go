package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
)

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

// TestEpisodes runs an agent and two observers for a few episodes: every
// episode's steps come back through the observers' RRefs, the rewards
// reported move the running reward, and progress is logged.
func TestEpisodes(t *testing.T) {
	res, log := spawn(t, 3, config{seed: 543, maxEpisodes: 6, logInterval: 2, gamma: 0.99, lr: 1e-2})
	t.Logf("%+v\n%s", res, log)
	if res.Episodes != 6 || res.Observers != 2 || res.Solved {
		t.Errorf("result %+v", res)
	}
	// Every episode each observer takes at least the step that ends it
	// (about ten for a fresh policy), at most 2500.
	if res.Steps < 2*6*5 || res.Steps > 2*6*2500 {
		t.Errorf("%d steps in 6 episodes of 2 observers", res.Steps)
	}
	if res.RunningReward <= 0 || res.StepsPerS <= 0 {
		t.Errorf("running reward %v, %v steps/s", res.RunningReward, res.StepsPerS)
	}
	if n := strings.Count(log, "Episode "); n != 3 {
		t.Errorf("%d progress lines for 6 episodes at --log-interval 2:\n%s", n, log)
	}
}

// TestLearns trains a little: with one observer (whose episodes are run
// one after another, so the run is reproducible) the running reward
// passes 30 within 100 episodes, as reinforce's own tests find.
func TestLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for a few seconds")
	}
	res, log := spawn(t, 2, config{seed: 2, maxEpisodes: 100, logInterval: 50, gamma: 0.99, lr: 1e-2})
	t.Logf("%+v\n%s", res, log)
	if res.RunningReward < 30 {
		t.Errorf("running reward %v after %d episodes", res.RunningReward, res.Episodes)
	}
}

func TestOneWorker(t *testing.T) {
	disttest.Spawn(t, 1, func(g *dist.Group) error {
		if _, err := run(context.Background(), g, config{maxEpisodes: 1, logInterval: 1}, &bytes.Buffer{}); err == nil ||
			!strings.Contains(err.Error(), "--nproc-per-node 3") {
			t.Errorf("world size 1: %v", err)
		}
		return nil
	})
}

const workerEnv = "GODIST_RPC_RL_TEST_WORKER"

// TestProcesses runs the example's ranks as processes over env://, as
// godist run starts them: rank 0's last line is the JSON result.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ps := disttest.StartProcs(t, 3, "TestProcessWorker", "rpc-rl", workerEnv+"=1")
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
	if res.Episodes != 4 || res.Observers != 2 || res.Steps == 0 || res.WallS <= 0 {
		t.Errorf("result %+v", res)
	}
	if !strings.Contains(ps[0].Stderr.String(), "Episode 4\t") {
		t.Errorf("rank 0's log:\n%s", ps[0].Stderr.String())
	}
	for r := 1; r < 3; r++ {
		if strings.Contains(ps[r].Stdout.String(), "{") {
			t.Errorf("observer %d printed a result:\n%s", r, ps[r].Stdout.String())
		}
	}
}

// TestProcessWorker is one rank of TestProcesses.
func TestProcessWorker(t *testing.T) {
	if os.Getenv(workerEnv) == "" {
		t.Skip("a rank of TestProcesses")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	if code := worker(ctx, config{seed: 1, maxEpisodes: 4, logInterval: 2, gamma: 0.99, lr: 1e-2}, os.Stdout, os.Stderr); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}
