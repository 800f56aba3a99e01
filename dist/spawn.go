package dist

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godist/godist/internal/tailbuf"
)

// SpawnRankEnv is the variable that marks a process started by Spawn as a
// worker, holding its rank.
const SpawnRankEnv = "GODIST_SPAWN_RANK"

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
// exits the process: status 0 when fn returns nil, 1 (after printing the
// error to stderr) otherwise. So, in a child, Spawn never returns, and a
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
// Children's stdout and stderr are the parent's. When a child fails, the
// parent gives the others half a second to fail on their own, kills the
// rest (children also die with the parent, on Linux) and returns a
// *SpawnError for the root cause: the first failure that is not a
// consequence of another's (a "rank N is gone" error, say). A program that must know
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("dist: Spawn cannot find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var tok [16]byte
	rand.Read(tok[:])
	runID := "spawn-" + hex.EncodeToString(tok[:4])
	env := spawnEnv(os.Environ())
	args := spawnArgs(os.Args[1:])

	type exit struct {
		rank int
		err  error
	}
	cmds := make([]*exec.Cmd, n)
	tails := make([]*tailbuf.Buffer, n)
	exits := make(chan exit, n)
	var mu sync.Mutex // guards starting against killing
	killAll := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range cmds {
			if c != nil && c.Process != nil {
				c.Process.Kill()
			}
		}
	}
	started := 0
	var first *SpawnError
	for r := range n {
		c := exec.Command(self, args...)
		c.Env = append(env,
			SpawnRankEnv+"="+strconv.Itoa(r),
			"RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r),
			"WORLD_SIZE="+strconv.Itoa(n), "LOCAL_WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"GODIST_TOKEN="+hex.EncodeToString(tok[:]), "GODIST_RUN_ID="+runID)
		tails[r] = &tailbuf.Buffer{Max: 4 << 10}
		c.Stdout = os.Stdout
		c.Stderr = teeWriter{os.Stderr, tails[r]}
		c.SysProcAttr = dieWithParent()
		mu.Lock()
		err := c.Start()
		if err == nil {
			cmds[r] = c
		}
		mu.Unlock()
		if err != nil {
			first = &SpawnError{Rank: r, ExitCode: -1, Err: err}
			break
		}
		started++
		go func() { exits <- exit{r, c.Wait()} }()
	}
	if first != nil {
		killAll()
	}
	// After the first failure the others get a moment to fail on their
	// own (they usually do within milliseconds, having lost a peer), so
	// that the root cause can be told from its consequences; then they
	// are killed.
	var failures []*SpawnError
	var settle <-chan time.Time
	for left := started; left > 0; {
		select {
		case e := <-exits:
			left--
			if e.err == nil || first != nil {
				continue
			}
			se := &SpawnError{Rank: e.rank, PID: cmds[e.rank].Process.Pid, ExitCode: -1, Err: e.err, Stderr: tails[e.rank].String()}
			var ee *exec.ExitError
			if errors.As(e.err, &ee) {
				se.ExitCode = ee.ExitCode()
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					se.Signal = ws.Signal()
				}
			}
			failures = append(failures, se)
			if settle == nil {
				settle = time.After(spawnSettle)
			}
		case <-settle:
			settle = nil
			if first == nil {
				first = rootCause(failures)
			}
			killAll()
		}
	}
	if first == nil && len(failures) > 0 {
		first = rootCause(failures)
	}
	if first != nil {
		return first
	}
	return nil
}

// spawnSettle is how long Spawn lets the other workers fail on their own
// after the first failure before it kills them.
const spawnSettle = 500 * time.Millisecond

// peerLost matches the stderr of a worker that failed because another
// died: godist's "rank N is gone", gloo's "Connection closed by peer".
var peerLost = regexp.MustCompile(`(?i)rank \d+ is gone|connection closed by peer|connection reset by peer|broken pipe`)

// rootCause returns the first failure, in the order seen, that is not a
// consequence of another's (a signal, or stderr that does not say a peer
// was lost), or the first failure when all are.
func rootCause(fs []*SpawnError) *SpawnError {
	for _, f := range fs {
		if f.Signal != 0 || !peerLost.MatchString(f.Stderr) {
			return f
		}
	}
	return fs[0]
}

// spawnEnv is the parent's environment without the variables a rank's
// identity is made of.
func spawnEnv(parent []string) []string {
	drop := map[string]bool{
		"RANK": true, "LOCAL_RANK": true, "WORLD_SIZE": true, "LOCAL_WORLD_SIZE": true, "MASTER_ADDR": true,
		"MASTER_PORT": true, "GODIST_TOKEN": true, "GODIST_RUN_ID": true, "TORCHELASTIC_RUN_ID": true, SpawnRankEnv: true,
		"SLURM_PROCID": true, "OMPI_COMM_WORLD_RANK": true,
	}
	var out []string
	for _, kv := range parent {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			out = append(out, kv)
		}
	}
	return out
}

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

// dieWithParent returns process attributes that kill the child when the
// parent dies, where the platform has them (Linux's Pdeathsig; set by
// reflection so that this file builds everywhere).
func dieWithParent() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	if f := reflect.ValueOf(attr).Elem().FieldByName("Pdeathsig"); f.IsValid() && f.CanSet() {
		f.Set(reflect.ValueOf(syscall.Signal(9)))
	}
	return attr
}

type teeWriter struct {
	a, b interface{ Write([]byte) (int, error) }
}

func (w teeWriter) Write(p []byte) (int, error) {
	w.a.Write(p)
	return w.b.Write(p)
}
