// Command distcmp runs godist bench and its peers one after the other on
// this machine, for each world size, and prints one markdown table per
// (world, op): each one's median latency, each peer's median over godist's
// (above 1, godist is faster) and, from 1 MiB, the bus bandwidths.
//
// The peers are the anchors' scripts, kept in tools/peers (a copy
// of the team's shared/anchors) and carried in this binary: bench_mpi.py under
// OpenMPI's mpirun with shared memory (ob1 over the vader BTL) and with
// loopback TCP (ob1 over the tcp BTL), and bench_gloo.py with PyTorch's
// gloo.
//
//	go run ./tools/distcmp                     # worlds 2 and 4, every peer
//	go run ./tools/distcmp --worlds 2 --target 0.3s --peers godist,vader
//	go run ./tools/distcmp --peers godist,vader --rounds 5   # interleaved
//
// With --rounds N every benchmark runs N times per world, in an order
// that rotates from round to round; each table entry is then the median
// of the rounds' medians with their spread (the slowest round's median
// over the fastest's) in parentheses, and a summary under the tables
// counts the cells where godist's median is at or below each peer's and
// names godist's cells whose spread exceeds 1.5×.
//
// All use the same method (barrier; t0; op; t1, the max over ranks, the
// median over iterations), sizes and iteration policy; the flags below are
// passed to each. A peer that cannot run here (no mpirun, no mpi4py, no
// torch) is skipped with a line saying why; one that fails is reported and
// the rest go on. Run it on a quiet machine: they are compared as ratios
// because the machine is shared.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	peerscripts "github.com/godist/godist/tools/peers"
)

