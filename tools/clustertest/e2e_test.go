package clustertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// bins holds godist, examples/launcher-allreduce and examples/tinygpt
// (bins.dir/tinygpt), built once for the
// tests that run them (buildBins); TestMain removes it.
var bins struct {
	sync.Mutex
	dir            string
	godist, worker string
	err            error
}

// buildBins builds godist and the worker once, and returns their paths.
func buildBins(ctx context.Context, t *testing.T) (godist, worker string) {
	t.Helper()
	bins.Lock()
	defer bins.Unlock()
	if bins.dir == "" && bins.err == nil {
		start := time.Now()
		bins.dir, bins.err = os.MkdirTemp("", "clustertest-bins-")
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(gobin); err != nil {
			gobin = "go"
		}
		for _, b := range [][2]string{{"godist", "./cmd/godist"}, {"worker", "./examples/launcher-allreduce"}, {"tinygpt", "./examples/tinygpt"}, {"pipeline-gpt", "./examples/pipeline-gpt"}} {
			if bins.err != nil {
				break
			}
			// tinygpt with the etcd store, for godist run --rdzv-backend etcd.
			cmd := exec.CommandContext(ctx, gobin, "build", "-tags", "etcd", "-o", filepath.Join(bins.dir, b[0]), b[1])
			cmd.Dir = filepath.Join("..", "..")
			if out, err := cmd.CombinedOutput(); err != nil {
				bins.err = fmt.Errorf("go build %s: %v\n%s", b[1], err, out)
			}
		}
		t.Logf("built godist, the worker, tinygpt and pipeline-gpt in %v", time.Since(start).Round(time.Millisecond))
	}
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return filepath.Join(bins.dir, "godist"), filepath.Join(bins.dir, "worker")
}

// jobEnv is this process's environment without any launcher's variables,
// with a fresh GODIST_TOKEN.
func jobEnv() []string {
	tok := make([]byte, 16)
	rand.Read(tok)
	env := []string{"GODIST_TOKEN=" + hex.EncodeToString(tok)}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "GODIST_") && !strings.HasPrefix(k, "PET_") && !strings.HasPrefix(k, "TORCHELASTIC_") &&
			!strings.HasPrefix(k, "OMPI_") && !strings.HasPrefix(k, "SLURM_") &&
			!slices.Contains([]string{"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}, k) {
			env = append(env, kv)
		}
	}
	return env
}

