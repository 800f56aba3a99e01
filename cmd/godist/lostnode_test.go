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

// TestRunLostNode is issue 29, item 3, at the launcher: two nodes (two
// godist run launchers on loopback, static rendezvous, --max-restarts 0)
// run workers that all-reduce every 10 ms; node 1's launcher is stopped
// (SIGSTOP), so its heartbeats stop as a cut-off host's do. Node 0's
// launcher must end the job within the keep-alive timeout (2 s here),
// with a report that names node 1 and its ranks, instead of going into a
// re-rendezvous that a static job can never finish (it waited, silent,
// for as long as anyone watched).
func TestRunLostNode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two godist run launchers")
	}
	if runtime.GOOS != "linux" {
		t.Skip("stops a process group")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	port := freeTestPort(t)
	// The workers' own peer timeout is long: the launcher must find the
	// lost node by itself.
	env := cleanEnv("GODIST_TEST_AS_MAIN=1", workerEnv+"=loop", "GODIST_TOKEN=0123456789abcdef", "GODIST_PEER_TIMEOUT=60s")
	var ps []*proc
	for _, nr := range []string{"1", "0"} { // node 1 first: it waits for node 0's store
		ps = append(ps, start(t, 60*time.Second, env, self, "run", "--nnodes", "2", "--node-rank", nr,
			"--master-addr", "127.0.0.1", "--master-port", port, "--nproc-per-node", "1", "--max-restarts", "0",
			"--rdzv-conf", "keep_alive_timeout=2", "--monitor-interval", "0.2", "--stop-timeout", "1s", self))
	}
	node1, node0 := ps[0], ps[1]
	for end := time.Now().Add(30 * time.Second); !strings.Contains(node0.stdout.String(), "LOOPING"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the workers did not start looping within 30 s: %v\n%v", node0, node1)
		}
	}
	if err := node1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { node1.cmd.Process.Signal(syscall.SIGCONT) })
	select {
	case <-node0.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("node 0's launcher still runs 20 s after node 1's stopped:\n%v", node0)
	}
	took := time.Since(stopped)
	out := node0.stderr.String() + node0.stdout.String()
	for _, s := range []string{"Root cause: a node was lost", "host:       127.0.0.1", "ranks:      1..1", "no heartbeat for"} {
		if !strings.Contains(out, s) {
			t.Errorf("node 0's report lacks %q", s)
		}
	}
	if strings.Contains(out, "re-rendezvous") {
		t.Errorf("node 0 went into a re-rendezvous that cannot finish")
	}
	if node0.code != 1 {
		t.Errorf("node 0 exited %d, want 1", node0.code)
	}
	// The keep-alive (2 s), a monitor tick, a heartbeat's age (up to a
	// quarter of the keep-alive) and the workers' stop.
	if took > 8*time.Second {
		t.Errorf("node 0 ended %v after node 1 stopped; want within the keep-alive and the stop timeout", took)
	}
	t.Logf("node 0 ended %v after node 1's launcher stopped", took)
	if t.Failed() || testing.Verbose() {
		t.Log(node0)
	}
}

// TestRunLostNodeRestarts: the same loss in an elastic job (--nnodes 1:2,
// the store rendezvous, --max-restarts 1): a restart is left and one node
// is enough, so node 0's launcher restarts the job with the nodes left,
// and it goes on as a world of one.
func TestRunLostNodeRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two godist run launchers")
	}
	if runtime.GOOS != "linux" {
		t.Skip("stops a process")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "127.0.0.1:" + freeTestPort(t)
	env := cleanEnv("GODIST_TEST_AS_MAIN=1", workerEnv+"=loop", "GODIST_TOKEN=0123456789abcdef", "GODIST_PEER_TIMEOUT=60s")
	args := []string{"run", "--nnodes", "1:2", "--rdzv-backend", "store", "--rdzv-endpoint", endpoint, "--rdzv-id", "lost-restart",
		"--nproc-per-node", "1", "--max-restarts", "1", "--rdzv-conf", "keep_alive_timeout=2,last_call_timeout=1",
		"--monitor-interval", "0.2", "--stop-timeout", "1s", self}
	node0 := start(t, 90*time.Second, env, self, args...) // it serves the store
	time.Sleep(200 * time.Millisecond)
	node1 := start(t, 90*time.Second, env, self, args...)
	for end := time.Now().Add(60 * time.Second); !strings.Contains(node0.stdout.String()+node1.stdout.String(), "of 2\n"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the two nodes did not loop together within 60 s:\n%v\n%v", node0, node1)
		}
	}
	// Stop the node that does not serve the store.
	if err := node1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node1.cmd.Process.Signal(syscall.SIGCONT) })
	select {
	case <-node0.done:
	case <-time.After(45 * time.Second):
		t.Fatalf("node 0 still runs 45 s after node 1 stopped:\n%v", node0)
	}
	out := node0.stderr.String()
	if node0.code != 0 || !strings.Contains(node0.stdout.String(), "ALONE rank 0") {
		t.Errorf("node 0 exited %d; want 0, its worker alone in a world of one", node0.code)
	}
	if !strings.Contains(out, "stopped sending heartbeats") || !strings.Contains(out, "restarting with the 1 nodes left (restart 1 of 1)") {
		t.Errorf("node 0's launcher does not say it restarted for the lost node")
	}
	if t.Failed() || testing.Verbose() {
		t.Log(node0)
	}
}

// loopWorker is a worker of TestRunLostNode and TestRunLostNodeRestarts:
// it all-reduces every 10 ms until a call fails, or, alone in its world,
// says so and ends.
func loopWorker() int {
	ctx := context.Background()
	g, err := dist.Init(ctx, dist.Options{Timeout: time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if g.Size() == 1 {
		fmt.Printf("ALONE rank %d\n", g.Rank()) // TestRunLostNodeRestarts: the job went on without the lost node
		return 0
	}
	x := tensor.New(tensor.Float32, 2)
	for i := 0; ; i++ {
		if i == 3 {
			fmt.Printf("LOOPING rank %d of %d\n", g.Rank(), g.Size())
		}
		if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
			dist.RecordError(err)
			fmt.Fprintf(os.Stderr, "rank %d: %v\n", g.Rank(), err)
			return 1
		}
		time.Sleep(10 * time.Millisecond)
	}
}
