// Command hostcmp measures collectives across hosts, godist beside its
// peers in one run: for each lab configuration (hosts × ranks per host at
// a link rate) it makes the hosts, runs godist (godist run on each host,
// godist bench --worker as the ranks), PyTorch's gloo (torchrun on each
// host, bench_gloo.py) and OpenMPI over TCP (mpirun across the hosts,
// bench_mpi.py with ob1 over tcp,vader,self: TCP between hosts, shared
// memory within one) in interleaved rounds whose order rotates, and
// prints one markdown table per op: each one's median latency over the
// rounds with their range, each peer's over godist's (above 1, godist is
// faster), the bus bandwidths, and for all_reduce the two-level bound and
// godist's share of it.
//
//	go run ./tools/hostcmp                                   # 2x2@1G, 4x1@1G, 2x2@10G
//	go run ./tools/hostcmp --configs 2x2@1G --target 0.5s --ops all_reduce
//	make bench-hosts HOSTCMP_FLAGS='--target 0.5s --rounds 2'
//
// All use the same method as godist bench and the anchors (per iteration
// barrier; t0; op; t1, the max over ranks, the median over iterations,
// the iterations filling --target per cell within [--min-iters,
// --max-iters]), float32, and the same sizes.
//
// # The lab
//
// The hosts are tools/clustertest's, made on this machine as root:
// each host is a network namespace with its own eth0 (a veth to a bridge
// in a switch namespace, shaped both ways to the configuration's rate by
// tbf, so a TCP payload gets about 95% of it), its own /dev/shm (godist
// and OpenMPI see the other hosts' ranks as remote and share memory only
// within a host), its own hostname and /etc/hosts naming node0, node1...,
// and its own CPUs: the CPUs this process may use divided among the hosts,
// or, when there are fewer CPUs than hosts, shared round robin (the output
// says so: 4 hosts on 2 CPUs contend as real hosts would not). Every host
// sees this machine's files, so the binaries and scripts run from a
// temporary directory. Each lab is closed (its processes killed, its
// namespaces gone) before the next is made, and anything a run leaves on
// the hosts is killed before the next run starts.
//
// A benchmark that cannot run here (no torch, no mpirun or mpi4py) is
// skipped with a line saying why, and everything is skipped when this
// process cannot make hosts (clustertest.Available: not root, or no
// namespaces); one that fails or passes --timeout is killed and reported
// with the end of its output, and the rest go on. --json DIR keeps every
// run's raw JSON.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/godist/godist/tools/clustertest"
	"github.com/godist/godist/tools/peers"
)

