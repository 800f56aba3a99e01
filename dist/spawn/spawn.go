package spawn

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/internal/launch"
	"github.com/godist/godist/internal/tailbuf"
)

// RankEnv is the variable that marks a process started by Run as a
// worker, holding its rank.
const RankEnv = launch.SpawnRankEnv

// IsWorker reports whether this process is a worker that Run started
// (and so must not spawn again).
func IsWorker() bool { return os.Getenv(RankEnv) != "" }

// Error is the failure of one worker started by Run.
type Error struct {
	Rank     int
	PID      int
	ExitCode int            // -1 when killed by a signal
	Signal   syscall.Signal // the signal that killed it, or 0
	Stderr   string         // the last lines it wrote to stderr
	Err      error          // the underlying error (starting it, or waiting)
}

func (e *Error) Error() string {
	how := fmt.Sprintf("exit code %d", e.ExitCode)
	switch {
	case e.Signal != 0:
		how = "signal " + e.Signal.String()
	case e.PID == 0:
		how = fmt.Sprintf("could not start: %v", e.Err)
	}
	msg := fmt.Sprintf("spawn: rank %d (pid %d) failed: %s", e.Rank, e.PID, how)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += "; its last stderr lines:\n" + s
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Run runs fn as n ranks, each in its own process, in the style of
// torch.multiprocessing.spawn: in the parent it re-executes the current
// program (os.Executable with the same arguments) n times with the
// environment of env:// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, a free MASTER_PORT, a fresh GODIST_TOKEN and
// GODIST_RUN_ID) and waits for them; in each child it calls fn(rank) and
// exits the process: status 0 when fn returns nil, 1 (after recording the
// error with dist.RecordError and printing it to stderr) otherwise. So,
// in a child, Run never returns, and a child never spawns again; the
// code before the call runs in the parent and in every child, as a Python
// script's top level does under mp.spawn, so keep it cheap (the package's
// doc shows a program).
//
// Children's stdout and stderr are the parent's. Each child has a process
// group of its own: a Ctrl-C at the terminal reaches the parent alone,
// and on Linux, when the parent dies, even by SIGKILL, a watchdog sends
// every child's group SIGTERM and, 5 s later, SIGKILL. When a child fails,
// the parent gives the others half a second to fail on their own, kills
// the rest (with whatever they started) and returns an *Error for the
// root cause: the first failure that is not a consequence of another's.
// A child that fails records its error (see dist.RecordError) in a file
// Run gives it (GODIST_ERROR_FILE), and one that lost a peer that failed
// too is a consequence. A program that must know which side it is on
// before calling Run can ask IsWorker.
//
// Under `go test`, the children rerun the test binary with the same
// -test.run pattern, so Run belongs in a test that a parent test runs as
// a subprocess, or in a test selected alone.
func Run(n int, fn func(rank int) error) error {
	if v := os.Getenv(RankEnv); v != "" {
		runWorker(v, fn)
	}
	if n < 1 {
		return fmt.Errorf("spawn: Run of %d ranks: want at least 1", n)
	}
	j, err := newJob(n)
	if err != nil {
		return err
	}
	defer j.close()
	started, first := j.start()
	if first != nil {
		j.killAll()
	}
	if first = j.wait(started, first); first != nil {
		return first
	}
	return nil
}

// runWorker is Run in a child, whose rank is v: it calls fn and exits.
func runWorker(v string, fn func(rank int) error) {
	rank, err := strconv.Atoi(v)
	if err == nil {
		err = fn(rank)
	} else {
		err = fmt.Errorf("spawn: bad %s=%q", RankEnv, v)
	}
	if err != nil {
		dist.RecordError(err)
		fmt.Fprintf(os.Stderr, "spawn: rank %s: %v\n", v, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// job is one Run's children, as the parent sees them.
type job struct {
	n            int
	self         string   // the program to re-execute
	args         []string // its arguments
	port         int      // MASTER_PORT
	token, runID string
	// errDir holds the children's error files; without it ("") the root
	// cause is decided by exit status alone.
	errDir string

	procs []*launch.Proc // by rank; nil for one not started
	tails []*tailbuf.Buffer
	exits chan launch.Exit
}

// newJob finds what the children of a Run of n need: this program, a
// free port, a directory for their error files, a token and a run id.
func newJob(n int) (*job, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("spawn: Run cannot find this program to re-execute: %w", err)
	}
	port, err := launch.FreePort("127.0.0.1")
	if err != nil {
		return nil, fmt.Errorf("spawn: Run cannot find a free port: %w", err)
	}
	errDir, err := os.MkdirTemp("", "godist-spawn-")
	if err != nil {
		errDir = ""
	}
	return &job{
		n: n, self: self, args: spawnArgs(os.Args[1:]), port: port,
		token: launch.NewToken(), runID: "spawn-" + launch.RandomHex(4), errDir: errDir,
		procs: make([]*launch.Proc, n), tails: make([]*tailbuf.Buffer, n), exits: make(chan launch.Exit, n),
	}, nil
}

// close removes the children's error files.
func (j *job) close() {
	if j.errDir != "" {
		os.RemoveAll(j.errDir)
	}
}

// errorFile is rank r's error file, or "" when there is none.
func (j *job) errorFile(r int) string {
	if j.errDir == "" {
		return ""
	}
	return filepath.Join(j.errDir, "error-"+strconv.Itoa(r)+".json")
}

// start starts the children in rank order, until one fails to start. It
// returns how many started and the failure that stopped it, if any.
func (j *job) start() (started int, failed *Error) {
	base := os.Environ()
	for r := range j.n {
		rank := launch.Rank{Rank: r, LocalRank: r, WorldSize: j.n, LocalWorldSize: j.n, MasterAddr: "127.0.0.1", MasterPort: j.port,
			RunID: j.runID, Token: j.token, ErrorFile: j.errorFile(r)}
		j.tails[r] = &tailbuf.Buffer{Max: 4 << 10}
		p, err := launch.Start(r, launch.Command{
			Path: j.self, Args: j.args,
			// Slurm's and mpirun's ranks go too: the parent's rank in an
			// outer job is no child's.
			Env:    launch.Env(base, append(rank.Vars(), RankEnv+"="+strconv.Itoa(r)), "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"),
			Stdout: os.Stdout, Stderr: teeWriter{os.Stderr, j.tails[r]},
			// Killing a child kills what it started too; so does the
			// parent's death, by any signal (launch's watchdog).
			OwnGroup: true,
		}, j.exits)
		if err != nil {
			return started, &Error{Rank: r, ExitCode: -1, Err: err}
		}
		j.procs[r] = p
		started++
	}
	return started, nil
}

// killAll kills every child started, with whatever it started.
func (j *job) killAll() {
	for _, p := range j.procs {
		if p != nil {
			p.Kill() // an error means it has exited
		}
	}
}

// wait reaps the started children and returns the root cause of their
// failures, or first when one failed to start (the others are then
// killed already), or nil when all succeeded. After the first failure the
// others get a moment to fail on their own (they usually do within
// milliseconds, having lost a peer), so that the root cause can be told
// from its consequences; then they are killed.
func (j *job) wait(started int, first *Error) *Error {
	var failures []*Error
	var seen []launch.Failed
	pick := func() *Error { return failures[launch.RootCause(seen)] }
	var settle <-chan time.Time
	for left := started; left > 0; {
		select {
		case e := <-j.exits:
			left--
			if e.OK() || first != nil {
				continue
			}
			failures = append(failures, &Error{Rank: e.ID, PID: e.PID, ExitCode: e.Code, Signal: e.Signal, Err: e.Err, Stderr: j.tails[e.ID].String()})
			f := launch.Failed{Rank: e.ID, Signaled: e.Signal != 0, Exited: e.Time}
			if path := j.errorFile(e.ID); path != "" {
				f.Record, _ = launch.ReadRecord(path) // none, or unreadable: decided by exit status
			}
			seen = append(seen, f)
			if settle == nil {
				settle = time.After(settleTime)
			}
		case <-settle:
			settle = nil
			if first == nil {
				first = pick()
			}
			j.killAll()
		}
	}
	if first == nil && len(failures) > 0 {
		first = pick()
	}
	return first
}

// settleTime is how long Run lets the other workers fail on their own
// after the first failure before it kills them.
const settleTime = 500 * time.Millisecond

// spawnArgs drops the flag with which `go test` makes os.Exit(0) during a
// test a failure: a spawned child of a test binary exits 0 on purpose.
func spawnArgs(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(strings.TrimLeft(a, "-"), "test.paniconexit0") {
			continue
		}
		out = append(out, a)
	}
	return out
}

// teeWriter writes to a and b: a child's stderr to the parent's and to
// its tail.
type teeWriter struct {
	a, b interface{ Write([]byte) (int, error) }
}

func (w teeWriter) Write(p []byte) (int, error) {
	w.a.Write(p)
	return w.b.Write(p)
}
