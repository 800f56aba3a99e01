package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/tensor"
)

// TestRunStoppedStoreHost is issue 27, item 5, end to end: three workers
// (this test binary) all-reduce in a loop under godist run, and rank 0,
// which serves their store, stops itself (SIGSTOP). The others time out
// (after 5 s) saying that rank 0, the store's host, stopped responding;
// the launcher stops the group, finds rank 0 stopped, kills it after
// --stop-timeout, and names it the root cause. Before, the survivors
// named the peer they were blocked on, and the launcher a survivor.
func TestRunStoppedStoreHost(t *testing.T) {
	if testing.Short() {
		t.Skip("runs godist run")
	}
	if runtime.GOOS != "linux" {
		t.Skip("a stopped process is told from /proc")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, 90*time.Second, cleanEnv("GODIST_TEST_AS_MAIN=1", workerEnv+"=stop-rank0"), self,
		"run", "--standalone", "--nproc-per-node", "3", "--stop-timeout", "1s", self).wait()
	out := p.stderr.String()
	root, _, _ := strings.Cut(out[strings.Index(out, "Root cause")+1:], "Other failures")
	for _, s := range []string{"rank:       0 (local rank 0", "exit:       stopped (SIGSTOP or a debugger), then signal SIGKILL (9) from the launcher",
		"why:        rank 0 stopped responding", "it serves the workers' store"} {
		if !strings.Contains(root, s) {
			t.Errorf("the root cause lacks %q", s)
		}
	}
	// Each survivor that failed on its own says so.
	if !strings.Contains(out, "the job's store, which rank 0 serves, does not answer: rank 0 stopped responding") {
		t.Errorf("no survivor names rank 0, the store's host")
	}
	if p.code != 1 {
		t.Errorf("exit %d, want 1 (a survivor's)", p.code)
	}
	if t.Failed() {
		t.Log(p)
	}
}

// stopRank0Worker is a worker of TestRunStoppedStoreHost: it all-reduces
// until a call fails, rank 0 stopping itself before its 20th.
func stopRank0Worker() int {
	ctx := context.Background()
	g, err := dist.Init(ctx, dist.Options{Timeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	x := tensor.New(tensor.Float32, 2)
	for i := 0; ; i++ {
		if g.Rank() == 0 && i == 20 {
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		}
		if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
			dist.RecordError(err)
			fmt.Fprintf(os.Stderr, "rank %d: %v\n", g.Rank(), err)
			return 1
		}
	}
}
