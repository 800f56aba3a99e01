package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/godist/godist/internal/blas"
	"github.com/godist/godist/internal/launch"
	"github.com/godist/godist/internal/tailbuf"
	"github.com/godist/godist/tensor"
)

// benchConfig is what the parent tells every rank, as JSON in the
// environment variable benchConfigEnv.
type benchConfig struct {
	Ops    []string `json:"ops"`
	Sizes  []int    `json:"sizes"`
	DType  string   `json:"dtype"`
	Warmup int      `json:"warmup"`
	// WarmupJob is the job's warm-up: iterations of a barrier and a 4-byte
	// all_reduce before the first cell (bench_gloo.py's --warmup-job).
	WarmupJob int           `json:"warmup_job"`
	MinIters  int           `json:"min_iters"`
	MaxIters  int           `json:"max_iters"`
	Target    time.Duration `json:"target"`
	Timeout   time.Duration `json:"timeout"` // bounds each collective
	Shared    bool          `json:"shared"`  // inputs from NewSharedTensor
	RPC       bool          `json:"rpc"`     // the RPC cases of bench_rpc.py instead of collectives
	RPCCases  []string      `json:"rpc_cases"`
	// CommonStart is the iterations, after the timed ones, that every
	// rank starts at one instant of the machine's clock (commonstart.go).
	CommonStart int `json:"common_start,omitempty"`
}

const benchConfigEnv = "GODIST_BENCH_CONFIG"

// benchReport is the --json output.
type benchReport struct {
	Backend   string   `json:"backend"`
	World     int      `json:"world"`
	DType     string   `json:"dtype"`
	Transport string   `json:"transport"`
	BLAS      string   `json:"blas"`
	GoVersion string   `json:"go_version"`
	Target    float64  `json:"target_s"`
	Results   []result `json:"results"`
}

