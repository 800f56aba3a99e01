package elastic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/godist/godist/internal/launch"
)

// Rendezvous is what the agent needs from rendezvous; *StoreRendezvous is
// the implementation.
type Rendezvous interface {
	// Next blocks until this node is in a complete round newer than after
	// (-1 for none).
	Next(ctx context.Context, after int) (Round, error)
	// Check tells whether the node, running round, must re-rendezvous.
	Check(ctx context.Context, round int) (restart bool, why string, err error)
	// Fail marks the job failed for every node.
	Fail(ctx context.Context, reason string) error
	// Finish marks the node done; with wait, it waits for the others.
	Finish(ctx context.Context, round int, wait bool) error
}

// Spec is what an agent runs and how.
type Spec struct {
	Program string   // a binary or script, executed directly
	Args    []string // its arguments
	Env     []string // the base environment (os.Environ() by default)
	// LocalRankArg appends --local-rank=N to each worker's arguments, as
	// the legacy torch.distributed.launch did without --use-env.
	LocalRankArg bool

	NProc       int    // workers on this node
	Role        string // ROLE_NAME (default "default")
	RunID       string // GODIST_RUN_ID and TORCHELASTIC_RUN_ID
	Token       string // GODIST_TOKEN, hex; never printed
	MaxRestarts int
	Monitor     time.Duration // how often rendezvous is checked (default 100ms)
	StopGrace   time.Duration // SIGTERM to SIGKILL (default 5s)
	Host        string        // this node's name, for reports (default os.Hostname)

	LogDir    string  // per-rank files: LogDir/RunID/attempt_N/LOCAL_RANK/{stdout,stderr}.log
	Redirects Streams // streams that go only to files
	Tee       Streams // streams that go to files and the console
	Stdout    io.Writer
	Stderr    io.Writer // the console; the agent's own messages go here too

	// InitMethod, when set, gives the workers of each rendezvous round
	// their init method as GODIST_INIT_METHOD, which dist.Init reads:
	// godist run --rdzv-backend etcd hands them a fresh prefix in etcd
	// per round (etcd://host:port/godist/RUN/roundN/), so that no worker
	// serves the job's store.
	InitMethod func(round int) string

	// ServesStore makes the agent wait, after its workers succeed, for the
	// other nodes to finish before Run returns (the launcher that hosts
	// the store must outlive them).
	ServesStore bool
	// Signals, when set, delivers SIGINT and SIGTERM sent to the launcher;
	// they are forwarded to every worker.
	Signals <-chan os.Signal
	// Logf receives the agent's progress lines (default: to Stderr with a
	// "godist run: " prefix).
	Logf func(format string, args ...any)
}

// Agent starts one node's workers, watches them, restarts the group on a
// failure (up to Spec.MaxRestarts) or a membership change, and reports.
type Agent struct {
	Spec       Spec
	Rendezvous Rendezvous
}

// Result is how a job ended on this node.
type Result struct {
	ExitCode int     // the launcher's exit status
	Restarts int     // restarts after failures
	Report   *Report // set when workers failed for good
	Err      error   // set when the agent itself failed (rendezvous, start)
	Signal   os.Signal
}

// tailLines is how many lines of each worker's stderr the report keeps.
const tailLines = 20

type worker struct {
	localRank, rank int
	proc            *launch.Proc
	out, errw       *lineWriter
	tail            *lineTail
	files           []*os.File
	errorFile       string // where it records its failure; "" for nowhere
	exited          bool   // its exit was seen; owned by attempt's loop
	// stoppedAt is when the agent first signalled it, still running, to
	// stop the group; frozen, that its process was stopped (SIGSTOP)
	// then. Owned by attempt's loop.
	stoppedAt time.Time
	frozen    bool
}

// outcome of one attempt.
type outcome int

const (
	succeeded outcome = iota
	failed
	membership
	nodeLost // a member stopped heartbeating (attemptResult.lost)
	interrupted
	aborted
)

