package launch

import (
	"errors"
	"io"
	"os/exec"
	"syscall"
	"time"

	"github.com/godist/godist/internal/shmfile"
)

// Command is how to start one worker.
type Command struct {
	Path string   // executed directly (no shell, no PATH search when it has a slash)
	Args []string // its arguments, without the program's name
	Env  []string // its whole environment (see Env)
	// Stdout and Stderr receive its output (nil discards it), with
	// exec.Cmd's rules: an *os.File is handed to the child as it is,
	// anything else is fed by a goroutine until the child and every
	// process holding the pipe are gone.
	Stdout, Stderr io.Writer
	// OwnGroup puts the worker in a process group of its own, where the
	// platform has them: Signal then reaches the worker's children too,
	// and a Ctrl-C at the terminal reaches only the launcher, which
	// decides what the workers get. The group is also handed to the
	// launcher's watchdog (Linux), which stops it should the launcher die
	// without doing so, even by SIGKILL: SIGTERM, then SIGKILL after
	// OrphanGrace.
	OwnGroup bool
	// OrphanGrace is, with OwnGroup, how long the worker's group gets
	// between the watchdog's SIGTERM and its SIGKILL after the launcher's
	// death; 0 means DefaultOrphanGrace.
	OrphanGrace time.Duration
	// WaitDelay bounds how long, after the worker exits, its output pipes
	// may stay open (a grandchild holding them): exec.Cmd.WaitDelay.
	WaitDelay time.Duration
}

// Proc is a started worker.
type Proc struct {
	cmd      *exec.Cmd
	ownGroup bool
}

// Start starts c, which dies with the launcher where the platform allows
// (Linux's parent-death signal; and with OwnGroup, the watchdog, which
// stops the processes the worker started too), and reports its end on
// exits, with id: exits must have room for it, or a reader, as every
// Start sends one Exit exactly once. Before it does, it removes the files
// that the worker (and with OwnGroup, its group) left in /dev/shm
// (removeShm).
func Start(id int, c Command, exits chan<- Exit) (*Proc, error) {
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Env = c.Env
	cmd.Stdout, cmd.Stderr = c.Stdout, c.Stderr
	cmd.SysProcAttr = procAttr(c.OwnGroup)
	cmd.WaitDelay = c.WaitDelay
	p := &Proc{cmd: cmd, ownGroup: c.OwnGroup && groupsSupported}
	// A worker in its own group is held at a gate until the watchdog has
	// its group: a launcher killed in between leaves nothing running.
	var g *gate
	if p.ownGroup {
		var err error
		if g, err = gated(cmd); err != nil {
			return nil, err
		}
	}
	err := cmd.Start()
	g.started()
	if err != nil {
		g.shut()
		return nil, err
	}
	if p.ownGroup {
		grace := c.OrphanGrace
		if grace <= 0 {
			grace = DefaultOrphanGrace
		}
		watchGroup(cmd.Process.Pid, grace)
		g.open()
	}
	go func() {
		err := cmd.Wait()
		at := time.Now()
		removeShm(cmd.Process.Pid, p.ownGroup)
		exits <- describe(id, cmd, err, at)
	}()
	return p, nil
}

// removeShm removes the files in /dev/shm that worker pid, which has
// exited, left there (shmfile): a godist worker unlinks its shared memory
// as soon as its peers have mapped it, but one killed in between (SIGKILL,
// or the launcher's SIGTERM, which a Go program does not catch) cannot.
// With ownGroup, those of its process group too, once nothing of the
// group is left; the watchdog removes them when something was (see
// runWatchdog).
func removeShm(pid int, ownGroup bool) {
	shmfile.Remove(pid, ownGroup && !groupAlive(pid))
}

// PID is the worker's process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Signal sends sig to the worker, and to its process group when it has
// one. An error usually means that it has exited.
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.ownGroup {
		return signalGroup(p.cmd.Process.Pid, sig)
	}
	return p.cmd.Process.Signal(sig)
}

// Frozen reports whether the worker's process is stopped (SIGSTOP, a
// debugger): it neither runs nor acts on any signal but SIGKILL and
// SIGCONT. Only Linux tells; elsewhere it is false.
func (p *Proc) Frozen() bool { return frozen(p.cmd.Process.Pid) }

// Kill sends SIGKILL (see Signal).
func (p *Proc) Kill() error { return p.Signal(syscall.SIGKILL) }

// Exit is how a worker ended.
type Exit struct {
	ID     int // the id given to Start
	PID    int
	Code   int            // its exit status; -1 when a signal killed it
	Signal syscall.Signal // the signal that killed it, or 0
	// Err is exec.Cmd.Wait's error: nil after exit status 0; an
	// *exec.ExitError after any other; or a failure to collect its output.
	Err  error
	Time time.Time // when the launcher saw it end
}

// OK reports an exit with status 0: Err is nil, or says only that a
// grandchild held the output pipes open past the WaitDelay.
func (e Exit) OK() bool {
	return e.Err == nil || (errors.Is(e.Err, exec.ErrWaitDelay) && e.Code == 0 && e.Signal == 0)
}

func describe(id int, cmd *exec.Cmd, err error, at time.Time) Exit {
	e := Exit{ID: id, PID: cmd.Process.Pid, Code: -1, Err: err, Time: at}
	if ps := cmd.ProcessState; ps != nil {
		e.Code = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = ws.Signal()
		}
	}
	return e
}