func benchMain(args []string) int {
	fs := flag.NewFlagSet("godist bench", flag.ContinueOnError)
	nproc := fs.Int("nproc", 2, "number of ranks, each a process of this binary on this host")
	ops := fs.String("ops", "all", "comma-separated collectives: "+strings.Join(allOps, ",")+", or all")
	minBytes, maxBytes := byteSize(8), byteSize(64<<20)
	fs.Var(&minBytes, "min-bytes", "smallest message `size` (suffixes B, KiB, MiB, GiB)")
	fs.Var(&maxBytes, "max-bytes", "largest message `size`")
	step := fs.Int("step-factor", 0, "with `F` >= 2, also run min-bytes·F^k up to max-bytes; 0 runs only bench_gloo.py's sizes (8 B, 1 KiB, 64 KiB, 1 MiB, 16 MiB, 64 MiB) within [min-bytes, max-bytes], which are always included")
	sizes := fs.String("sizes", "", "explicit comma-separated `list` of sizes (overrides min/max/step)")
	iters := fs.Int("iters", 1000, "most timed iterations per size (bench_gloo.py's --max-iters)")
	minIters := fs.Int("min-iters", 10, "fewest timed iterations per size (bench_gloo.py's --min-iters)")
	target := durationFlag(fs, "target", 2*time.Second, "time budget per size (seconds or a duration): the iteration count is target / (median of 5 probe iterations), clamped to [min-iters, iters]; 0 always runs --iters")
	warmup := fs.Int("warmup", 5, "untimed iterations per size before the 5 probe iterations")
	warmupJob := fs.Int("warmup-job", 0, "untimed iterations of a barrier and a 4-byte all_reduce before the first size (the first calls of a job run on a heap that has not yet touched its memory)")
	dtype := fs.String("dtype", "float32", "element type (float32, float64, bfloat16, float16, int64, int32, uint8)")
	rpcOnly := fs.String("rpc-cases", "all", "with --rpc, the comma-separated cases to run: "+strings.Join(rpcCaseNames, ",")+", or all")
	rpcCases := fs.Bool("rpc", false, "measure the RPC framework instead, with the cases of tools/peers/bench_rpc.py (rpc_sync, remote().to_here(), echoes of 1 KiB, 1 MiB and 16 MiB, 64 and 256 calls in flight) between 2 ranks; --nproc, --ops and sizes do not apply")
	commonStart := fs.Int("common-start", 0, "with --worker, after each size's timed iterations, `N` more in which every rank calls at one instant of the machine's monotonic clock (rank 0 picks it 1 ms ahead; each rank sleeps until then): the time from that instant to the last rank's return, which is what the cost model predicts (common_us_median). Only where every rank reads one clock: hosts that are network namespaces of one machine")
	shared := fs.Bool("shared", false, "inputs of all_reduce, broadcast, all_gather and reduce_scatter made by Group.NewSharedTensor, as DDP's buckets are (same-host ranks then read them straight out of each other's memory)")
	jsonOut := fs.Bool("json", false, "print one JSON document (bench_gloo.py's result keys) instead of tables")
	timeout := durationFlag(fs, "timeout", 10*time.Minute, "limit for the whole run (seconds or a duration); the ranks are killed when it passes")
	worker := fs.Bool("worker", false, "be one rank of a benchmark whose ranks a launcher started (godist run, torchrun, mpirun; across hosts too): join from the launcher's environment (dist.Init's env://), run the cells the flags give, and on rank 0 print one JSON result per line (a result of --json); --nproc does not apply, and --timeout bounds each collective")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: godist bench [flags]

Measures collectives over --nproc ranks on this host, each a process of this
binary joined by dist.Init (env://, loopback TCP), the way
shared/anchors/bench_gloo.py measures PyTorch's gloo: per iteration
barrier; t0; op; t1; an iteration's latency is the maximum over ranks;
median, p10..p90 and best..worst over iterations; algbw = bytes / median;
busbw with nccl-tests' factors (all_reduce 2(n-1)/n; all_gather,
reduce_scatter, all_to_all (n-1)/n; broadcast 1). For all_gather,
reduce_scatter and all_to_all the size is the total over ranks (each rank's
share is size/n), as in bench_gloo.py and nccl-tests.

With --worker, this process is one rank and a launcher starts them all,
on this host or across hosts (the same GODIST_TOKEN on every node), each
with the same flags:

	godist run --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --nproc-per-node 2 \
	    godist bench --worker --ops all_reduce --target 1s   # and node rank 1

Set GODIST_CPUPROFILE=prefix to write each rank's CPU profile to
prefix.rank<N>, and GODIST_TRACE=prefix for its execution trace
(go tool trace).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "godist bench: "+format+"\n", a...)
		return exitUsage
	}
	if fs.NArg() > 0 {
		return fail("unexpected arguments %q", fs.Args())
	}
	if *nproc < 1 {
		return fail("--nproc %d: want at least 1", *nproc)
	}
	opList, err := parseOps(*ops)
	if err != nil {
		return fail("--ops: %v", err)
	}
	sizeList, err := benchSizes(*sizes, int(minBytes), int(maxBytes), *step)
	if err != nil {
		return fail("%v", err)
	}
	if _, err := tensor.ParseDType(*dtype); err != nil {
		return fail("--dtype: %v", err)
	}
	if *iters < 1 || *minIters < 1 || *warmup < 0 || *warmupJob < 0 || *target < 0 || *timeout <= 0 || *commonStart < 0 {
		return fail("want --iters >= 1, --min-iters >= 1, --warmup >= 0, --warmup-job >= 0, --common-start >= 0, --target >= 0 and --timeout > 0")
	}
	cfg := benchConfig{
		Ops: opList, Sizes: sizeList, DType: *dtype, Warmup: *warmup, WarmupJob: *warmupJob,
		MinIters: *minIters, MaxIters: *iters, Target: *target, Timeout: *timeout,
		Shared: *shared, RPC: *rpcCases, CommonStart: *commonStart,
	}
	if *rpcCases {
		if cfg.RPCCases, err = parseRPCCases(*rpcOnly); err != nil {
			return fail("--rpc-cases: %v", err)
		}
		cfg.MinIters, cfg.MaxIters = 20, 20000
		*nproc = 2
	}
	if *worker {
		return benchRank(cfg)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeoutCause(ctx, *timeout, fmt.Errorf("the run took longer than --timeout %v", *timeout))
	defer cancel()

	rep := benchReport{
		Backend: "godist", World: *nproc, DType: *dtype, Transport: "tcp (loopback)",
		BLAS: blas.Default.Name(), GoVersion: runtime.Version(), Target: target.Seconds(),
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	if !*jsonOut {
		fmt.Fprintf(out, "godist bench: world %d, %s, %s, one process per rank, %s, sizes %s, target %v per size, %d..%d iterations\n",
			*nproc, *dtype, rep.Transport, runtime.Version(), sizesText(sizeList), *target, min(*minIters, *iters), *iters)
		out.Flush()
	}
	curOp := ""
	err = spawnRanks(ctx, cfg, *nproc, func(r result) {
		rep.Results = append(rep.Results, r)
		if *jsonOut {
			return
		}
		if r.Op != curOp {
			curOp = r.Op
			fmt.Fprintf(out, "\n#### %s, world %d\n\n%s", r.Op, r.World, tableHeader)
		}
		io.WriteString(out, tableRow(r))
		out.Flush()
	})
	if err != nil {
		out.Flush()
		fmt.Fprintf(os.Stderr, "godist bench: %v\n", err)
		return exitFail
	}
	if *jsonOut {
		b, err := json.MarshalIndent(rep, "", " ")
		if err != nil {
			fmt.Fprintf(os.Stderr, "godist bench: %v\n", err)
			return exitFail
		}
		out.Write(append(b, '\n'))
	}
	return exitOK
}

func sizesText(sizes []int) string {
	var s []string
	for _, b := range sizes {
		s = append(s, formatSize(b))
	}
	return strings.Join(s, ", ")
}

// rankError is the failure of one rank's process.
type rankError struct {
	Rank int
	Err  error
}

func (e *rankError) Error() string { return fmt.Sprintf("rank %d: %v", e.Rank, e.Err) }
func (e *rankError) Unwrap() error { return e.Err }

// spawnRanks runs world ranks as processes of this binary (the hidden
// worker mode) and calls emit, on this goroutine, with each result rank 0
// prints. When a rank fails, or ctx ends, it kills them all; it returns the
// first failure, after copying every rank's stderr to its own, prefixed
// with [rank N].
func spawnRanks(ctx context.Context, cfg benchConfig, world int, emit func(result)) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this binary to start the ranks: %w", err)
	}
	port, err := launch.FreePort("127.0.0.1")
	if err != nil {
		return fmt.Errorf("cannot find a free port for the store: %w", err)
	}
	token := launch.NewToken()
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	base := os.Environ()
	var (
		procs   = make([]*launch.Proc, world)
		stderrs = make([]*tailbuf.Buffer, world)
		exits   = make(chan launch.Exit, world)
		lines   = make(chan result)
		bad     = make(chan error, 1)
		running = 0
	)
	killAll := func() {
		for _, p := range procs {
			if p != nil {
				p.Kill() // an error means it has already exited
			}
		}
	}
	var first error
	var rank0Out *os.File
	for r := range world {
		set := append(launch.Rank{Rank: r, LocalRank: r, WorldSize: world, LocalWorldSize: world,
			MasterAddr: "127.0.0.1", MasterPort: port, RunID: "bench-" + strconv.Itoa(port), Token: token}.Vars(),
			benchConfigEnv+"="+string(cfgJSON))
		if os.Getenv("GOMAXPROCS") == "" {
			// As godist run does: the ranks share the cores instead of each
			// scheduling on all of them (one P per rank on a 2-core machine
			// halves small-message latency).
			set = append(set, "GOMAXPROCS="+strconv.Itoa(max(1, runtime.NumCPU()/world)))
		}
		stderrs[r] = &tailbuf.Buffer{Max: 64 << 10}
		c := launch.Command{Path: self, Args: []string{benchWorkerCmd},
			// The ranks meet on loopback, and the table says so: an
			// address of the parent's (GODIST_HOST) is not theirs.
			Env:    launch.Env(base, set, "GODIST_HOST"),
			Stdout: stderrs[r], Stderr: stderrs[r],
			// Stopped with what they started, and by launch's watchdog
			// should this process die without stopping them.
			OwnGroup: true, OrphanGrace: time.Second}
		var w *os.File
		if r == 0 {
			var rd *os.File
			if rd, w, err = os.Pipe(); err != nil {
				first = err
				break
			}
			rank0Out = rd
			c.Stdout = w
		}
		p, err := launch.Start(r, c, exits)
		if w != nil {
			w.Close()
		}
		if err != nil {
			first = &rankError{r, fmt.Errorf("starting %s: %w", self, err)}
			break
		}
		procs[r] = p
		running++
	}
	if rank0Out != nil {
		go func() {
			defer close(lines)
			defer rank0Out.Close()
			sc := bufio.NewScanner(rank0Out)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				var res result
				if err := json.Unmarshal(sc.Bytes(), &res); err != nil {
					select {
					case bad <- fmt.Errorf("rank 0 printed %q, not a result: %v", sc.Text(), err):
					default:
					}
					continue
				}
				lines <- res // the loop below reads until lines is closed
			}
		}()
	}
	if first != nil {
		killAll()
	}
	linesOpen := rank0Out != nil
	ctxDone := ctx.Done()
	for running > 0 || linesOpen {
		select {
		case res, ok := <-lines:
			if !ok {
				linesOpen, lines = false, nil
				continue
			}
			emit(res)
		case err := <-bad:
			if first == nil {
				first = err
				killAll()
			}
		case e := <-exits:
			running--
			if !e.OK() && first == nil {
				first = &rankError{e.ID, e.Err}
				killAll()
			}
		case <-ctxDone:
			ctxDone = nil
			if first == nil {
				first = context.Cause(ctx)
				killAll()
			}
		}
	}
	if first == nil {
		return nil
	}
	for r, t := range stderrs {
		if t == nil {
			continue
		}
		for _, l := range strings.Split(strings.TrimRight(t.String(), "\n"), "\n") {
			if l != "" {
				fmt.Fprintf(os.Stderr, "[rank %d] %s\n", r, l)
			}
		}
	}
	var re *rankError
	if errors.As(first, &re) {
		return fmt.Errorf("%w (its output is above, prefixed [rank %d])", first, re.Rank)
	}
	return first
}