// Run runs the job on this node until it succeeds, fails for good, the
// launcher is signaled, or ctx ends.
func (a *Agent) Run(ctx context.Context) Result {
	sp := a.Spec
	a.defaults(&sp)
	errDir := a.errorDir(&sp)
	if errDir != "" && sp.LogDir == "" {
		defer func() {
			if kept := RemoveTempDir(errDir); len(kept) > 0 {
				sp.Logf("kept %s: the workers left %s there", errDir, strings.Join(kept, ", "))
			}
		}()
	}
	after := -1
	restarts := 0
	for attempt := 0; ; attempt++ {
		rd, sig, err := a.next(ctx, &sp, after)
		if sig != 0 {
			sp.Logf("interrupted by %s during rendezvous", SignalName(sig))
			return Result{ExitCode: 128 + int(sig), Restarts: restarts, Signal: sig}
		}
		if err != nil {
			var jf *JobFailedError
			if errors.As(err, &jf) {
				sp.Logf("%v; stopping this node", err)
			} else {
				sp.Logf("rendezvous: %v", err)
			}
			return Result{ExitCode: 1, Restarts: restarts, Err: err}
		}
		after = rd.Round
		sp.Logf("round %d: node rank %d of %d nodes, ranks %d..%d of world size %d, workers' master %s:%d",
			rd.Round, rd.NodeRank, rd.NumNodes, rd.RankOffset, rd.RankOffset+sp.NProc-1, rd.WorldSize, rd.MasterAddr, rd.MasterPort)
		res := a.attempt(ctx, &sp, rd, attempt, restarts, errDir)
		switch res.outcome {
		case succeeded:
			// The node serving the store waits (a minute at most) for the
			// others to finish, so that their agents can still reach it.
			fctx, cancel := context.WithTimeout(ctx, time.Minute)
			if err := a.Rendezvous.Finish(fctx, rd.Round, sp.ServesStore); err != nil && sp.ServesStore {
				sp.Logf("waiting for the other nodes to finish: %v", err)
			}
			cancel()
			return Result{ExitCode: 0, Restarts: restarts}
		case membership:
			sp.Logf("re-rendezvous: %s", res.why)
			continue
		case nodeLost:
			lost := res.lost
			restart, why := afterLoss(lost, restarts, sp.MaxRestarts)
			if restart {
				restarts++
				sp.Logf("%v; %s", lost, why)
				continue
			}
			rep := &Report{Program: sp.Program, Restarts: restarts, MaxRestarts: sp.MaxRestarts, Lost: lost}
			sp.Logf("%v; %s", lost, why)
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			a.Rendezvous.Fail(fctx, fmt.Sprintf("on node %s: %v", sp.Host, lost))
			cancel()
			return Result{ExitCode: 1, Restarts: restarts, Report: rep, Err: lost}
		case interrupted:
			code := 128 + int(res.sig)
			for _, f := range res.failures {
				if s := f.Status(); s != 0 && !f.Sent {
					code = s
					break
				}
			}
			sp.Logf("interrupted by %s; workers stopped; exit status %d", SignalName(res.sig), code)
			return Result{ExitCode: code, Restarts: restarts, Signal: res.sig}
		case aborted:
			sp.Logf("%s", res.why)
			return Result{ExitCode: 1, Restarts: restarts, Err: errors.New(res.why)}
		case failed:
			first := res.failures[0]
			if restarts < sp.MaxRestarts {
				restarts++
				sp.Logf("%v; restarting the worker group (restart %d of %d)", first, restarts, sp.MaxRestarts)
				continue
			}
			rep := &Report{Program: sp.Program, Restarts: restarts, MaxRestarts: sp.MaxRestarts, Failures: res.failures,
				Rank0Store: sp.InitMethod == nil}
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			a.Rendezvous.Fail(fctx, fmt.Sprintf("on node %s: %v (after %d restarts)", sp.Host, first, restarts))
			cancel()
			return Result{ExitCode: rep.ExitCode(), Restarts: restarts, Report: rep}
		}
	}
}

