package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godist/godist/internal/tailbuf"
	"github.com/godist/godist/tools/clustertest"
)

// params is what every benchmark of a hostcmp run is given.
type params struct {
	Ops      []string
	Sizes    []int
	Target   time.Duration
	MinIters int
	MaxIters int
	Warmup   int
	// WarmupJob is the iterations of a barrier and a 4-byte all_reduce
	// every benchmark runs before its first cell (--warmup-job).
	WarmupJob int
	// CommonStart is godist's iterations from a common start per cell
	// (godist bench --common-start): what its cost model predicts.
	CommonStart int
	Timeout     time.Duration // one benchmark's run on one lab
}

func (p params) sizesArg() string {
	s := make([]string, len(p.Sizes))
	for i, b := range p.Sizes {
		s[i] = strconv.Itoa(b)
	}
	return strings.Join(s, ",")
}

// anchorFlags are the flags bench_gloo.py and bench_mpi.py share.
func (p params) anchorFlags(out string) []string {
	return []string{"--ops", strings.Join(p.Ops, ","), "--sizes", p.sizesArg(),
		"--target", strconv.FormatFloat(p.Target.Seconds(), 'g', -1, 64),
		"--max-iters", strconv.Itoa(p.MaxIters), "--min-iters", strconv.Itoa(p.MinIters),
		"--warmup", strconv.Itoa(p.Warmup), "--warmup-job", strconv.Itoa(p.WarmupJob), "--out", out}
}

// tools are the programs the benchmarks run.
type tools struct {
	Godist  string // the godist binary
	Python  string // Python with torch, mpi4py and numpy
	Mpirun  string
	Scripts string // the directory holding bench_gloo.py, bench_mpi.py, train_ddp.py and gpt_twin.py
	Example string // examples/ddp-fashion-mnist, for --train
	TinyGPT string // examples/tinygpt, for --train gpt
	// PipelineGPT is examples/pipeline-gpt, for --pipeline.
	PipelineGPT string
	Corpus      string // tinygpt's and pipeline-gpt's --data: $(go env GOROOT)/src
	Tmp         string // a directory for the run's files, removed at the end
	// GodistEnv is added to every godist run's environment after the
	// lab's own (--godist-env: GODIST_YIELD=0, GODIST_ALGO=..., for
	// comparisons).
	GodistEnv []string
}

// hostCmd is one command of a benchmark's run: argv on host Host, with
// env added to the run's environment.
type hostCmd struct {
	Host int
	Argv []string
	Env  []string
}

// bench is one benchmark hostcmp runs on a lab.
type bench struct {
	Name  string // its --peers name
	Label string // its column heading
	// Probe says why it cannot run here ("" if it can) and, if it can,
	// the versions and the settings it runs with.
	Probe func(t tools) (about, missing string)
	// Cmds are the commands that measure on lab l; results go to out,
	// or, with StdoutJSON, to host 0's first command's stdout.
	Cmds       func(t tools, l *lab, p params, port int, out string) []hostCmd
	StdoutJSON bool
}

