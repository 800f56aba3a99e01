package main

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestSplitArgs(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("nproc-per-node", "1", "")
	fs.Bool("standalone", false, "")
	fs.String("rdzv-endpoint", "", "")
	cases := []struct {
		in        []string
		own, prog []string
	}{
		{[]string{"--nproc_per_node", "2", "--standalone", "prog", "--nproc_per_node", "x"},
			[]string{"--nproc-per-node", "2", "--standalone"}, []string{"prog", "--nproc_per_node", "x"}},
		{[]string{"--rdzv_endpoint=h:1", "-standalone", "/usr/bin/python3", "s.py"},
			[]string{"--rdzv-endpoint=h:1", "--standalone"}, []string{"/usr/bin/python3", "s.py"}},
		{[]string{"--standalone", "--", "-weird-program"}, []string{"--standalone"}, []string{"-weird-program"}},
		{[]string{"--nproc-per-node", "2"}, []string{"--nproc-per-node", "2"}, nil},
	}
	for _, c := range cases {
		own, prog := splitArgs(fs, c.in)
		if !slices.Equal(own, c.own) || !slices.Equal(prog, c.prog) {
			t.Errorf("splitArgs(%q) = %q, %q; want %q, %q", c.in, own, prog, c.own, c.prog)
		}
	}
}

func TestParseRunEnvAndFlags(t *testing.T) {
	env := map[string]string{"PET_NPROC_PER_NODE": "4", "GODIST_MAX_RESTARTS": "2", "PET_MAX_RESTARTS": "9", "PET_NNODES": "1:3",
		"PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "127.0.0.1:1234"}
	get := func(k string) string { return env[k] }
	var errb bytes.Buffer
	o, code := parseRun([]string{"--max_restarts", "5", "prog", "a"}, get, &errb)
	if code >= 0 {
		t.Fatalf("parseRun: exit %d: %s", code, errb.String())
	}
	if o.nproc != 4 || o.maxRestarts != 5 || o.minNodes != 1 || o.maxNodes != 3 || o.backend != "store" || o.endpoint != "127.0.0.1:1234" || !slices.Equal(o.program, []string{"prog", "a"}) {
		t.Fatalf("parsed %+v", o)
	}
	if o, _ := parseRun([]string{"--timeout", "90", "prog"}, get, &errb); o == nil || o.timeout != 90*time.Second {
		t.Fatalf("--timeout 90: %+v", o)
	}
	o, _ = parseRun([]string{"prog"}, get, &errb)
	if o.maxRestarts != 2 {
		t.Fatalf("GODIST_MAX_RESTARTS should win over PET_MAX_RESTARTS: got %d", o.maxRestarts)
	}
	o, _ = parseRun([]string{"--nproc-per-node", "auto", "--standalone", "p"}, func(string) string { return "" }, &errb)
	if o.nproc != runtime.NumCPU() || o.minNodes != 1 || o.maxNodes != 1 || !strings.HasPrefix(o.runID, "standalone-") {
		t.Fatalf("auto/standalone: %+v", o)
	}
	for args, want := range map[string]string{
		"--rdzv-backend etcd p":                                     "127.0.0.1:2379",
		"--rdzv-backend etcd-v2 --rdzv-endpoint a,b:1234,[::1] p":   "a:2379,b:1234,[::1]:2379",
		"--rdzv_backend etcd --master-addr 10.0.0.5 --nnodes 1:2 p": "10.0.0.5:2379",
	} {
		o, code := parseRun(strings.Fields(args), func(string) string { return "" }, &errb)
		if code >= 0 || o.backend != "etcd" || o.endpoint != want {
			t.Errorf("parseRun(%q): exit %d, %+v; want the etcd backend at %s", args, code, o, want)
		}
	}
	for _, bad := range [][]string{
		{}, {"--nnodes", "2:1", "p"}, {"--nnodes", "1:2", "p"}, {"--nproc-per-node", "0", "p"},
		{"--rdzv-backend", "etcd", "--standalone", "p"}, {"--rdzv-backend", "etcd", "--rdzv-endpoint", "h:2379/prefix", "p"},
		{"--rdzv-backend", "etcd", "--rdzv-endpoint", ",", "p"}, {"--rdzv-backend", "zookeeper", "p"}, {"--redirects", "7", "p"}, {"--node-rank", "3", "--nnodes", "2", "p"},
		{"--rdzv-conf", "bogus=1", "p"}, {"--no-such-flag", "p"},
		// issue 19, item 12
		{"--nproc-per-node", "100000", "p"}, {"--standalone", "--nnodes", "2", "p"}, {"--stop-timeout", "-1s", "p"},
		{"--timeout", "-5", "p"}, {"--timeout", "soon", "p"},
	} {
		errb.Reset()
		if _, code := parseRun(bad, func(string) string { return "" }, &errb); code != exitUsage {
			t.Errorf("parseRun(%q) = %d, want %d", bad, code, exitUsage)
		} else {
			t.Logf("%q: %s", bad, strings.TrimSpace(errb.String()))
		}
	}
}

// bins are the real binaries the end-to-end tests run.
type bins struct{ godist, worker string }

// TestRun builds the godist binary and the test worker
// (examples/launcher-allreduce) once and runs every end-to-end case.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	dir := t.TempDir()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	b := bins{filepath.Join(dir, "godist"), filepath.Join(dir, "worker")}
	for _, x := range [][2]string{{b.godist, "./cmd/godist"}, {b.worker, "./examples/launcher-allreduce"}} {
		cmd := exec.Command(gobin, "build", "-o", x[0], x[1])
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", x[1], err, out)
		}
	}
	for _, c := range []struct {
		name string
		fn   func(*testing.T, bins)
	}{
		{"Standalone", testRunStandalone},
		{"WorkerEnv", testRunWorkerEnv},
		{"TwoNodesStatic", testRunTwoNodesStatic},
		{"TwoNodesStore", testRunTwoNodesStore},
		{"EtcdLauncherKilled", testRunEtcdLauncherKilled},
		{"EtcdTokenOffLoopback", testRunEtcdTokenOffLoopback},
		{"ElasticJoin", testRunElasticJoin},
		{"RestartFromCheckpoint", testRunRestartFromCheckpoint},
		{"FailureReport", testRunFailureReport},
		{"SignalForwarded", testRunSignalForwarded},
		{"LogDir", testRunLogDir},
		{"PyTorchDDP", testRunPyTorchDDP},
		{"Slurm", testSlurmEnvironment},
		{"Mpirun", testMpirunEnvironment},
		{"TokenOffLoopback", testRunTokenOffLoopback},
		{"LegacyLocalRank", testRunLegacyLocalRank},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, b) })
	}
}