// checkTimeout bounds a membership check (at least ten monitor intervals).
const checkTimeout = 2 * time.Second

// afterLoss decides what a node does when another member was lost, having
// made restarts of maxRestarts: restart with the nodes left when both
// restarts and nodes allow, else end the job; why says which and why.
func afterLoss(lost *NodeLostError, restarts, maxRestarts int) (restart bool, why string) {
	if restarts < maxRestarts && lost.Alive >= lost.MinNodes {
		return true, fmt.Sprintf("restarting with the %d nodes left (restart %d of %d)", lost.Alive, restarts+1, maxRestarts)
	}
	why = fmt.Sprintf("%d restart(s) left", maxRestarts-restarts)
	if restarts >= maxRestarts {
		why = fmt.Sprintf("no restart left (--max-restarts %d)", maxRestarts)
	}
	if lost.Alive < lost.MinNodes {
		why += fmt.Sprintf(", and %d node(s) left of the %d the job needs (--nnodes)", lost.Alive, lost.MinNodes)
	}
	return false, why + ": ending the job"
}

// next runs a rendezvous that a signal to the launcher cuts short.
func (a *Agent) next(ctx context.Context, sp *Spec, after int) (Round, syscall.Signal, error) {
	if sp.Signals == nil {
		rd, err := a.Rendezvous.Next(ctx, after)
		return rd, 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan syscall.Signal, 1)
	done := make(chan struct{})
	go func() {
		defer close(got)
		select {
		case s := <-sp.Signals:
			sig, ok := s.(syscall.Signal)
			if !ok {
				sig = syscall.SIGTERM
			}
			got <- sig
			cancel()
		case <-done:
		}
	}()
	rd, err := a.Rendezvous.Next(ctx, after)
	close(done)
	if sig, ok := <-got; ok {
		return Round{}, sig, err
	}
	return rd, 0, err
}

func (a *Agent) defaults(sp *Spec) {
	if sp.Env == nil {
		sp.Env = os.Environ()
	}
	if sp.Role == "" {
		sp.Role = "default"
	}
	if sp.Monitor <= 0 {
		sp.Monitor = 100 * time.Millisecond
	}
	if sp.StopGrace <= 0 {
		sp.StopGrace = 5 * time.Second
	}
	if sp.Host == "" {
		sp.Host, _ = os.Hostname()
	}
	if sp.Stdout == nil {
		sp.Stdout = os.Stdout
	}
	if sp.Stderr == nil {
		sp.Stderr = os.Stderr
	}
	if sp.Logf == nil {
		w := sp.Stderr
		sp.Logf = func(format string, args ...any) {
			fmt.Fprintf(w, "godist run: "+format+"\n", args...)
		}
	}
}

type attemptResult struct {
	outcome  outcome
	lost     *NodeLostError // with nodeLost
	why      string
	sig      syscall.Signal
	failures []Failure
}