// benches are hostcmp's benchmarks, in the order of the tables' columns
// (and of the first round).
var benches = []bench{
	{
		Name: "godist", Label: "godist", StdoutJSON: true,
		Probe: func(t tools) (string, string) {
			v, err := exec.Command(t.Godist, "version").Output()
			if err != nil {
				return "", fmt.Sprintf("%s version: %v", t.Godist, err)
			}
			return strings.Join(strings.Fields(string(v)), " ") + "; godist run on each host (static rendezvous at node0), godist bench --worker", ""
		},
		Cmds: func(t tools, l *lab, p params, port int, _ string) []hostCmd {
			return godistOnHosts(t, l, port, t.Godist, "bench", "--worker", "--ops", strings.Join(p.Ops, ","), "--sizes", p.sizesArg(),
				"--target", p.Target.String(), "--iters", strconv.Itoa(p.MaxIters),
				"--min-iters", strconv.Itoa(p.MinIters), "--warmup", strconv.Itoa(p.Warmup),
				"--warmup-job", strconv.Itoa(p.WarmupJob), "--common-start", strconv.Itoa(p.CommonStart),
				"--timeout", p.Timeout.String())
		},
	},
	{
		Name: "gloo", Label: "gloo",
		Probe: func(t tools) (string, string) {
			v, missing := torchVersion(t)
			if missing != "" {
				return "", missing
			}
			return v + "; torchrun on each host (static rendezvous at node0), bench_gloo.py, GLOO_SOCKET_IFNAME=eth0", ""
		},
		Cmds: func(t tools, l *lab, p params, port int, out string) []hostCmd {
			return torchrunOnHosts(t, l, port, append([]string{filepath.Join(t.Scripts, "bench_gloo.py")}, p.anchorFlags(out)...)...)
		},
	},
	{
		Name: "mpitcp", Label: "mpi-tcp",
		Probe: func(t tools) (string, string) {
			if t.Mpirun == "" {
				return "", "no mpirun on PATH (Debian: openmpi-bin)"
			}
			v, err := exec.Command(t.Python, "-c", "import mpi4py, numpy; print('mpi4py', mpi4py.__version__)").Output()
			if err != nil {
				return "", fmt.Sprintf("%s cannot import mpi4py and numpy (Debian: python3-mpi4py)", t.Python)
			}
			mv, _ := exec.Command(t.Mpirun, "--version").Output()
			first, _, _ := strings.Cut(string(mv), "\n")
			return strings.TrimSpace(first) + ", " + strings.TrimSpace(string(v)) +
				"; mpirun on node0 (rsh agent into the hosts), bench_mpi.py, ob1 over btl tcp,vader,self: TCP on eth0 between hosts, shared memory within one", ""
		},
		Cmds: func(t tools, l *lab, p params, _ int, out string) []hostCmd {
			agent, err := l.c.RshAgent()
			if err != nil {
				agent = "/nonexistent-rsh-agent" // mpirun then says why
			}
			var hosts []string
			for i := range l.cfg.Hosts {
				hosts = append(hosts, fmt.Sprintf("%s:%d", l.c.Host(i).Name, l.cfg.PerHost))
			}
			argv := []string{t.Mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
				"--mca", "plm_rsh_agent", agent, "--host", strings.Join(hosts, ","),
				"-np", strconv.Itoa(l.cfg.World()),
				"--mca", "pml", "ob1", "--mca", "btl", "tcp,vader,self",
				"--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
				"-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1"}
			if l.oversubscribed() {
				// See lab.oversubscribed.
				argv = append(argv, "--mca", "mpi_yield_when_idle", "1")
			}
			argv = append(argv, t.Python, filepath.Join(t.Scripts, "bench_mpi.py"), "--tag", "tcp")
			return []hostCmd{{Host: 0, Argv: append(argv, p.anchorFlags(out)...)}}
		},
	},
}

// godistOnHosts is godist run on every host of l (static rendezvous at
// node0, a fresh job token) running program with its args; GODIST_YIELD=1
// where the lab has more ranks than CPUs, as mpi_yield_when_idle for
// OpenMPI (see lab.oversubscribed).
func godistOnHosts(t tools, l *lab, port int, program ...string) []hostCmd {
	tok := make([]byte, 16)
	rand.Read(tok)
	env := []string{"GODIST_TOKEN=" + hex.EncodeToString(tok)}
	if l.oversubscribed() {
		env = append(env, "GODIST_YIELD=1")
	}
	env = append(env, t.GodistEnv...)
	var cmds []hostCmd
	for i := range l.cfg.Hosts {
		argv := []string{t.Godist, "run",
			"--nnodes", strconv.Itoa(l.cfg.Hosts), "--node-rank", strconv.Itoa(i),
			"--master-addr", l.c.Host(0).Addr.String(), "--master-port", strconv.Itoa(port),
			"--nproc-per-node", strconv.Itoa(l.cfg.PerHost)}
		cmds = append(cmds, hostCmd{Host: i, Env: env, Argv: append(argv, program...)})
	}
	return cmds
}

