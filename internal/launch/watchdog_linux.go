package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godist/godist/internal/shmfile"
)

// The watchdog process is this very binary, started as /proc/self/exe
// (the launcher's own program, even if its file has been replaced since)
// with argv[0] watchdogArg0 and watchdogEnv set to the launcher's pid.
// Any program that links this package, so every launcher (godist,
// spawn.Run's program, a test binary, a user's elastic.Agent), becomes
// the watchdog in this package's init, before its main runs.
//
// A gate (see gate) is this binary too, with argv[0] gateArg0 and
// gateEnv set, then the program's path and its argv; fd 3 is the pipe
// from the launcher.
const (
	watchdogArg0 = "godist-watchdog"
	watchdogEnv  = "GODIST_WATCHDOG"
	gateArg0     = "godist-gate"
	gateEnv      = "GODIST_GATE"
)

func init() {
	switch {
	case len(os.Args) == 1 && os.Args[0] == watchdogArg0 && os.Getenv(watchdogEnv) != "":
		os.Exit(runWatchdog(os.Stdin))
	case len(os.Args) >= 3 && os.Args[0] == gateArg0 && os.Getenv(gateEnv) == "1":
		os.Exit(runGate(os.NewFile(3, "gate"), os.Args[1], os.Args[2:]))
	}
}

// runGate waits for the launcher's go-ahead on f, then executes path
// with argv in its place. It returns only when it cannot.
func runGate(f *os.File, path string, argv []string) int {
	var b [1]byte
	n, _ := f.Read(b[:])
	f.Close()
	if n != 1 {
		return 1 // the launcher died before the watchdog had this group
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, gateEnv+"=") })
	err := syscall.Exec(path, argv, env)
	fmt.Fprintf(os.Stderr, "godist: cannot execute %s: %v\n", path, err)
	return 127
}

// gated turns cmd, not yet started, into its gate: this binary, which
// runs cmd's program once the gate opens. When this binary cannot be
// found again (no /proc), it returns no gate and cmd unchanged.
func gated(cmd *exec.Cmd) (*gate, error) {
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	// What exec would refuse now is refused here, and not by the gate.
	if _, err := exec.LookPath(cmd.Path); err != nil {
		return nil, err
	}
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		return nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(slices.Clip(env), gateEnv+"=1")
	cmd.Args = append([]string{gateArg0, cmd.Path}, cmd.Args...)
	cmd.Path = "/proc/self/exe"
	cmd.ExtraFiles = []*os.File{r}
	return &gate{r: r, w: w}, nil
}

// watchdogPoll is how often the watchdog looks at its groups, after the
// launcher's end, while it waits for them to go or for a grace to pass.
const watchdogPoll = 20 * time.Millisecond

// runWatchdog is the watchdog process: it guards the groups named on r
// until r ends, then stops them. Its exit status is 0.
func runWatchdog(r io.Reader) int {
	// A Ctrl-C or hang-up at the terminal is for the launcher, which
	// forwards it; this process must outlive the launcher.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var g guard
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for open := true; open; {
		select {
		case line, ok := <-lines:
			if !ok {
				open = false
				break
			}
			if pg, grace, err := parseWatchLine(line); err == nil {
				g.add(pg, grace)
			}
		case <-tick.C:
			removeGroupsShm(g.prune(groupAlive))
		}
	}
	removeGroupsShm(g.prune(groupAlive))
	for _, pg := range g.orphan(time.Now()) {
		syscall.Kill(-pg, syscall.SIGTERM)
	}
	for {
		removeGroupsShm(g.prune(groupAlive))
		for _, pg := range g.due(time.Now()) {
			syscall.Kill(-pg, syscall.SIGKILL)
		}
		if g.done() {
			return 0
		}
		d := watchdogPoll
		if w := g.wait(time.Now()); w > 0 && w < d {
			d = w
		}
		time.Sleep(d)
	}
}

// removeGroupsShm removes the files in /dev/shm of the processes of these
// groups, which have none left.
func removeGroupsShm(pgs []int) {
	for _, pg := range pgs {
		shmfile.Remove(pg, true)
	}
}

// groupAlive reports whether process group pg has a process (perhaps a
// zombie). A group whose processes belong to another user counts as
// alive.
func groupAlive(pg int) bool {
	return !errors.Is(syscall.Kill(-pg, 0), syscall.ESRCH)
}

// wd is this process's end of its watchdog, started at the first group
// it is given.
var wd struct {
	mu     sync.Mutex
	w      *os.File              // the pipe's write end; nil when no watchdog runs
	groups map[int]time.Duration // every group given, to hand a new watchdog should one die
	failed bool                  // a watchdog could not be started: do not try again
}

// watchGroup hands process group pg to the watchdog, starting it if need
// be. A watchdog that cannot be started is reported once on stderr; the
// workers then have the parent-death signal alone.
func watchGroup(pg int, grace time.Duration) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.failed {
		return
	}
	for q := range wd.groups {
		if !groupAlive(q) {
			delete(wd.groups, q)
		}
	}
	if wd.groups == nil {
		wd.groups = map[int]time.Duration{}
	}
	wd.groups[pg] = grace
	var err error
	for try := 0; try < 2; try++ {
		if wd.w != nil {
			if writeWatchdogLocked(watchLine(pg, grace)) {
				return
			}
			err = errors.New("it died")
			continue
		}
		if err = startWatchdogLocked(); err != nil {
			break
		}
		// A new watchdog gets every group, this one included.
		sent := true
		for q, gr := range wd.groups {
			sent = sent && writeWatchdogLocked(watchLine(q, gr))
		}
		if sent {
			return
		}
		err = errors.New("it died at once")
	}
	wd.failed = true
	fmt.Fprintf(os.Stderr, "godist: no watchdog for this launcher's workers (%v): should the launcher be killed, the processes its workers started may outlive it\n", err)
}

// writeWatchdogLocked writes line to the watchdog; on failure (it died)
// it drops the pipe, so that the next write starts another.
func writeWatchdogLocked(line string) bool {
	wd.w.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(wd.w, line); err != nil {
		wd.w.Close()
		wd.w = nil
		return false
	}
	return true
}

// startWatchdogLocked starts a watchdog: this binary, in a process group
// of its own, reading a pipe whose write end (close-on-exec, so no
// worker inherits it) stays here.
func startWatchdogLocked() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := &exec.Cmd{
		Path: "/proc/self/exe",
		Args: []string{watchdogArg0},
		// Whatever the binary's packages do when they load, one thread.
		Env: Env(os.Environ(), []string{watchdogEnv + "=" + strconv.Itoa(os.Getpid()),
			"GOMAXPROCS=1", "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"}),
		Stdin:       r,
		Dir:         "/",
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return err
	}
	go cmd.Wait() // reaps it, should it end before this process
	wd.w = w
	return nil
}
