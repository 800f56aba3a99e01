package dist

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/godist/godist/internal/launch"
	"github.com/godist/godist/internal/tailbuf"
)

// SpawnRankEnv is the variable that marks a process started by Spawn as a
// worker, holding its rank.
const SpawnRankEnv = launch.SpawnRankEnv

// IsSpawnedWorker reports whether this process is a worker that Spawn
// started (and so must not spawn again).
func IsSpawnedWorker() bool { return os.Getenv(SpawnRankEnv) != "" }

// SpawnError is the failure of one worker started by Spawn.
type SpawnError struct {
	Rank     int
	PID      int
	ExitCode int            // -1 when killed by a signal
	Signal   syscall.Signal // the signal that killed it, or 0
	Stderr   string         // the last lines it wrote to stderr
	Err      error          // the underlying error (starting it, or waiting)
}

func (e *SpawnError) Error() string {
	how := fmt.Sprintf("exit code %d", e.ExitCode)
	switch {
	case e.Signal != 0:
		how = "signal " + e.Signal.String()
	case e.PID == 0:
		how = fmt.Sprintf("could not start: %v", e.Err)
	}
	msg := fmt.Sprintf("dist: spawned rank %d (pid %d) failed: %s", e.Rank, e.PID, how)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += "; its last stderr lines:\n" + s
	}
	return msg
}

func (e *SpawnError) Unwrap() error { return e.Err }

// Spawn runs fn as n ranks, each in its own process, in the style of
// torch.multiprocessing.spawn: in the parent it re-executes the current
// program (os.Executable with the same arguments) n times with the
// environment of env:// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, a free MASTER_PORT, a fresh GODIST_TOKEN and
// GODIST_RUN_ID) and waits for them; in each child it calls fn(rank) and
// exits the process: status 0 when fn returns nil, 1 (after recording the
// error with RecordError and printing it to stderr) otherwise. So, in a child, Spawn never returns, and a
// child never spawns again.
//
//	func main() {
//		// Code here runs in the parent and in every child, as a Python
//		// script's top level does under mp.spawn: keep it cheap.
//		err := dist.Spawn(4, func(rank int) error {
//			g, err := dist.Init(context.Background(), dist.Options{}) // env://
//			if err != nil {
//				return err
//			}
//			defer g.Destroy()
//			...
//		})
//		if err != nil { // only the parent gets here
//			log.Fatal(err)
//		}
//	}
//
// Children's stdout and stderr are the parent's. Each child has a process
// group of its own: a Ctrl-C at the terminal reaches the parent alone,
// and on Linux, when the parent dies, even by SIGKILL, a watchdog sends
// every child's group SIGTERM and, 5 s later, SIGKILL. When a child fails,
// the parent gives the others half a second to fail on their own, kills
// the rest (with whatever they started) and returns a
// *SpawnError for the root cause: the first failure that is not a
// consequence of another's. A child that fails records its error (see
// RecordError) in a file Spawn gives it (GODIST_ERROR_FILE), and one that
// lost a peer that failed too is a consequence. A program that must know
// which side it is on before calling Spawn can ask IsSpawnedWorker.
//
// Under `go test`, the children rerun the test binary with the same
// -test.run pattern, so Spawn belongs in a test that a parent test runs
// as a subprocess, or in a test selected alone.
func Spawn(n int, fn func(rank int) error) error {
	if v := os.Getenv(SpawnRankEnv); v != "" {
		rank, err := strconv.Atoi(v)
		if err == nil {
			err = fn(rank)
		} else {
			err = fmt.Errorf("dist: bad %s=%q", SpawnRankEnv, v)
		}
		if err != nil {
			RecordError(err)
			fmt.Fprintf(os.Stderr, "dist: spawned rank %s: %v\n", v, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if n < 1 {
		return fmt.Errorf("dist: Spawn of %d ranks: want at least 1", n)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("dist: Spawn cannot find this program to re-execute: %w", err)
	}
	port, err := launch.FreePort("127.0.0.1")
	if err != nil {
		return fmt.Errorf("dist: Spawn cannot find a free port: %w", err)
	}
	// The children's error files; without the directory, the root cause
	// is decided by exit status alone.
	errDir, err := os.MkdirTemp("", "godist-spawn-")
	if err == nil {
		defer os.RemoveAll(errDir)
	}
	errorFile := func(r int) string {
		if errDir == "" {
			return ""
		}
		return filepath.Join(errDir, "error-"+strconv.Itoa(r)+".json")
	}
	token, runID := launch.NewToken(), "spawn-"+launch.RandomHex(4)
	base := os.Environ()
	args := spawnArgs(os.Args[1:])

	procs := make([]*launch.Proc, n)
	tails := make([]*tailbuf.Buffer, n)
	exits := make(chan launch.Exit, n)
	killAll := func() {
		for _, p := range procs {
			if p != nil {
				p.Kill() // an error means it has exited
			}
		}
	}
	started := 0
	var first *SpawnError
	for r := range n {
		rank := launch.Rank{Rank: r, LocalRank: r, WorldSize: n, LocalWorldSize: n, MasterAddr: "127.0.0.1", MasterPort: port,
			RunID: runID, Token: token, ErrorFile: errorFile(r)}
		tails[r] = &tailbuf.Buffer{Max: 4 << 10}
		p, err := launch.Start(r, launch.Command{
			Path: self, Args: args,
			// Slurm's and mpirun's ranks go too: the parent's rank in an
			// outer job is no child's.
			Env:    launch.Env(base, append(rank.Vars(), SpawnRankEnv+"="+strconv.Itoa(r)), "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"),
			Stdout: os.Stdout, Stderr: teeWriter{os.Stderr, tails[r]},
			// Killing a child kills what it started too; so does the
			// parent's death, by any signal (launch's watchdog).
			OwnGroup: true,
		}, exits)
		if err != nil {
			first = &SpawnError{Rank: r, ExitCode: -1, Err: err}
			break
		}
		procs[r] = p
		started++
	}
	if first != nil {
		killAll()
	}
	// After the first failure the others get a moment to fail on their
	// own (they usually do within milliseconds, having lost a peer), so
	// that the root cause can be told from its consequences; then they
	// are killed.
	var failures []*SpawnError
	var seen []launch.Failed
	pick := func() *SpawnError { return failures[launch.RootCause(seen)] }
	var settle <-chan time.Time
	for left := started; left > 0; {
		select {
		case e := <-exits:
			left--
			if e.OK() || first != nil {
				continue
			}
			failures = append(failures, &SpawnError{Rank: e.ID, PID: e.PID, ExitCode: e.Code, Signal: e.Signal, Err: e.Err, Stderr: tails[e.ID].String()})
			f := launch.Failed{Rank: e.ID, Signaled: e.Signal != 0, Exited: e.Time}
			if path := errorFile(e.ID); path != "" {
				f.Record, _ = launch.ReadRecord(path) // none, or unreadable: decided by exit status
			}
			seen = append(seen, f)
			if settle == nil {
				settle = time.After(spawnSettle)
			}
		case <-settle:
			settle = nil
			if first == nil {
				first = pick()
			}
			killAll()
		}
	}
	if first == nil && len(failures) > 0 {
		first = pick()
	}
	if first != nil {
		return first
	}
	return nil
}

// spawnSettle is how long Spawn lets the other workers fail on their own
// after the first failure before it kills them.
const spawnSettle = 500 * time.Millisecond

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

type teeWriter struct {
	a, b interface{ Write([]byte) (int, error) }
}

func (w teeWriter) Write(p []byte) (int, error) {
	w.a.Write(p)
	return w.b.Write(p)
}