// torchrunOnHosts is torchrun on every host of l (static rendezvous at
// node0, gloo on eth0, one thread a rank) running script with its args.
func torchrunOnHosts(t tools, l *lab, port int, script ...string) []hostCmd {
	env := []string{"GLOO_SOCKET_IFNAME=eth0", "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"}
	var cmds []hostCmd
	for i := range l.cfg.Hosts {
		argv := []string{t.Python, "-m", "torch.distributed.run", // torchrun
			"--nnodes", strconv.Itoa(l.cfg.Hosts), "--node_rank", strconv.Itoa(i),
			"--nproc_per_node", strconv.Itoa(l.cfg.PerHost), "--rdzv_backend", "static",
			"--master_addr", l.c.Host(0).Addr.String(), "--master_port", strconv.Itoa(port),
			// torch 1.13's torchrun crashes under Python 3.11 without these.
			"--redirects", "1", "--tee", "1"}
		cmds = append(cmds, hostCmd{Host: i, Env: env, Argv: append(argv, script...)})
	}
	return cmds
}

// torchVersion returns "torch VERSION", or why t.Python cannot run
// torchrun.
func torchVersion(t tools) (version, missing string) {
	v, err := exec.Command(t.Python, "-c", "import torch, torch.distributed.run; print('torch', torch.__version__)").Output()
	if err != nil {
		return "", fmt.Sprintf("%s cannot import torch and torchrun's torch.distributed.run (Debian: python3-torch)", t.Python)
	}
	return strings.TrimSpace(string(v)), ""
}

// selectBenches returns the benchmarks named in the comma-separated list,
// in benches' order.
func selectBenches(list string) ([]bench, error) {
	var names []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if !slices.ContainsFunc(benches, func(b bench) bool { return b.Name == n }) {
			return nil, fmt.Errorf("unknown benchmark %q (known: godist,gloo,mpitcp)", n)
		}
		names = append(names, n)
	}
	var out []bench
	for _, b := range benches {
		if slices.Contains(names, b.Name) {
			out = append(out, b)
		}
	}
	return out, nil
}

// lab is one cluster of hosts and the runs on it.
type lab struct {
	cfg  labConfig
	c    *clustertest.Cluster
	runs int // runs so far: each takes the next master port
}

// oversubscribed reports whether the lab has more ranks than CPUs: more
// on a host than it has, or more in all than the hosts' CPUs together
// (hosts that share CPUs). A rank there that polls for progress takes the
// CPU another rank needs, so each benchmark is told not to, as it does
// itself when it can see it (OpenMPI when it knows it is oversubscribed,
// godist when a host runs more ranks than it has CPUs): a rank cannot
// see that the CPUs it was given are another host's too.
func (l *lab) oversubscribed() bool {
	cpus := map[int]bool{}
	for _, h := range l.c.Hosts() {
		n := len(h.CPUs)
		if n == 0 {
			n = runtime.NumCPU()
			for c := range n {
				cpus[c] = true
			}
		}
		for _, c := range h.CPUs {
			cpus[c] = true
		}
		if n < l.cfg.PerHost {
			return true
		}
	}
	return l.cfg.World() > len(cpus)
}

// measure runs b once on the lab, bounded by p.Timeout, and returns its
// results; it writes the raw JSON to out. Whatever the run leaves on the
// hosts is killed before it returns.
func (l *lab) measure(ctx context.Context, b bench, t tools, p params, out string) ([]cell, error) {
	port := 29500 + l.runs%500 // a fresh port each run: no TIME_WAIT in the way
	l.runs++
	os.Remove(out)
	stdout, err := l.run(ctx, b.Cmds(t, l, p, port, out), p.Timeout)
	if err != nil {
		return nil, err
	}
	if b.StdoutJSON {
		if err := os.WriteFile(out, stdout, 0o644); err != nil {
			return nil, err
		}
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("it ended well but left no results: %w", err)
	}
	cells, err := parseCells(raw)
	if err == nil && len(cells) == 0 {
		err = errors.New("no results in " + out)
	}
	return cells, err
}