// WorkerEnv returns the environment of local rank lr in round rd: base
// without the variables of a worker's identity (launch.Identity: RANK,
// MASTER_PORT, GODIST_TOKEN, GODIST_INIT_METHOD, the error files, ...),
// then torchrun's and godist's variables (GODIST_INIT_METHOD with
// Spec.InitMethod), and OMP_NUM_THREADS=1 / OPENBLAS_NUM_THREADS=1
// unless base sets them. Go workers also get GOMAXPROCS = CPUs / workers
// on the node (at least 1), the Go counterpart of OMP_NUM_THREADS: without
// it every worker's runtime schedules on every core, and they
// oversubscribe the node; and, unless base sets GOGC or GOMEMLIMIT,
// GOGC=200 with GOMEMLIMIT = half the node's memory / workers. The agent
// adds each worker's error file (GODIST_ERROR_FILE) when it starts it.
func WorkerEnv(base []string, sp Spec, rd Round, lr, restarts int) []string {
	rank := rd.RankOffset + lr
	itoa := strconv.Itoa
	set := append(launch.Rank{Rank: rank, LocalRank: lr, WorldSize: rd.WorldSize, LocalWorldSize: sp.NProc,
		MasterAddr: rd.MasterAddr, MasterPort: rd.MasterPort, RunID: sp.RunID, Token: sp.Token}.Vars(),
		"GROUP_RANK="+itoa(rd.NodeRank), "GROUP_WORLD_SIZE="+itoa(rd.NumNodes),
		"ROLE_NAME="+sp.Role, "ROLE_RANK="+itoa(rank), "ROLE_WORLD_SIZE="+itoa(rd.WorldSize),
		"GODIST_RESTART_COUNT="+itoa(restarts), "GODIST_MAX_RESTARTS="+itoa(sp.MaxRestarts),
		"TORCHELASTIC_RESTART_COUNT="+itoa(restarts), "TORCHELASTIC_MAX_RESTARTS="+itoa(sp.MaxRestarts), "TORCHELASTIC_RUN_ID="+sp.RunID,
	)
	if sp.InitMethod != nil {
		set = append(set, "GODIST_INIT_METHOD="+sp.InitMethod(rd.Round))
	}
	have := func(k string) bool { _, ok := launch.Lookup(base, k); return ok }
	for _, k := range []string{"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"} {
		if !have(k) {
			set = append(set, k+"=1")
		}
	}
	if !have("GOMAXPROCS") {
		set = append(set, "GOMAXPROCS="+itoa(max(1, runtime.NumCPU()/max(sp.NProc, 1))))
	}
	// A training step allocates activations at a steady rate over a small
	// live heap: with Go's default (GOGC=100) the collector runs every few
	// steps, and under DDP a collection on one rank holds every other rank
	// at the next all-reduce (MLP, world 2: steps 8-10% longer than with
	// 400). Collecting too rarely costs too: the heap then walks through
	// more memory than the caches hold (unsynchronised MLP steps: GOGC=100
	// 0.97 ms, 150-300 0.93-0.94, 400 0.985, 2000 1.15; DDP world 2, runs
	// with the vCPUs near each other: 200 against 400, 1.13 against 1.26 ms
	// pure Go, 1.44 against 1.58 OpenBLAS). Unless the user set either,
	// GOGC=200, with a soft limit of half the node's memory shared among
	// its workers, past which the collector works harder rather than let
	// the heap grow.
	if !have("GOGC") && !have("GOMEMLIMIT") {
		if mem := nodeMemory(); mem > 0 {
			set = append(set, "GOGC=200", "GOMEMLIMIT="+strconv.FormatInt(mem/2/int64(max(sp.NProc, 1)), 10))
		}
	}
	return launch.Env(base, set)
}

// nodeMemory is the memory this node gives its processes, in bytes: the
// smaller of MemTotal and the cgroup's limit; 0 when neither can be read.
func nodeMemory() int64 {
	var mem int64
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					mem = kb << 10
				}
			}
		}
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if lim, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && lim > 0 && (mem == 0 || lim < mem) {
			mem = lim
		}
	}
	return mem
}

