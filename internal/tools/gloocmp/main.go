// Command gloocmp runs godist bench and PyTorch's gloo benchmark
// (shared/anchors/bench_gloo.py) one after the other on this machine, for
// each world size, and prints one markdown table per op comparing the two
// medians (speedup = gloo / godist) and bus bandwidths.
//
//	go run ./internal/tools/gloocmp                     # worlds 2 and 4
//	go run ./internal/tools/gloocmp --worlds 2 --target 0.5s --max-iters 200
//
// Both benchmarks use the same method (barrier; t0; op; t1, the max over
// ranks, the median over iterations), sizes and iteration policy; the flags
// below are passed to both. Run it on a quiet machine: the two are compared
// as a ratio because the machine is shared.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cell is the part of a result (godist's and bench_gloo.py's JSON share
// the keys) that the comparison needs.
type cell struct {
	Op          string  `json:"op"`
	Size        int     `json:"size"`
	Bytes       int     `json:"bytes"`
	Supported   *bool   `json:"supported"`
	Error       string  `json:"error"`
	Iters       int     `json:"iters"`
	LatUsMedian float64 `json:"lat_us_median"`
	BusbwGBps   float64 `json:"busbw_GBps"`
	Algo        string  `json:"algo"`
}

func main() {
	worlds := flag.String("worlds", "2,4", "comma-separated world sizes")
	ops := flag.String("ops", "all_reduce,broadcast,all_gather,reduce_scatter,barrier", "ops, as bench_gloo.py names them")
	sizes := flag.String("sizes", "8,1024,65536,1048576,16777216,67108864", "message sizes in bytes (bench_gloo.py's default)")
	target := flag.Duration("target", time.Second, "time budget per size, for both benchmarks")
	maxIters := flag.Int("max-iters", 300, "most timed iterations per size, for both")
	minIters := flag.Int("min-iters", 10, "fewest timed iterations per size, for both")
	warmup := flag.Int("warmup", 5, "warm-up iterations per size, for both")
	godistBin := flag.String("godist", "", "godist binary (default: go build ./cmd/godist into a temporary directory)")
	python := flag.String("python", "/usr/bin/python3", "Python with torch (Debian's python3-torch)")
	script := flag.String("script", "/work/shared/anchors/bench_gloo.py", "bench_gloo.py")
	keep := flag.String("keep", "", "directory to keep both benchmarks' JSON in")
	flag.Parse()

	dir, err := os.MkdirTemp("", "gloocmp")
	check(err)
	defer os.RemoveAll(dir)
	if *keep != "" {
		check(os.MkdirAll(*keep, 0o755))
		dir = *keep
	}
	bin := *godistBin
	if bin == "" {
		bin = filepath.Join(dir, "godist")
		fmt.Fprintln(os.Stderr, "gloocmp: go build ./cmd/godist")
		build := exec.Command("go", "build", "-o", bin, "github.com/godist/godist/cmd/godist")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		check(build.Run())
	}
	version, _ := exec.Command(bin, "version").Output()
	fmt.Printf("gloocmp: %s, godist bench vs %s %s, target %v, iterations %d..%d, warm-up %d\n\n```\n%s```\n",
		time.Now().UTC().Format(time.RFC3339), *python, filepath.Base(*script), *target, *minIters, *maxIters, *warmup, version)
	for _, ws := range strings.Split(*worlds, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(ws))
		check(err)
		gout := filepath.Join(dir, fmt.Sprintf("godist_w%d.json", w))
		fmt.Fprintf(os.Stderr, "gloocmp: godist bench, world %d\n", w)
		g := exec.Command(bin, "bench", "--json", "--nproc", strconv.Itoa(w), "--ops", *ops, "--sizes", *sizes,
			"--target", target.String(), "--iters", strconv.Itoa(*maxIters), "--min-iters", strconv.Itoa(*minIters),
			"--warmup", strconv.Itoa(*warmup))
		g.Stderr = os.Stderr
		t0 := time.Now()
		raw, err := g.Output()
		check(err)
		check(os.WriteFile(gout, raw, 0o644))
		var rep struct{ Results []cell }
		check(json.Unmarshal(raw, &rep))
		gdur := time.Since(t0)

		pout := filepath.Join(dir, fmt.Sprintf("gloo_w%d.json", w))
		fmt.Fprintf(os.Stderr, "gloocmp: bench_gloo.py, world %d\n", w)
		p := exec.Command(*python, *script, "--world", strconv.Itoa(w), "--ops", *ops, "--sizes", *sizes,
			"--target", strconv.FormatFloat(target.Seconds(), 'g', -1, 64), "--max-iters", strconv.Itoa(*maxIters),
			"--min-iters", strconv.Itoa(*minIters), "--warmup", strconv.Itoa(*warmup), "--out", pout)
		p.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "GLOO_SOCKET_IFNAME=lo")
		var perr bytes.Buffer
		p.Stdout, p.Stderr = &perr, &perr
		t0 = time.Now()
		if err := p.Run(); err != nil {
			os.Stderr.Write(perr.Bytes())
			check(err)
		}
		pdur := time.Since(t0)
		praw, err := os.ReadFile(pout)
		check(err)
		var gloo []cell
		check(json.Unmarshal(praw, &gloo))
		fmt.Printf("\n### world %d (godist run %.0f s, gloo run %.0f s)\n", w, gdur.Seconds(), pdur.Seconds())
		printTables(strings.Split(*ops, ","), rep.Results, gloo)
	}
}

func printTables(ops []string, godist, gloo []cell) {
	for _, op := range ops {
		var rows []string
		for _, g := range godist {
			if g.Op != op {
				continue
			}
			size := "-"
			if op != "barrier" {
				size = formatSize(g.Bytes)
			}
			gl, ok := find(gloo, op, g.Size)
			glMed, speed, glBus := "-", "-", "-"
			switch {
			case !ok:
			case gl.Supported != nil && !*gl.Supported:
				glMed = "unsupported"
			default:
				glMed = fmt.Sprintf("%.1f", gl.LatUsMedian)
				speed = fmt.Sprintf("%.2fx", gl.LatUsMedian/g.LatUsMedian)
				if op != "barrier" {
					glBus = fmt.Sprintf("%.3f", gl.BusbwGBps)
				}
			}
			gBus := "-"
			if op != "barrier" {
				gBus = fmt.Sprintf("%.3f", g.BusbwGBps)
			}
			rows = append(rows, fmt.Sprintf("| %s | %.1f | %s | %s | %s | %s | %s |", size, g.LatUsMedian, glMed, speed, gBus, glBus, g.Algo))
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Printf("\n#### %s\n\n| size | godist median us | gloo median us | speedup (gloo/godist) | godist busbw GB/s | gloo busbw GB/s | godist algo |\n|---|---|---|---|---|---|---|\n%s\n",
			op, strings.Join(rows, "\n"))
	}
}

func find(cs []cell, op string, size int) (cell, bool) {
	for _, c := range cs {
		if c.Op == op && (c.Size == size || op == "barrier") {
			return c, true
		}
	}
	return cell{}, false
}

// formatSize is the anchors' (and godist bench's) size format.
func formatSize(b int) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.6g MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.6g KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

func check(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "gloocmp: %v\n", err)
		os.Exit(1)
	}
}