// run starts cmds on their hosts (the last host first: node0 serves the
// rendezvous, and the others wait for it), waits for all of them, and
// returns the first command's stdout. When one fails, or timeout passes,
// or ctx ends, the others are killed; the error then carries the end of
// each command's output. Everything the commands left on the hosts is
// killed before run returns.
func (l *lab) run(ctx context.Context, cmds []hostCmd, timeout time.Duration) ([]byte, error) {
	defer l.sweep()
	rctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("still running after --timeout %v: killed", timeout))
	defer cancel()
	base := cleanEnv()
	type proc struct {
		cmd    *exec.Cmd
		stdout *bytes.Buffer
		tail   *tailbuf.Buffer
	}
	procs := make([]proc, len(cmds))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	for k := len(cmds) - 1; k >= 0; k-- {
		hc := cmds[k]
		name := l.c.Host(hc.Host).Name
		cmd := l.c.Command(rctx, hc.Host, hc.Argv[0], hc.Argv[1:]...)
		cmd.Env = append(slices.Clone(base), hc.Env...)
		// The launcher's children share its group: ctx's end kills them
		// all (and sweep whatever left the group).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		p := proc{cmd: cmd, stdout: new(bytes.Buffer), tail: &tailbuf.Buffer{Max: 3000}}
		if k == 0 {
			cmd.Stdout = io.MultiWriter(p.stdout, p.tail)
		} else {
			cmd.Stdout = p.tail
		}
		cmd.Stderr = p.tail
		procs[k] = p
		if err := cmd.Start(); err != nil {
			fail(fmt.Errorf("%s on %s: %w", filepath.Base(hc.Argv[0]), name, err))
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Wait(); err != nil {
				fail(fmt.Errorf("%s on %s: %w", filepath.Base(hc.Argv[0]), name, err))
			}
		}()
	}
	wg.Wait()
	if cause := context.Cause(rctx); ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		first = cause
	}
	if first == nil {
		return procs[0].stdout.Bytes(), nil
	}
	var sb strings.Builder
	sb.WriteString(first.Error())
	for k, p := range procs {
		if p.cmd == nil {
			continue
		}
		if s := strings.TrimSpace(p.tail.String()); s != "" {
			fmt.Fprintf(&sb, "\n  the end of %s's output on %s:\n    %s", filepath.Base(cmds[k].Argv[0]),
				l.c.Host(cmds[k].Host).Name, strings.ReplaceAll(s, "\n", "\n    "))
		}
	}
	return nil, errors.New(sb.String())
}

// sweep kills every process left on the lab's hosts (in one of their
// network namespaces) but the processes that hold the namespaces, until
// none is left or 10 s have passed: a launcher's worker, an orted or a
// Python rank that outlived its run must not run into the next.
func (l *lab) sweep() {
	holders := map[int]bool{}
	nets := map[string]bool{}
	for _, h := range l.c.Hosts() {
		holders[h.PID] = true
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", h.PID)); err == nil {
			nets[ns] = true
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var left []int
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || holders[pid] {
				continue
			}
			if ns, err := os.Readlink("/proc/" + e.Name() + "/ns/net"); err == nil && nets[ns] {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return
		}
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cleanEnv is this process's environment without any launcher's
// variables, so that no benchmark takes hostcmp's surroundings for its
// job.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GODIST_") || strings.HasPrefix(k, "PET_") || strings.HasPrefix(k, "TORCHELASTIC_") ||
			strings.HasPrefix(k, "OMPI_") || strings.HasPrefix(k, "PMIX_") || strings.HasPrefix(k, "SLURM_") ||
			slices.Contains([]string{"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"}, k) {
			continue
		}
		env = append(env, kv)
	}
	return env
}
