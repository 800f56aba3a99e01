package main

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// spec is what every benchmark of one distcmp run is given.
type spec struct {
	Sizes    string // comma-separated bytes
	Target   time.Duration
	MinIters int
	MaxIters int
	Warmup   int

	Godist  string // the godist binary
	Python  string // Python with torch, mpi4py and numpy
	Mpirun  string
	Anchors string // directory holding bench_gloo.py and bench_mpi.py
}

// anchorOps are the ops bench_gloo.py and bench_mpi.py know.
var anchorOps = []string{"all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier"}

// peer is one benchmark distcmp can run at a world size.
type peer struct {
	Name  string // its --peers name
	Label string // its column heading
	// Ops are the ops it measures; nil: all.
	Ops []string
	// Argv is the command that measures ops at world size w and writes
	// its JSON to out.
	Argv func(s spec, w int, ops []string, out string) []string
	// JSONOnStdout: the command prints its JSON instead (Argv ignores
	// out).
	JSONOnStdout bool
	// Probe says why it cannot run here ("" if it can) and, if it can,
	// the versions it runs with.
	Probe func(s spec) (versions, missing string)
}

// peers are distcmp's benchmarks in the order they run and their columns
// appear.
var peers = []peer{
	{
		Name: "godist", Label: "godist", JSONOnStdout: true,
		Argv: func(s spec, w int, ops []string, _ string) []string {
			return []string{s.Godist, "bench", "--json", "--nproc", strconv.Itoa(w),
				"--ops", strings.Join(ops, ","), "--sizes", s.Sizes, "--target", s.Target.String(),
				"--iters", strconv.Itoa(s.MaxIters), "--min-iters", strconv.Itoa(s.MinIters),
				"--warmup", strconv.Itoa(s.Warmup)}
		},
		Probe: func(s spec) (string, string) {
			v, err := exec.Command(s.Godist, "version").Output()
			if err != nil {
				return "", fmt.Sprintf("%s version: %v", s.Godist, err)
			}
			return strings.Join(strings.Fields(string(v)), " "), ""
		},
	},
	mpiPeer("vader", "mpi-vader", "self,vader"),
	mpiPeer("mpitcp", "mpi-tcp", "self,tcp", "--mca", "btl_tcp_if_include", "lo"),
	{
		Name: "gloo", Label: "gloo", Ops: anchorOps,
		Argv: func(s spec, w int, ops []string, out string) []string {
			return append([]string{s.Python, s.Anchors + "/bench_gloo.py", "--world", strconv.Itoa(w)},
				anchorFlags(s, ops, out)...)
		},
		Probe: func(s spec) (string, string) {
			if _, err := os.Stat(s.Anchors + "/bench_gloo.py"); err != nil {
				return "", fmt.Sprintf("no bench_gloo.py: %v (--anchors)", err)
			}
			v, err := exec.Command(s.Python, "-c", "import torch; print('torch', torch.__version__)").Output()
			if err != nil {
				return "", fmt.Sprintf("%s cannot import torch (Debian: python3-torch)", s.Python)
			}
			return strings.TrimSpace(string(v)), ""
		},
	},
}

// mpiPeer is bench_mpi.py under mpirun with ob1 over the BTLs btl and any
// further MCA flags: one process per rank, unbound like godist's and
// gloo's (run_all.sh's --bind-to none), oversubscribed when the ranks
// outnumber the cores.
func mpiPeer(name, label, btl string, mca ...string) peer {
	tag := strings.TrimPrefix(label, "mpi-")
	return peer{
		Name: name, Label: label, Ops: anchorOps,
		Argv: func(s spec, w int, ops []string, out string) []string {
			argv := []string{s.Mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
				"-n", strconv.Itoa(w), "--mca", "pml", "ob1", "--mca", "btl", btl}
			argv = append(argv, mca...)
			argv = append(argv, s.Python, s.Anchors+"/bench_mpi.py", "--tag", tag)
			return append(argv, anchorFlags(s, ops, out)...)
		},
		Probe: probeMPI,
	}
}

// anchorFlags are the flags bench_gloo.py and bench_mpi.py share.
func anchorFlags(s spec, ops []string, out string) []string {
	return []string{"--ops", strings.Join(ops, ","), "--sizes", s.Sizes,
		"--target", strconv.FormatFloat(s.Target.Seconds(), 'g', -1, 64),
		"--max-iters", strconv.Itoa(s.MaxIters), "--min-iters", strconv.Itoa(s.MinIters),
		"--warmup", strconv.Itoa(s.Warmup), "--out", out}
}

func probeMPI(s spec) (string, string) {
	if s.Mpirun == "" {
		return "", "no mpirun on PATH (Debian: openmpi-bin)"
	}
	if _, err := os.Stat(s.Anchors + "/bench_mpi.py"); err != nil {
		return "", fmt.Sprintf("no bench_mpi.py: %v (--anchors)", err)
	}
	v, err := exec.Command(s.Python, "-c", "import mpi4py, numpy; print('mpi4py', mpi4py.__version__)").Output()
	if err != nil {
		return "", fmt.Sprintf("%s cannot import mpi4py and numpy (Debian: python3-mpi4py)", s.Python)
	}
	mv, _ := exec.Command(s.Mpirun, "--version").Output()
	first, _, _ := strings.Cut(string(mv), "\n")
	return strings.TrimSpace(first) + ", " + strings.TrimSpace(string(v)), ""
}

// selectPeers returns the peers named in the comma-separated list, in
// peers' order.
func selectPeers(list string) ([]peer, error) {
	names := strings.Split(list, ",")
	for i, n := range names {
		names[i] = strings.TrimSpace(n)
		if !slices.ContainsFunc(peers, func(p peer) bool { return p.Name == names[i] }) {
			return nil, fmt.Errorf("unknown peer %q (peers: godist,vader,mpitcp,gloo)", names[i])
		}
	}
	var out []peer
	for _, p := range peers {
		if slices.Contains(names, p.Name) {
			out = append(out, p)
		}
	}
	return out, nil
}

// opsFor returns the ops of want that p measures, in want's order.
func opsFor(p peer, want []string) []string {
	if p.Ops == nil {
		return want
	}
	var out []string
	for _, op := range want {
		if slices.Contains(p.Ops, op) {
			out = append(out, op)
		}
	}
	return out
}
