package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gatebin "github.com/godist/godist/internal/launch/gate"
	"github.com/godist/godist/internal/shmfile"
)

// The watchdog process is this very binary, started as /proc/self/exe
// (the launcher's own program, even if its file has been replaced since)
// with argv[0] watchdogArg0 and watchdogEnv set to the launcher's pid.
// Any program that links this package, so every launcher (godist,
// spawn.Run's program, a test binary, a user's elastic.Agent), becomes
// the watchdog in this package's init, before its main runs.
//
// A gate (see gated) is this binary too, run by package gate (imported
// here, so that every launcher's binary has it) early in its
// initialisation.
const (
	watchdogArg0 = "godist-watchdog"
	watchdogEnv  = "GODIST_WATCHDOG"
	gateArg0     = gatebin.Arg0
	gateEnv      = gatebin.Env
)

func init() {
	if len(os.Args) == 1 && os.Args[0] == watchdogArg0 && os.Getenv(watchdogEnv) != "" {
		os.Exit(runWatchdog(os.Stdin))
	}
}

// gated turns cmd, not yet started, into its gate: a process that runs
// cmd's program once the gate opens. When the shell would run the same
// program with the same argv and environment (shellGateFits), the gate
// is /bin/sh running shGate, which costs a worker about a millisecond;
// otherwise, or without /bin/sh, it is this binary again (package gate:
// 6-10 ms for godist's own, a large Go binary starting), and without
// /proc no gate at all (cmd is left unchanged).
func gated(cmd *exec.Cmd) (*gate, error) {
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	// What exec would refuse now is refused here, and not by the gate.
	if _, err := exec.LookPath(cmd.Path); err != nil {
		return nil, err
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	pwd, byShell := shellGateFits(cmd, env)
	if !byShell {
		if _, err := os.Stat("/proc/self/exe"); err != nil {
			return nil, nil
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{r}
	if byShell {
		// sh -c script $0 $1 $2...: $1 is the environment's PWD, "$@"
		// after it the program's argv, its name first, as exec gives it.
		cmd.Args = append([]string{gateArg0, "-c", shGate, gateArg0, pwd}, cmd.Args...)
		cmd.Path = "/bin/sh"
		cmd.Env = env
		return &gate{r: r, w: w}, nil
	}
	cmd.Env = append(slices.Clip(env), gateEnv+"=1")
	cmd.Args = append([]string{gateArg0, cmd.Path}, cmd.Args...)
	cmd.Path = "/proc/self/exe"
	return &gate{r: r, w: w}, nil
}

// shGate is the gate as a shell script. It reads a line from fd 3 (the
// launcher writes one newline to open the gate; a pipe that ends without
// it fails the read, and the shell exits with status 1), then executes the
// program in its place without fd 3. The shell changes one variable of
// the environment it passes on, PWD (it sets it to its working directory,
// and the read writes it), so the script puts back the one it was given:
// $1 is "-" for none, else "=" and its value.
const shGate = `read -r PWD <&3 || exit 1; case $1 in -) unset PWD;; *) PWD=${1#?}; export PWD;; esac; shift; exec "$@" 3<&-`

// shellGateFits reports whether cmd, to run with env, can pass through
// the shell's gate unchanged, and if so, shGate's first argument. The
// shell finds a name without a slash in its environment's PATH, so that
// must be the PATH exec found cmd's program in, this process's; and it
// drops from the environment the names that are not its variables'
// ("A.B", "1X").
func shellGateFits(cmd *exec.Cmd, env []string) (pwd string, ok bool) {
	if len(cmd.Args) == 0 || !shellThere() {
		return "", false
	}
	byPath := cmd.Args[0] == cmd.Path && strings.Contains(cmd.Path, "/")
	searched := !strings.Contains(cmd.Args[0], "/")
	if !byPath && !searched {
		return "", false
	}
	pwd = "-"
	path, hasPath := "", false
	for _, kv := range env {
		name, value, found := strings.Cut(kv, "=")
		if !found || !shellName(name) {
			return "", false
		}
		switch name {
		case "PWD":
			pwd = "=" + value // the last one, as the shell keeps
		case "PATH":
			path, hasPath = value, true
		}
	}
	if searched {
		if own, ok := os.LookupEnv("PATH"); !ok || !hasPath || own != path {
			return "", false
		}
		if found, err := exec.LookPath(cmd.Args[0]); err != nil || found != cmd.Path {
			return "", false
		}
	}
	return pwd, true
}

// shellName reports whether s is a shell variable's name.
func shellName(s string) bool {
	for i, c := range []byte(s) {
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return s != ""
}

// shellThere reports whether /bin/sh can be the gate: it must be dash
// (Debian's and Ubuntu's /bin/sh), whose changes to the environment it
// passes on shGate knows. bash, /bin/sh elsewhere, also sets SHLVL and
// "_"; there the gate is this binary.
var shellThere = sync.OnceValue(func() bool {
	path, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil || filepath.Base(path) != "dash" {
		return false
	}
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
})

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