// proc is a started command with its output collected.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuf
	done           chan struct{}
	code           int
	took           time.Duration
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cleanEnv is the test's environment without launcher identities, so that
// the tests behave the same under godist run, Slurm or mpirun.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PET_") || strings.HasPrefix(k, "GODIST_") || strings.HasPrefix(k, "SLURM_") ||
			strings.HasPrefix(k, "OMPI_") || strings.HasPrefix(k, "TORCHELASTIC_") ||
			slices.Contains([]string{"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "GOGC", "GOMEMLIMIT"}, k) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func start(t *testing.T, limit time.Duration, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{stdout: &syncBuf{}, stderr: &syncBuf{}, done: make(chan struct{})}
	p.cmd = exec.Command(name, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.Dir = t.TempDir()
	begin := time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(limit, func() { p.cmd.Process.Kill() })
	go func() {
		p.cmd.Wait()
		timer.Stop()
		p.took = time.Since(begin)
		p.code = p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *proc) wait() *proc { <-p.done; return p }

func (p *proc) String() string {
	return fmt.Sprintf("exit %d after %v\n--- stdout:\n%s--- stderr:\n%s", p.code, p.took.Round(time.Millisecond), p.stdout, p.stderr)
}

// waitFor polls until out contains s.
func waitFor(t *testing.T, p *proc, s string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(p.stdout.String()+p.stderr.String(), s) {
		select {
		case <-p.done:
			t.Fatalf("exited before printing %q: %v", s, p)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %v: %v", s, limit, p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freeTestPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// wantResult is the sum an uninterrupted run of the worker prints.
func wantResult(world, steps int) string {
	sum := 0
	for s := range steps {
		sum += (s + 1) * world * (world + 1) / 2
	}
	return fmt.Sprintf("RESULT %d WORLD_SIZE %d", sum, world)
}

func testRunStandalone(t *testing.T, bb bins) {
	godist, worker := bb.godist, bb.worker
	p := start(t, 30*time.Second, cleanEnv(), godist, "run", "--standalone", "--nproc-per-node", "3", worker, "--steps", "10").wait()
	if p.code != 0 || !strings.Contains(p.stdout.String(), "[rank 0] "+wantResult(3, 10)) {
		t.Fatalf("want %q from rank 0: %v", wantResult(3, 10), p)
	}
}

func testRunWorkerEnv(t *testing.T, bb bins) {
	godist := bb.godist
	// The defaults come from PET_* (Kubeflow), the underscore spelling works.
	p := start(t, 20*time.Second, cleanEnv("PET_NPROC_PER_NODE=2", "OPENBLAS_NUM_THREADS=7"), godist,
		"run", "--standalone", "--max_restarts", "1", "/usr/bin/env").wait()
	if p.code != 0 {
		t.Fatal(p)
	}
	out := p.stdout.String()
	var token string
	for r := range 2 {
		for _, kv := range []string{
			"RANK=" + strconv.Itoa(r), "LOCAL_RANK=" + strconv.Itoa(r), "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2",
			"GROUP_RANK=0", "GROUP_WORLD_SIZE=1", "ROLE_NAME=default", "ROLE_RANK=" + strconv.Itoa(r), "ROLE_WORLD_SIZE=2",
			"MASTER_ADDR=127.0.0.1", "GODIST_RESTART_COUNT=0", "GODIST_MAX_RESTARTS=1", "TORCHELASTIC_RESTART_COUNT=0",
			"TORCHELASTIC_MAX_RESTARTS=1", "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=7", "GOGC=200", "GOMEMLIMIT=",
			"GODIST_FLIGHT_SIGNAL=1",
		} {
			if !strings.Contains(out, fmt.Sprintf("[rank %d] %s\n", r, kv)) && !(strings.HasSuffix(kv, "=") && strings.Contains(out, fmt.Sprintf("[rank %d] %s", r, kv))) {
				t.Errorf("rank %d lacks %s", r, kv)
			}
		}
		m := regexp.MustCompile(fmt.Sprintf(`\[rank %d\] GODIST_TOKEN=([0-9a-f]{32})\n`, r)).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("rank %d has no hex GODIST_TOKEN:\n%s", r, out)
		}
		if token != "" && m[1] != token {
			t.Errorf("ranks have different tokens")
		}
		token = m[1]
		for _, k := range []string{"MASTER_PORT", "GODIST_RUN_ID", "TORCHELASTIC_RUN_ID"} {
			if !strings.Contains(out, fmt.Sprintf("[rank %d] %s=", r, k)) {
				t.Errorf("rank %d lacks %s", r, k)
			}
		}
		// Its own error file, under both names.
		ef := regexp.MustCompile(fmt.Sprintf(`\[rank %d\] GODIST_ERROR_FILE=(\S+/attempt_0/%d/error\.json)\n`, r, r)).FindStringSubmatch(out)
		if ef == nil || !strings.Contains(out, fmt.Sprintf("[rank %d] TORCHELASTIC_ERROR_FILE=%s\n", r, ef[1])) {
			t.Errorf("rank %d lacks GODIST_ERROR_FILE and TORCHELASTIC_ERROR_FILE naming its own file", r)
		}
	}
	if strings.Contains(p.stderr.String(), token) {
		t.Errorf("the launcher printed the token")
	}
	// The workers' MASTER_PORT is not the launcher's store port.
	port := regexp.MustCompile(`MASTER_PORT=(\d+)`).FindStringSubmatch(out)[1]
	storeAddr := regexp.MustCompile(`rendezvous via 127.0.0.1:(\d+)`).FindStringSubmatch(p.stderr.String())
	if storeAddr == nil || storeAddr[1] == port {
		t.Errorf("workers' MASTER_PORT %s vs the launcher's store %v", port, storeAddr)
	}
	// A given token is passed on; a GOGC of the user's is kept, and then no
	// memory limit is added.
	p = start(t, 20*time.Second, cleanEnv("GODIST_TOKEN=00ff00ff", "GOGC=50"), godist, "run", "--standalone", "/usr/bin/env").wait()
	if !strings.Contains(p.stdout.String(), "[rank 0] GODIST_TOKEN=00ff00ff\n") {
		t.Errorf("the given token was not passed on: %v", p)
	}
	if !strings.Contains(p.stdout.String(), "[rank 0] GOGC=50\n") || strings.Contains(p.stdout.String(), "GOMEMLIMIT=") {
		t.Errorf("the user's GOGC was not kept alone: %v", p)
	}
}

func testRunTwoNodesStatic(t *testing.T, bb bins) {
	godist, worker := bb.godist, bb.worker
	port := freeTestPort(t)
	var ps []*proc
	for _, nr := range []string{"1", "0"} { // node 1 first: it waits for node 0's store
		ps = append(ps, start(t, 40*time.Second, cleanEnv(), godist, "run", "--nnodes", "2", "--node_rank", nr,
			"--master-addr", "127.0.0.1", "--master-port", port, "--nproc-per-node", "2", worker, "--steps", "8"))
	}
	out := ""
	for _, p := range ps {
		if p.wait().code != 0 {
			t.Fatalf("node failed: %v", p)
		}
		out += p.stdout.String()
	}
	if !strings.Contains(ps[1].stdout.String(), "[rank 0] "+wantResult(4, 8)) {
		t.Fatalf("node 0 lacks %q: %v", wantResult(4, 8), ps[1])
	}
	if !strings.Contains(ps[0].stderr.String(), "node rank 1 of 2 nodes, ranks 2..3 of world size 4") {
		t.Fatalf("node 1: %v", ps[0])
	}
}

func testRunTwoNodesStore(t *testing.T, bb bins) {
	godist, worker := bb.godist, bb.worker
	ep := "127.0.0.1:" + freeTestPort(t)
	var ps []*proc
	for range 2 {
		ps = append(ps, start(t, 40*time.Second, cleanEnv(), godist, "run", "--nnodes", "2", "--rdzv-backend", "store",
			"--rdzv-endpoint", ep, "--rdzv-id", "job-x", "--nproc-per-node", "1", worker, "--steps", "8"))
	}
	out := ""
	for _, p := range ps {
		if p.wait().code != 0 {
			t.Fatalf("node failed: %v", p)
		}
		out += p.stdout.String()
	}
	if !strings.Contains(out, "[rank 0] "+wantResult(2, 8)) {
		t.Fatalf("no %q: %v\n%v", wantResult(2, 8), ps[0], ps[1])
	}
}

func testRunElasticJoin(t *testing.T, bb bins) {
	godist, worker := bb.godist, bb.worker
	ep := "127.0.0.1:" + freeTestPort(t)
	args := []string{"run", "--nnodes", "1:2", "--rdzv-backend", "store", "--rdzv-endpoint", ep, "--rdzv-id", "elastic",
		"--rdzv-conf", "last_call_timeout=0.5", worker, "--steps", "5", "--wait-world", "2"}
	a := start(t, 40*time.Second, cleanEnv(), godist, args...)
	waitFor(t, a, "[rank 0] WORLD_SIZE 1, waiting for 2", 20*time.Second)
	b := start(t, 40*time.Second, cleanEnv(), godist, args...)
	for _, p := range []*proc{a, b} {
		if p.wait().code != 0 {
			t.Fatalf("node failed: %v\nother: %v", p, b)
		}
	}
	if !strings.Contains(a.stdout.String()+b.stdout.String(), "[rank 0] "+wantResult(2, 5)) {
		t.Fatalf("the group did not re-form with world size 2:\n%v\n%v", a, b)
	}
	if !strings.Contains(a.stderr.String(), "re-rendezvous: 1 node(s) waiting to join") {
		t.Fatalf("node a did not re-rendezvous: %v", a)
	}
}

func testRunRestartFromCheckpoint(t *testing.T, bb bins) {
	godist, worker := bb.godist, bb.worker
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	p := start(t, 40*time.Second, cleanEnv(), godist, "run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "3",
		worker, "--steps", "20", "--checkpoint", ckpt, "--kill-rank", "1", "--kill-at", "7").wait()
	if p.code != 0 {
		t.Fatal(p)
	}
	if !strings.Contains(p.stderr.String(), "rank 1 (local rank 1 on") || !strings.Contains(p.stderr.String(), "signal SIGKILL (9); restarting the worker group (restart 1 of 3)") {
		t.Fatalf("no restart after the SIGKILL: %v", p)
	}
	if !regexp.MustCompile(`\[rank 0\] resuming at step [67] \(restart 1\)`).MatchString(p.stdout.String()) {
		t.Fatalf("did not resume from the checkpoint: %v", p)
	}
	// The same result as an uninterrupted run's.
	if !strings.Contains(p.stdout.String(), "[rank 0] "+wantResult(2, 20)) {
		t.Fatalf("want %q: %v", wantResult(2, 20), p)
	}
}

func testRunFailureReport(t *testing.T, bb bins) {
	godist, worker := bb.godist, bb.worker
	p := start(t, 30*time.Second, cleanEnv(), godist, "run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "0",
		worker, "--steps", "20", "--kill-rank", "1", "--kill-at", "3").wait()
	if p.code != 128+9 {
		t.Fatalf("want exit status 137 (SIGKILL): %v", p)
	}
	if p.took > 5*time.Second {
		t.Errorf("took %v, want under 5s", p.took)
	}
	for _, s := range []string{"Root cause (first failure):", "rank:       1 (local rank 1", "exit:       signal SIGKILL (9)",
		"pid:", "host:", "time:", "rank 1: killing myself at step 3"} {
		if !strings.Contains(p.stderr.String(), s) {
			t.Errorf("the report lacks %q", s)
		}
	}
	if t.Failed() {
		t.Log(p)
	}
	// A panic: its stack is in the report, and the exit status is Go's 2.
	p = start(t, 30*time.Second, cleanEnv(), godist, "run", "--standalone", "--nproc-per-node", "2",
		worker, "--steps", "20", "--kill-rank", "0", "--panic-at", "2").wait()
	if p.code != 2 || !strings.Contains(p.stderr.String(), "    panic: boom at step 2") || !strings.Contains(p.stderr.String(), "    goroutine 1 [running]:") {
		t.Fatalf("want exit 2 and the panic in the report: %v", p)
	}
}

func testRunSignalForwarded(t *testing.T, bb bins) {
	godist, worker := bb.godist, bb.worker
	p := start(t, 30*time.Second, cleanEnv(), godist, "run", "--standalone", "--nproc-per-node", "2", worker, "--wait-world", "99")
	waitFor(t, p, "[rank 1] WORLD_SIZE 2, waiting for 99", 20*time.Second)
	sent := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait()
	if p.code != 128+int(syscall.SIGTERM) || time.Since(sent) > 5*time.Second {
		t.Fatalf("want exit 143 soon after SIGTERM: %v", p)
	}
	if !strings.Contains(p.stderr.String(), "interrupted by SIGTERM") {
		t.Fatalf("%v", p)
	}
}

func testRunLogDir(t *testing.T, bb bins) {
	godist := bb.godist
	dir := t.TempDir()
	p := start(t, 20*time.Second, cleanEnv(), godist, "run", "--standalone", "--nproc-per-node", "2", "--log-dir", dir, "--redirects", "1", "--tee", "2",
		"/bin/sh", "-c", `echo "out $RANK"; echo "err $RANK" >&2`).wait()
	if p.code != 0 {
		t.Fatal(p)
	}
	run := regexp.MustCompile(`run id (standalone-[0-9a-f]+)`).FindStringSubmatch(p.stderr.String())
	if run == nil {
		t.Fatal(p)
	}
	for r := range 2 {
		base := filepath.Join(dir, run[1], "attempt_0", strconv.Itoa(r))
		for _, f := range []struct{ name, want string }{{"stdout.log", "out "}, {"stderr.log", "err "}} {
			b, err := os.ReadFile(filepath.Join(base, f.name))
			if err != nil || string(b) != f.want+strconv.Itoa(r)+"\n" {
				t.Errorf("%s/%s = %q, %v", base, f.name, b, err)
			}
		}
	}
	// --redirects 1 --tee 2: stdout only in the files, stderr on the
	// console too.
	if strings.Contains(p.stdout.String(), "out ") || !strings.Contains(p.stderr.String(), "[rank 1] err 1") {
		t.Errorf("console: %v", p)
	}
}

func testRunPyTorchDDP(t *testing.T, bb bins) {
	godist := bb.godist
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		t.Skipf("skipping: /usr/bin/python3 cannot import torch (%v); install Debian's python3-torch", err)
	}
	script, _ := filepath.Abs("../../testdata/launcher/ddp_torchrun.py")
	p := start(t, 60*time.Second, cleanEnv(), godist, "run", "--standalone", "--nproc-per-node", "2", "/usr/bin/python3", script).wait()
	if p.code != 0 || !regexp.MustCompile(`\[rank 0\] FINAL_LOSS \d+\.\d+ WORLD_SIZE 2`).MatchString(p.stdout.String()) {
		t.Fatalf("the torchrun script failed under godist run: %v", p)
	}
	t.Log(strings.TrimSpace(p.stdout.String()))
}

func testSlurmEnvironment(t *testing.T, bb bins) {
	worker := bb.worker
	port := freeTestPort(t)
	var ps []*proc
	for r := range 2 {
		ps = append(ps, start(t, 30*time.Second, cleanEnv("SLURM_PROCID="+strconv.Itoa(r), "SLURM_NTASKS=2",
			"SLURM_LOCALID="+strconv.Itoa(r), "SLURM_JOB_NODELIST=localhost", "MASTER_PORT="+port), worker, "--steps", "6"))
	}
	for _, p := range ps {
		if p.wait().code != 0 {
			t.Fatal(p)
		}
	}
	if !strings.Contains(ps[0].stdout.String(), wantResult(2, 6)) {
		t.Fatalf("want %q: %v", wantResult(2, 6), ps[0])
	}
}

func testMpirunEnvironment(t *testing.T, bb bins) {
	worker := bb.worker
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("skipping: no mpirun (install Debian's openmpi-bin: apt-get install -y openmpi-bin)")
	}
	port := freeTestPort(t)
	p := start(t, 60*time.Second, cleanEnv(), mpirun, "-np", "2", "--oversubscribe", "--allow-run-as-root",
		"-x", "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT="+port, worker, "--steps", "6").wait()
	if p.code != 0 || !strings.Contains(p.stdout.String(), wantResult(2, 6)) {
		t.Fatalf("want %q: %v", wantResult(2, 6), p)
	}
}

// testRunTokenOffLoopback (issue 19, item 2): launchers that meet off
// loopback without GODIST_TOKEN refuse to start (they used to agree on a
// token through the rendezvous store, where any client could read it),
// saying what to do; --insecure lets them, and the workers are told.
func testRunTokenOffLoopback(t *testing.T, bb bins) {
	addrs, _ := net.InterfaceAddrs()
	ip := ""
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			ip = n.IP.String()
			break
		}
	}
	if ip == "" {
		t.Skip("no non-loopback IPv4 address")
	}
	port := freeTestPort(t)
	p := start(t, 20*time.Second, cleanEnv(), bb.godist, "run", "--nnodes", "1", "--master-addr", ip, "--master-port", port, "/usr/bin/env").wait()
	if p.code != exitUsage || !strings.Contains(p.stderr.String(), "GODIST_TOKEN") || !strings.Contains(p.stderr.String(), "--insecure") {
		t.Fatalf("no token off loopback: %v", p)
	}
	p = start(t, 20*time.Second, cleanEnv(), bb.godist, "run", "--insecure", "--nnodes", "1", "--master-addr", ip, "--master-port", port, "/usr/bin/env").wait()
	if p.code != 0 || !strings.Contains(p.stdout.String(), "[rank 0] GODIST_INSECURE=1\n") || strings.Contains(p.stdout.String(), "GODIST_TOKEN=") {
		t.Fatalf("--insecure: %v", p)
	}
	if !strings.Contains(p.stderr.String(), "warning: --insecure") {
		t.Errorf("--insecure without a warning: %v", p)
	}
}

// testRunLegacyLocalRank (issue 19): torch.distributed.launch's command
// lines run: --pass-local-rank hands each worker --local-rank=N after its
// own arguments, --use-env is accepted (and is the default), and the two
// together are refused.
func testRunLegacyLocalRank(t *testing.T, bb bins) {
	p := start(t, 20*time.Second, cleanEnv(), bb.godist, "run", "--standalone", "--nproc-per-node", "2", "--pass-local-rank", "/bin/echo", "args:").wait()
	out := p.stdout.String()
	if p.code != 0 || !strings.Contains(out, "[rank 0] args: --local-rank=0\n") || !strings.Contains(out, "[rank 1] args: --local-rank=1\n") {
		t.Fatalf("--pass-local-rank: %v", p)
	}
	p = start(t, 20*time.Second, cleanEnv(), bb.godist, "run", "--standalone", "--use_env", "/bin/echo", "args:").wait()
	if p.code != 0 || !strings.Contains(p.stdout.String(), "[rank 0] args:\n") {
		t.Fatalf("--use_env: %v", p)
	}
	p = start(t, 20*time.Second, cleanEnv(), bb.godist, "run", "--standalone", "--use-env", "--pass-local-rank", "/bin/echo").wait()
	if p.code != exitUsage || !strings.Contains(p.stderr.String(), "contradict") {
		t.Fatalf("--use-env with --pass-local-rank: %v", p)
	}
}