func main() {
	worlds := flag.String("worlds", "2,4", "comma-separated world sizes")
	peerList := flag.String("peers", "godist,vader,mpitcp,gloo", "benchmarks to run: godist, vader (OpenMPI shared memory), mpitcp (OpenMPI loopback TCP), gloo (PyTorch)")
	ops := flag.String("ops", strings.Join(anchorOps, ","), "ops, as the anchors name them (godist bench also knows all_to_all)")
	sizes := flag.String("sizes", "8,1024,65536,1048576,16777216,67108864", "message sizes in bytes (the anchors' default)")
	target := flag.Duration("target", time.Second, "time budget per size, for each benchmark")
	maxIters := flag.Int("max-iters", 300, "most timed iterations per size, for each")
	minIters := flag.Int("min-iters", 10, "fewest timed iterations per size, for each")
	warmup := flag.Int("warmup", 5, "warm-up iterations per size, for each")
	timeout := flag.Duration("timeout", 15*time.Minute, "limit for one benchmark at one world size; it is killed when it passes")
	godistBin := flag.String("godist", "", "godist binary (default: go build ./cmd/godist into a temporary directory)")
	python := flag.String("python", "/usr/bin/python3", "Python with torch (python3-torch) and mpi4py (python3-mpi4py)")
	anchors := flag.String("anchors", "", "directory holding bench_gloo.py and bench_mpi.py (default: the copies in tools/peers, which this binary carries)")
	keep := flag.String("keep", "", "directory to keep every benchmark's JSON in")
	corelat := flag.Bool("corelat", true, "record the CPUs' cache-line round trip (tools/corelat) before and after every benchmark, and with several rounds give godist's spread over the rounds run with the vCPUs near each other too")
	rounds := flag.Int("rounds", 1, "rounds: each runs every benchmark once per world, in an order that rotates from round to round; the tables give the median of the rounds' medians and, in parentheses, their spread (slowest over fastest)")
	flag.Parse()

	if *rounds < 1 {
		check(errors.New("want --rounds >= 1"))
	}
	sel, err := selectPeers(*peerList)
	check(err)
	dir, err := os.MkdirTemp("", "distcmp")
	check(err)
	defer os.RemoveAll(dir)
	if *anchors == "" {
		*anchors, err = peerscripts.Write(filepath.Join(dir, "peers"))
		check(err)
	}
	if *keep != "" {
		check(os.MkdirAll(*keep, 0o755))
		dir = *keep
	}
	s := spec{Sizes: *sizes, Target: *target, MinIters: *minIters, MaxIters: *maxIters, Warmup: *warmup,
		Godist: *godistBin, Python: *python, Anchors: *anchors}
	s.Mpirun, _ = exec.LookPath("mpirun")
	if s.Godist == "" {
		s.Godist = filepath.Join(dir, "godist")
		fmt.Fprintln(os.Stderr, "distcmp: go build ./cmd/godist")
		check(goBuild(s.Godist, "github.com/godist/godist/cmd/godist"))
	}
	var lat string // the corelat binary
	if *corelat {
		lat = filepath.Join(dir, "corelat")
		if err := goBuild(lat, "github.com/godist/godist/tools/corelat"); err != nil {
			fmt.Fprintf(os.Stderr, "distcmp: no corelat (%v): placements not recorded\n", err)
			lat = ""
		}
	}

	fmt.Printf("distcmp: %s, target %v, iterations %d..%d, warm-up %d, %d round(s)\n\n",
		time.Now().UTC().Format(time.RFC3339), *target, *minIters, *maxIters, *warmup, *rounds)
	var run []peer
	for _, p := range sel {
		versions, missing := p.Probe(s)
		if missing != "" {
			fmt.Printf("- skipping %s: %s\n", p.Label, missing)
			continue
		}
		fmt.Printf("- %s: %s\n", p.Label, versions)
		run = append(run, p)
	}
	fmt.Println("\npeer/godist is the peer's median latency over godist's: above 1, godist is faster.")

	failed := false
	opList := strings.Split(*ops, ",")
	for _, ws := range strings.Split(*worlds, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(ws))
		check(err)
		base := column{Label: "godist"}
		var cols []column
		var notes []string
		took := make([]float64, len(run))
		results := make([][][]cell, len(run)) // by peer, by round
		places := make([][]placement, len(run))
		for r := range *rounds {
			for _, i := range roundOrder(len(run), r) {
				p := run[i]
				pops := opsFor(p, opList)
				if len(pops) == 0 {
					continue
				}
				out := filepath.Join(dir, fmt.Sprintf("%s_w%d_r%d.json", p.Label, w, r+1))
				fmt.Fprintf(os.Stderr, "distcmp: %s, world %d, round %d\n", p.Label, w, r+1)
				before := roundTrip(lat)
				t0 := time.Now()
				cells, err := measure(p, s, w, pops, out, *timeout)
				if err != nil {
					failed = true
					notes = append(notes, fmt.Sprintf("- %s failed at world %d, round %d: %v", p.Label, w, r+1, err))
					continue
				}
				took[i] += time.Since(t0).Seconds()
				pl := placement{before, roundTrip(lat)}
				results[i] = append(results[i], cells)
				places[i] = append(places[i], pl)
			}
		}
		var tooks []string
		for i, p := range run {
			if len(results[i]) == 0 {
				continue
			}
			tooks = append(tooks, fmt.Sprintf("%s %.0f s", p.Label, took[i]))
			cells := mergeRounds(results[i])
			if p.Name == "godist" {
				base.Cells = cells
			} else {
				cols = append(cols, column{Label: p.Label, Cells: cells})
			}
		}
		fmt.Printf("\n### world %d (%s)\n", w, strings.Join(tooks, ", "))
		if len(notes) > 0 {
			fmt.Printf("\n%s\n", strings.Join(notes, "\n"))
		}
		fmt.Print(renderTables(opList, base, cols))
		if v := verdict(opList, base, cols); v != "" && len(base.Cells) > 0 {
			fmt.Printf("\n%s", v)
		}
		for i, p := range run {
			if p.Name == "godist" && lat != "" && len(results[i]) > 1 {
				fmt.Print(placementNote(results[i], places[i]))
			}
		}
	}
	if failed {
		os.Exit(1)
	}
}

// measure runs p at world size w and returns its results, which it also
// leaves in out. On a failure, the end of p's output goes to stderr.
func measure(p peer, s spec, w int, ops []string, out string, timeout time.Duration) ([]cell, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	argv := p.Argv(s, w, ops, out)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// The ranks are its children: a timeout kills its whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "GLOO_SOCKET_IFNAME=lo")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after %v: %w", timeout, ctx.Err())
	}
	if err != nil {
		os.Stderr.Write(tail(append(stdout.Bytes(), stderr.Bytes()...), 4000))
		return nil, fmt.Errorf("%s: %w (its output's end is on stderr)", filepath.Base(argv[0]), err)
	}
	if p.JSONOnStdout {
		if err := os.WriteFile(out, stdout.Bytes(), 0o644); err != nil {
			return nil, err
		}
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	cells, err := parseCells(raw)
	if err == nil && len(cells) == 0 {
		err = errors.New("no results in " + out)
	}
	return cells, err
}

// goBuild builds package pkg into out, its output on stderr.
func goBuild(out, pkg string) error {
	build := exec.Command("go", "build", "-o", out, pkg)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return build.Run()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func check(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "distcmp: %v\n", err)
		os.Exit(1)
	}
}