func main() {
	configs := flag.String("configs", "2x2@1G,4x1@1G,2x2@10G", "lab configurations, comma-separated HOSTSxRANKS@RATE: 2x2@1G is 2 hosts of 2 ranks each on 1 Gbit/s links (rates in bits per second, K, M, G: powers of 1000; HxR alone: unshaped)")
	peerList := flag.String("peers", "godist,gloo,mpitcp", "benchmarks to run: godist, gloo (PyTorch under torchrun), mpitcp (OpenMPI under mpirun, TCP between hosts)")
	ops := flag.String("ops", strings.Join(knownOps, ","), "ops to measure")
	sizes := flag.String("sizes", "8,1KiB,64KiB,1MiB,16MiB,64MiB", "message sizes (B, KiB, MiB: the anchors' by default); all_gather's is the total over ranks")
	rounds := flag.Int("rounds", 2, "rounds: each runs every benchmark once, in an order that rotates from round to round")
	target := flag.Duration("target", time.Second, "time budget per (op, size), for each benchmark")
	maxIters := flag.Int("max-iters", 300, "most timed iterations per (op, size)")
	commonStart := flag.Int("common-start", 40, "godist's iterations per (op, size), after the timed ones, that every rank starts at one instant of the machine's clock (godist bench --common-start): the time its cost model predicts, shown as pred/common; 0: none")
	minIters := flag.Int("min-iters", 10, "fewest timed iterations per (op, size)")
	warmup := flag.Int("warmup", 5, "warm-up iterations per (op, size)")
	warmupJob := flag.Int("warmup-job", 1000, "warm-up iterations of a barrier and a 4-byte all_reduce before each benchmark's first cell (a job's first calls touch fresh memory: see godist bench --warmup-job)")
	timeout := flag.Duration("timeout", 10*time.Minute, "limit for one benchmark's run on one lab; it is killed when it passes")
	godistBin := flag.String("godist", "", "godist binary (default: go build ./cmd/godist into a temporary directory)")
	python := flag.String("python", "/usr/bin/python3", "Python with torch (python3-torch), mpi4py and numpy (python3-mpi4py)")
	jsonDir := flag.String("json", "", "directory to keep every run's raw JSON in")
	train := flag.String("train", "", "instead of the collectives, DDP training of these models (mlp, lenet, gpt, gpt-auto, gpt-fsdp, gpt-hybrid; comma-separated): examples/ddp-fashion-mnist or examples/tinygpt (DDP, DDP with buckets sized for the link, FSDP, hybrid sharding) under godist run beside PyTorch DDP over gloo (train_ddp.py, gpt_twin.py) under torchrun, each host pinned to one CPU; --configs then defaults to "+trainConfigs)
	gptSteps := flag.Int("gpt-steps", 40, "with --train gpt, the steps of each GPT run")
	pipe := flag.Bool("pipeline", false, "instead of the collectives, examples/pipeline-gpt in three layouts (data parallel; stages across hosts; stages inside hosts), measured step time beside the schedule simulator's prediction; --configs then defaults to "+pipelineConfigs)
	pipeSteps := flag.Int("pipeline-steps", 30, "with --pipeline, the steps of each run")
	trainSteps := flag.Int("train-steps", 300, "with --train, the steps of each run")
	targetAcc := flag.Float64("target-acc", 0, "with --train, run each until its test accuracy (taken every --eval-every steps) reaches this, at most --train-epochs epochs, and report the time to it")
	evalEvery := flag.Int("eval-every", 25, "with --target-acc, steps between evaluations")
	trainEpochs := flag.Int("train-epochs", 3, "with --target-acc, the most epochs a run trains")
	overlap := flag.Bool("overlap", false, "with --train, also run godist without overlap (--no-overlap) and both sides unsynced (compute alone) on the labs of several hosts, and print how much communication overlap hides")
	bucketMB := flag.Float64("bucket-cap-mb", 0, "with --train, DDP's bucket cap in MiB on both sides (godist's first bucket too; PyTorch 1.13 keeps its first at 1 MiB); 0 leaves each its default (25, the first 1)")
	hooks := flag.String("hooks", "allreduce", "with --train, DDP's communication hooks to run each model with (comma-separated: allreduce, fp16, bf16, powersgd:R); one-host labs run only allreduce")
	load := flag.Int("load", 0, "processes that run `sha256sum /dev/zero` at this one's priority for the whole measurement, as issue 33's busy machine (one a CPU: 2 here); 0: none")
	godistEnv := flag.String("godist-env", "", "variables added to every godist run's environment after the lab's own, space-separated (\"GODIST_YIELD=0 GODIST_ALGO=all_reduce=ring\"): to compare settings in the lab")
	flag.Parse()
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "hostcmp: %v\n", err)
		os.Exit(2)
	}
	if *train != "" || *pipe {
		set := false
		flag.Visit(func(f *flag.Flag) { set = set || f.Name == "configs" })
		if !set {
			*configs = trainConfigs
			if *pipe {
				*configs = pipelineConfigs
			}
		}
	}
	if *train != "" && *pipe {
		fail(errors.New("--train and --pipeline: one at a time"))
	}
	labs, err := parseConfigs(*configs)
	if err != nil {
		fail(fmt.Errorf("--configs: %w", err))
	}
	p := params{Target: *target, MinIters: *minIters, MaxIters: *maxIters, Warmup: *warmup, WarmupJob: *warmupJob, CommonStart: *commonStart, Timeout: *timeout}
	if p.Ops, err = parseOps(*ops); err != nil {
		fail(fmt.Errorf("--ops: %w", err))
	}
	if p.Sizes, err = parseSizes(*sizes); err != nil {
		fail(fmt.Errorf("--sizes: %w", err))
	}
	sel, err := selectBenches(*peerList)
	if err != nil {
		fail(fmt.Errorf("--peers: %w", err))
	}
	if *rounds < 1 || *minIters < 1 || *maxIters < 1 || *warmup < 0 || *warmupJob < 0 || *commonStart < 0 || *target < 0 || *timeout <= 0 {
		fail(fmt.Errorf("want --rounds >= 1, --min-iters >= 1, --max-iters >= 1, --warmup >= 0, --warmup-job >= 0, --common-start >= 0, --target >= 0 and --timeout > 0"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch {
	case *train != "":
		fmt.Printf("hostcmp --train: %s, %d round(s), timeout %v per run\n\n", time.Now().UTC().Format(time.RFC3339), *rounds, *timeout)
	case *pipe:
		fmt.Printf("hostcmp --pipeline: %s, %d round(s) of %d steps, timeout %v per run\n\n", time.Now().UTC().Format(time.RFC3339), *rounds, *pipeSteps, *timeout)
	default:
		fmt.Printf("hostcmp: %s, float32, target %v per cell, iterations %d..%d, warm-up %d per cell and %d per job, %d round(s), timeout %v per run\n\n",
			time.Now().UTC().Format(time.RFC3339), *target, *minIters, *maxIters, *warmup, *warmupJob, *rounds, *timeout)
	}
	if err := clustertest.Available(); err != nil {
		fmt.Printf("- skipping every benchmark: %v\n", err)
		return
	}
	tmp, err := os.MkdirTemp("", "hostcmp-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	os.Chmod(tmp, 0o755)
	keep := *jsonDir
	if keep == "" {
		keep = filepath.Join(tmp, "json")
	}
	if err := os.MkdirAll(keep, 0o755); err != nil {
		fail(err)
	}
	t := tools{Godist: *godistBin, Python: *python, Tmp: tmp}
	for _, kv := range strings.Fields(*godistEnv) {
		if !strings.Contains(kv, "=") {
			fail(fmt.Errorf("--godist-env: %q is not NAME=VALUE", kv))
		}
		t.GodistEnv = append(t.GodistEnv, kv)
	}
	t.Mpirun, _ = exec.LookPath("mpirun")
	if t.Scripts, err = peers.Write(filepath.Join(tmp, "peers")); err != nil {
		fail(err)
	}
	goBuild := func(out, pkg string) {
		fmt.Fprintln(os.Stderr, "hostcmp: go build "+pkg)
		build := exec.Command("go", "build", "-o", out, pkg)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fail(fmt.Errorf("building %s: %w", pkg, err))
		}
	}
	if t.Godist == "" {
		t.Godist = filepath.Join(tmp, "godist")
		goBuild(t.Godist, "github.com/godist/godist/cmd/godist")
	}
	if *load < 0 {
		fail(errors.New("want --load >= 0"))
	}
	if *load > 0 {
		_, stopLoad, err := startLoad(*load)
		if err != nil {
			fail(err)
		}
		defer stopLoad()
		fmt.Printf("- load: %d × `sha256sum /dev/zero` at this process's priority throughout (a busy machine)\n\n", *load)
	}
	if *pipe {
		if *pipeSteps < 1 {
			fail(errors.New("want --pipeline-steps at least 1"))
		}
		t.PipelineGPT = filepath.Join(tmp, "pipeline-gpt")
		goBuild(t.PipelineGPT, "github.com/godist/godist/examples/pipeline-gpt")
		t.Corpus = goSource()
		if !runPipeline(ctx, labs, *pipeSteps, *rounds, t, *timeout) {
			os.Exit(1)
		}
		return
	}
	if *train != "" {
		models := strings.Split(*train, ",")
		if err := checkModels(models); err != nil {
			fail(err)
		}
		if *trainSteps < 1 || *evalEvery < 1 || *trainEpochs < 1 || *targetAcc < 0 || *targetAcc >= 1 || *gptSteps < 1 {
			fail(fmt.Errorf("want --train-steps, --gpt-steps, --eval-every and --train-epochs at least 1, and --target-acc in [0, 1)"))
		}
		if anyGPT(models) && *targetAcc > 0 {
			fail(fmt.Errorf("--target-acc is for the Fashion-MNIST models; the GPT runs report their validation loss"))
		}
		t.Example = filepath.Join(tmp, "ddp-fashion-mnist")
		goBuild(t.Example, "github.com/godist/godist/examples/ddp-fashion-mnist")
		if anyGPT(models) {
			t.TinyGPT = filepath.Join(tmp, "tinygpt")
			goBuild(t.TinyGPT, "github.com/godist/godist/examples/tinygpt")
			t.Corpus = goSource()
		}
		tr := trainRun{Steps: *trainSteps, Epochs: *trainEpochs, EvalEvery: *evalEvery, TargetAcc: *targetAcc, BucketMB: *bucketMB, GPTSteps: *gptSteps}
		if !runTrain(ctx, labs, models, strings.Split(*hooks, ","), tr, *overlap, *rounds, t, *timeout) {
			os.Exit(1)
		}
		return
	}
	var run []bench
	for _, b := range sel {
		about, missing := b.Probe(t)
		if missing != "" {
			fmt.Printf("- skipping %s: %s\n", b.Label, missing)
			continue
		}
		fmt.Printf("- %s: %s\n", b.Label, about)
		run = append(run, b)
	}
	fmt.Printf("\npeer/godist is the peer's median latency over godist's: above 1, godist is faster. A latency is the median\n"+
		"of the rounds' medians (µs), with the rounds' range. busbw uses nccl-tests' factors over all ranks. The two-level\n"+
		"bound is the most algorithm bandwidth (bytes / latency) an all_reduce across h hosts can have: each host's link\n"+
		"carries 2(h-1)/h of the vector each way, so bound = payload rate × h / (2(h-1)), the payload rate taken as %.0f%% of\n"+
		"the link rate (tbf counts whole frames; 1448 B of TCP payload per 1514 B frame); godist's share of it is its\n"+
		"algorithm bandwidth over the bound (tbf lets 1 ms of traffic through at once after idle time, so a run of small\n"+
		"transfers can pass it a little). godist algo is the algorithm godist's group chose (its JSON's algo), each round's\n"+
		"in turn when they differ. A latency is the slowest rank's time from its own exit of a barrier to its return, and\n"+
		"ranks leave a barrier apart: pred/measured is godist's cost model's time for that (each rank starting as the model\n"+
		"has it leave the barrier: pred_after_barrier_us, or pred_us in older results) over the measured one; common start\n"+
		"is godist's median time from an instant at which every rank calls (--common-start: the machine's one clock) to the\n"+
		"last return, and pred/common the model's time for that (pred_us) over it.\n",
		payloadShare*100)

	if len(run) == 0 {
		fmt.Println("\nnothing to run")
		return
	}
	failed := false
	for _, cfg := range labs {
		if ctx.Err() != nil {
			break
		}
		if !runLab(ctx, cfg, run, t, p, *rounds, keep) {
			failed = true
		}
	}
	if *jsonDir != "" {
		fmt.Printf("\nraw JSON in %s\n", *jsonDir)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "hostcmp: interrupted")
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

// runLab makes the lab cfg describes, runs every benchmark on it for the
// given rounds, prints its section, and closes it. It reports whether
// everything ran.
func runLab(ctx context.Context, cfg labConfig, run []bench, t tools, p params, rounds int, keep string) bool {
	fmt.Printf("\n### %s: %d hosts × %d ranks (world %d), links %s\n\n", cfg, cfg.Hosts, cfg.PerHost, cfg.World(), formatRate(cfg.Rate))
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	c, err := clustertest.New(mctx, clustertest.Config{Hosts: cfg.Hosts, Rate: cfg.Rate, ShareCPUs: true})
	cancel()
	if err != nil {
		fmt.Printf("- cannot make the lab: %v\n", err)
		return false
	}
	ok := true
	defer func() {
		if err := c.Close(); err != nil {
			fmt.Printf("- closing the lab: %v\n", err)
		}
	}()
	var names []string
	var cpus [][]int
	for _, h := range c.Hosts() {
		names = append(names, fmt.Sprintf("%s (%s)", h.Name, h.Addr))
		cpus = append(cpus, h.CPUs)
	}
	layout, shared := cpuLayout(names, cpus)
	fmt.Printf("- hosts: %s\n", layout)
	if shared {
		fmt.Printf("- the hosts share CPUs (this machine has too few for each to have its own): their ranks contend as those of real hosts would not\n")
	}
	l := &lab{cfg: cfg, c: c}
	if l.oversubscribed() {
		fmt.Printf("- more ranks than CPUs: mpi-tcp with mpi_yield_when_idle 1 and godist with GODIST_YIELD=1 (their ranks poll yielding the CPU, as each does by itself on a host with more ranks than CPUs, which hosts that share CPUs cannot see); gloo does not poll\n")
	}
	results := make([]series, len(run))
	for i, b := range run {
		results[i].Label = b.Label
	}
	var notes []string
	for r := range rounds {
		var took []string
		for _, b := range rotate(run, r) {
			if ctx.Err() != nil {
				return false
			}
			i := indexOf(run, b.Name)
			ext := ".json"
			if b.StdoutJSON {
				ext = ".jsonl"
			}
			out := filepath.Join(keep, fmt.Sprintf("%s_%s_round%d%s", strings.ReplaceAll(cfg.String(), "@", "-"), b.Name, r+1, ext))
			fmt.Fprintf(os.Stderr, "hostcmp: %s, round %d: %s\n", cfg, r+1, b.Label)
			t0 := time.Now()
			cells, err := l.measure(ctx, b, t, p, out)
			if err != nil {
				ok = false
				took = append(took, b.Label+" failed")
				notes = append(notes, fmt.Sprintf("- %s failed in round %d: %v", b.Label, r+1, err))
				continue
			}
			took = append(took, fmt.Sprintf("%s %.0f s", b.Label, time.Since(t0).Seconds()))
			results[i].Rounds = append(results[i].Rounds, cells)
		}
		fmt.Printf("- round %d: %s\n", r+1, strings.Join(took, ", "))
	}
	if len(notes) > 0 {
		fmt.Printf("\n%s\n", strings.Join(notes, "\n"))
	}
	tb := tables{Ops: p.Ops, World: cfg.World(), Bound: twoLevelBound(cfg.Rate, cfg.Hosts), Godist: series{Label: "godist"}}
	for _, s := range results {
		if s.Label == "godist" {
			tb.Godist = s
		} else {
			tb.Peers = append(tb.Peers, s)
		}
	}
	fmt.Print(renderTables(tb))
	return ok
}

func indexOf(bs []bench, name string) int {
	for i, b := range bs {
		if b.Name == name {
			return i
		}
	}
	return -1
}

// goSource is the corpus of the GPT examples: $(go env GOROOT)/src.
func goSource() string {
	root, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "hostcmp: go env GOROOT (the GPT's corpus): %v\n", err)
		os.Exit(2)
	}
	return filepath.Join(strings.TrimSpace(string(root)), "src")
}

// startLoad starts n CPU hogs (sha256sum of an endless stream of zeros)
// and returns their process ids and what stops them. Pdeathsig kills
// them when the thread that started them ends, which for this tool's
// main goroutine is the process's exit, os.Exit included.
func startLoad(n int) (pids []int, stop func(), err error) {
	var hogs []*exec.Cmd
	stop = func() {
		for _, h := range hogs {
			h.Process.Kill()
			h.Wait()
		}
	}
	for range n {
		h := exec.Command("sha256sum", "/dev/zero")
		h.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with this process, however it exits
		if err := h.Start(); err != nil {
			stop()
			return nil, nil, fmt.Errorf("--load: %w", err)
		}
		hogs = append(hogs, h)
		pids = append(pids, h.Process.Pid)
	}
	return pids, stop, nil
}