// TestGodistRunAcrossHosts runs a job of 2 hosts × 2 ranks: godist run on
// each host (static rendezvous at node0's address, the same token in
// both launchers' GODIST_TOKEN), examples/launcher-allreduce as the
// worker. It all-reduces to the right sum (and all-gathers and
// reduce-scatters 1.2 MB, every element checked); each rank reports the hostname
// and /dev/shm it saw (ranks 0 and 1 node0's, 2 and 3 node1's); and
// godist itself tells the hosts apart: each rank shares memory with the
// other rank on its host and says that the two on the other host are on
// another host.
func TestGodistRunAcrossHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds godist and runs a job")
	}
	// At 100 Mbit/s the network is what an all-reduce of a megabyte
	// waits for, so the model must choose the two-level schedule.
	c := Start(t, Config{Hosts: 2, ShareCPUs: true, Rate: 100 * Mbit})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	godist, worker := buildBins(ctx, t)
	env := jobEnv()
	// Each rank says where it runs, then is the worker.
	const script = `echo "HOST $(cat /proc/sys/kernel/hostname) SHM $(stat -c %d:%i /dev/shm)"; exec "$0" --steps 8 --count 300000 --gather --log`
	type node struct {
		cmd            *exec.Cmd
		stdout, stderr bytes.Buffer
	}
	nodes := make([]*node, 2)
	start := time.Now()
	for _, i := range []int{1, 0} { // node 1 first: it waits for node 0's store
		n := &node{}
		n.cmd = c.Command(ctx, i, godist, "run", "--nnodes", "2", "--node-rank", fmt.Sprint(i),
			"--master-addr", c.Host(0).Addr.String(), "--master-port", "29500", "--nproc-per-node", "2",
			"/bin/sh", "-c", script, worker)
		n.cmd.Env = env
		n.cmd.Stdout, n.cmd.Stderr = &n.stdout, &n.stderr
		n.cmd.WaitDelay = 5 * time.Second
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		nodes[i] = n
	}
	for i, n := range nodes {
		if err := n.cmd.Wait(); err != nil {
			t.Errorf("node %d: %v\nstdout:\n%s\nstderr:\n%s", i, err, &n.stdout, &n.stderr)
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("the job ran in %v", time.Since(start).Round(time.Millisecond))
	all := nodes[0].stdout.String() + nodes[1].stdout.String()
	allErr := nodes[0].stderr.String() + nodes[1].stderr.String()
	if want := "[rank 0] RESULT 360 WORLD_SIZE 4\n"; !strings.Contains(nodes[0].stdout.String(), want) {
		t.Errorf("node 0's output lacks %q:\n%s", want, &nodes[0].stdout)
	}
	if want := "node rank 1 of 2 nodes, ranks 2..3 of world size 4"; !strings.Contains(nodes[1].stderr.String(), want) {
		t.Errorf("node 1's launcher did not say %q:\n%s", want, &nodes[1].stderr)
	}
	checkRanks(t, `\[rank (\d)\] `, all, allErr)
	// The world knows its two hosts, measured the links at Init, and
	// all-reduces 1.2 MB with the two-level schedule (every element
	// checked by the worker).
	if m := regexp.MustCompile(`HOSTS (\[.*?\]\]) ALGO (\S+) PREDICTED (\S+) MODEL (.*)`).FindStringSubmatch(nodes[0].stdout.String()); m == nil {
		t.Errorf("node 0's output lacks rank 0's HOSTS line:\n%s", &nodes[0].stdout)
	} else {
		t.Logf("hosts %s, all-reduce of 300000 elements: %s, predicted %s; model %s", m[1], m[2], m[3], m[4])
		if m[1] != "[[0 1] [2 3]]" || !strings.HasPrefix(m[2], "two-level") {
			t.Errorf("hosts %s, algorithm %s: want [[0 1] [2 3]] and two-level", m[1], m[2])
		}
	}
	// The all-gather and reduce-scatter of as much take the two-level
	// schedules too, whose local steps send a host's chunks to a
	// host-mate in one message (joined ranges), through shared memory.
	if m := regexp.MustCompile(`GATHER (\S+) SCATTER (\S+)`).FindStringSubmatch(nodes[0].stdout.String()); m == nil {
		t.Errorf("node 0's output lacks rank 0's GATHER line:\n%s", &nodes[0].stdout)
	} else if !strings.HasPrefix(m[1], "two-level") || !strings.HasPrefix(m[2], "two-level") {
		t.Errorf("all-gather %s, reduce-scatter %s of 300000 elements: want two-level", m[1], m[2])
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("stderr:\n%s", allErr)
	}
}

// checkRanks checks what the 4 ranks of a job on 2 hosts × 2 said on
// stdout and stderr, each line tagged by tag (a regexp whose group is
// the rank): that ranks 0 and 1 saw node0 and a /dev/shm, ranks 2 and 3
// node1 and another (the script's HOST lines), and that godist (the
// worker's --log) found that each rank's peers on other hosts are the
// other host's two, and nothing else kept ranks from shared memory.
func checkRanks(t *testing.T, tag, stdout, stderr string) {
	t.Helper()
	host, shm := map[string]string{}, map[string]string{}
	for _, m := range regexp.MustCompile(tag+`HOST (\S+) SHM (\S+)`).FindAllStringSubmatch(stdout, -1) {
		host[m[1]], shm[m[1]] = m[2], m[3]
	}
	t.Logf("ranks' hosts %v, /dev/shm %v", host, shm)
	if host["0"] != "node0" || host["1"] != "node0" || host["2"] != "node1" || host["3"] != "node1" ||
		shm["0"] != shm["1"] || shm["2"] != shm["3"] || shm["0"] == shm["2"] || shm["0"] == "" || shm["2"] == "" {
		t.Errorf("ranks' hosts %v and /dev/shm %v: want ranks 0, 1 on node0 and 2, 3 on node1, a /dev/shm for each", host, shm)
	}
	elsewhere := map[string]string{}
	for _, m := range regexp.MustCompile(tag+`.*shared memory not used: peers on other hosts.* peers="(\[[0-9 ]*\])"`).FindAllStringSubmatch(stderr, -1) {
		elsewhere[m[1]] = m[2]
	}
	if want := map[string]string{"0": "[2 3]", "1": "[2 3]", "2": "[0 1]", "3": "[0 1]"}; !maps.Equal(elsewhere, want) {
		t.Errorf("godist's peers on other hosts, by rank: %v, want %v", elsewhere, want)
	}
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "shared memory not used") && !strings.Contains(l, "peers on other hosts") {
			t.Errorf("godist: %s", l)
		}
	}
}