// attempt starts the worker group for round rd and watches it.
func (a *Agent) attempt(ctx context.Context, sp *Spec, rd Round, attempt, restarts int, errDir string) attemptResult {
	con := &console{w: sp.Stdout}
	errCon := &console{w: sp.Stderr}
	if sp.Stdout == sp.Stderr {
		errCon = con
	}
	exits := make(chan launch.Exit, sp.NProc)
	workers := make([]*worker, 0, sp.NProc)
	var res attemptResult
	stopping := false // the agent has begun stopping the group
	running := 0
	sent := map[syscall.Signal]bool{} // signals the agent sent the group
	kill := func(sig syscall.Signal) {
		sent[sig] = true
		now := time.Now()
		for _, w := range workers {
			if w.exited {
				continue
			}
			if w.stoppedAt.IsZero() {
				// What the launcher does from now on causes what the
				// worker does next, unless it had failed before; and a
				// worker found stopped had stopped responding on its own.
				w.stoppedAt, w.frozen = now, w.proc.Frozen()
			}
			w.proc.Signal(sig) // an error means it has exited
		}
	}
	var grace <-chan time.Time
	stop := func(sig syscall.Signal) {
		stopping = true
		kill(sig)
		grace = time.After(sp.StopGrace)
	}
	for lr := 0; lr < sp.NProc; lr++ {
		w, err := a.start(sp, rd, lr, attempt, restarts, errDir, con, errCon, exits)
		if err != nil {
			res.outcome = aborted
			res.why = fmt.Sprintf("cannot start local rank %d (rank %d): %v", lr, rd.RankOffset+lr, err)
			if len(workers) > 0 {
				stop(syscall.SIGKILL)
			}
			break
		}
		workers = append(workers, w) // workers[lr] is w: Exit.ID indexes it
		running++
	}
	tick := time.NewTicker(sp.Monitor)
	defer tick.Stop()
	ctxDone := ctx.Done()
	for running > 0 {
		select {
		case e := <-exits:
			running--
			w := workers[e.ID]
			w.exited = true
			w.out.flush()
			w.errw.flush()
			for _, f := range w.files {
				f.Close()
			}
			if e.OK() {
				continue
			}
			f := a.failure(sp, rd, w, e)
			f.Sent = f.Signal != 0 && sent[f.Signal]
			switch {
			case !stopping:
				res.outcome = failed
				res.failures = append(res.failures, f)
				stop(syscall.SIGTERM)
			case res.outcome == failed || res.outcome == interrupted:
				// Those the agent stopped too: a survivor's report of one
				// of them is a consequence, not a cause, and one found
				// stopped (SIGSTOP) may be the cause.
				res.failures = append(res.failures, f)
			}
		case <-tick.C:
			if stopping {
				continue
			}
			// Bounded: a store that does not answer (its host cut off)
			// must not keep this loop from the workers' exits.
			cctx, cancel := context.WithTimeout(ctx, max(checkTimeout, 10*sp.Monitor))
			restart, why, err := a.Rendezvous.Check(cctx, rd.Round)
			cancel()
			var jf *JobFailedError
			var lost *NodeLostError
			switch {
			case errors.As(err, &lost):
				res.outcome, res.lost, res.why = nodeLost, lost, why
				stop(syscall.SIGTERM)
			case errors.As(err, &jf):
				res.outcome, res.why = aborted, fmt.Sprintf("%v; stopping this node's workers", err)
				stop(syscall.SIGTERM)
			case err != nil:
				// The store may be gone because its node finished; the
				// workers decide.
			case restart:
				res.outcome, res.why = membership, why
				stop(syscall.SIGTERM)
			}
		case s := <-sp.Signals:
			sig, ok := s.(syscall.Signal)
			if !ok {
				sig = syscall.SIGTERM
			}
			res.outcome, res.sig = interrupted, sig
			if stopping {
				kill(sig)
			} else {
				stop(sig)
			}
		case <-grace:
			grace = nil
			kill(syscall.SIGKILL)
		case <-ctxDone:
			ctxDone = nil
			if !stopping {
				res.outcome, res.why = aborted, fmt.Sprintf("stopped: %v", context.Cause(ctx))
				stop(syscall.SIGTERM)
			}
		}
	}
	res.failures = RootCauseFirst(res.failures)
	return res
}

// start starts local rank lr.
func (a *Agent) start(sp *Spec, rd Round, lr, attempt, restarts int, errDir string, con, errCon *console, exits chan<- launch.Exit) (*worker, error) {
	rank := rd.RankOffset + lr
	w := &worker{localRank: lr, rank: rank, tail: &lineTail{n: tailLines}}
	prefix := fmt.Sprintf("[rank %d] ", rank)
	w.out = &lineWriter{prefix: prefix, con: con}
	w.errw = &lineWriter{prefix: prefix, con: errCon, tail: w.tail}
	if sp.LogDir != "" {
		red, tee := sp.Redirects.For(lr), sp.Tee.For(lr)
		dir := filepath.Join(sp.LogDir, sp.RunID, "attempt_"+strconv.Itoa(attempt), strconv.Itoa(lr))
		for _, s := range []struct {
			which Std
			name  string
			lw    *lineWriter
		}{{StdOut, "stdout.log", w.out}, {StdErr, "stderr.log", w.errw}} {
			if !red.has(s.which) && !tee.has(s.which) {
				continue
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			f, err := os.Create(filepath.Join(dir, s.name))
			if err != nil {
				return nil, err
			}
			w.files = append(w.files, f)
			s.lw.file = f
			if red.has(s.which) && !tee.has(s.which) {
				s.lw.con = nil
			}
		}
	}
	if errDir != "" {
		// torchelastic's layout; a record left by an earlier run with the
		// same log directory is removed first.
		dir := filepath.Join(errDir, "attempt_"+strconv.Itoa(attempt), strconv.Itoa(lr))
		path := filepath.Join(dir, "error.json")
		if err := os.MkdirAll(dir, 0o755); err == nil {
			if err := os.Remove(path); err == nil || errors.Is(err, fs.ErrNotExist) {
				w.errorFile = path
			}
		}
	}
	args := sp.Args
	if sp.LocalRankArg {
		args = append(slices.Clip(args), "--local-rank="+strconv.Itoa(lr))
	}
	p, err := launch.Start(lr, launch.Command{
		Path: sp.Program, Args: args,
		Env:    append(WorkerEnv(sp.Env, *sp, rd, lr, restarts), launch.ErrorFileVars(w.errorFile)...),
		Stdout: w.out, Stderr: w.errw,
		OwnGroup:    true,
		OrphanGrace: sp.StopGrace,    // should this launcher die without stopping them
		WaitDelay:   2 * time.Second, // a grandchild holding the pipes open
	}, exits)
	if err != nil {
		for _, f := range w.files {
			f.Close()
		}
		return nil, err
	}
	w.proc = p
	return w, nil
}

// errorDir returns the directory under which the workers' error files go:
// beside their logs with a LogDir (kept, as the logs are), else a fresh
// temporary one (removed by Run unless a worker left more than its error
// file there, RemoveTempDir); "" when none can be made, and then the
// exit status alone decides the root cause.
func (a *Agent) errorDir(sp *Spec) string {
	if sp.LogDir != "" {
		return filepath.Join(sp.LogDir, sp.RunID)
	}
	dir, err := os.MkdirTemp("", "godist-run-")
	if err != nil {
		sp.Logf("no directory for the workers' error files (%v): root causes will be told by exit status alone", err)
		return ""
	}
	return dir
}

// failure describes worker w's failed exit e, with the error file it
// left, if any.
func (a *Agent) failure(sp *Spec, rd Round, w *worker, e launch.Exit) Failure {
	f := Failure{Rank: w.rank, LocalRank: w.localRank, NodeRank: rd.NodeRank, Role: sp.Role, Host: sp.Host,
		PID: e.PID, ExitCode: e.Code, Signal: e.Signal, Time: e.Time, Exited: e.Time, Stderr: w.tail.get(),
		StoppedAt: w.stoppedAt, Frozen: w.frozen}
	if f.ExitCode == 0 && f.Signal == 0 { // Wait failed for another reason (pipes)
		f.ExitCode = 1
		f.Stderr = append(f.Stderr, "godist run: "+e.Err.Error())
	}
	if w.errorFile != "" {
		rec, err := launch.ReadRecord(w.errorFile)
		switch {
		case err == nil:
			f.Recorded = rec
		case !errors.Is(err, fs.ErrNotExist):
			sp.Logf("rank %d left an error file that cannot be read (%v); its exit status alone counts", w.rank, err)
		}
	}
	return f
}
