package launch

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godist/godist/internal/shmfile"
)

func TestStartExit(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("runs /bin/sh")
	}
	exits := make(chan Exit, 3)
	var out, errb bytes.Buffer
	env := Env([]string{"PATH=" + os.Getenv("PATH"), "RANK=9"}, Rank{Rank: 1, WorldSize: 2, LocalWorldSize: 2, RunID: "x"}.Vars())
	p, err := Start(7, Command{Path: "/bin/sh", Args: []string{"-c", `echo "$RANK"; echo oops >&2; exit 3`}, Env: env,
		Stdout: &out, Stderr: &errb}, exits)
	if err != nil {
		t.Fatal(err)
	}
	e := <-exits
	if e.ID != 7 || e.PID != p.PID() || e.Code != 3 || e.Signal != 0 || e.Err == nil || e.OK() || e.Time.IsZero() {
		t.Errorf("exit %+v", e)
	}
	if out.String() != "1\n" || errb.String() != "oops\n" {
		t.Errorf("output %q, %q", out.String(), errb.String())
	}

	// Signal reaches the whole group of a worker in its own: the shell
	// waits on a child sleep, which must die too for Wait to return
	// (it holds the output pipe).
	p, err = Start(8, Command{Path: "/bin/sh", Args: []string{"-c", `sleep 30; true`}, Stdout: &out, OwnGroup: true}, exits)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	p.Signal(syscall.SIGTERM)
	select {
	case e = <-exits:
	case <-time.After(10 * time.Second):
		p.Kill()
		t.Fatal("the group did not die of SIGTERM")
	}
	if e.ID != 8 || e.Code != -1 || e.Signal != syscall.SIGTERM || e.OK() {
		t.Errorf("exit %+v", e)
	}
	if SignalName(e.Signal) != "SIGTERM" && runtime.GOOS == "linux" {
		t.Errorf("SignalName = %q", SignalName(e.Signal))
	}

	p, _ = Start(9, Command{Path: "/bin/sh", Args: []string{"-c", "exit 0"}}, exits)
	if e = <-exits; !e.OK() || e.Code != 0 {
		t.Errorf("exit %+v", e)
	}
	if _, err := Start(10, Command{Path: "/no/such/program"}, exits); err == nil {
		t.Error("started a program that does not exist")
	}
	if !slices.Contains(Identity, "RANK") || strings.Contains(out.String(), "9") {
		t.Error("RANK=9 was inherited")
	}
}

// TestFrozen: a worker stopped by SIGSTOP is frozen until SIGCONT.
func TestFrozen(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux tells a stopped process")
	}
	exits := make(chan Exit, 1)
	p, err := Start(0, Command{Path: "/bin/sleep", Args: []string{"30"}, OwnGroup: true}, exits)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Kill(); <-exits }()
	if p.Frozen() {
		t.Fatal("a running worker is frozen")
	}
	p.Signal(syscall.SIGSTOP)
	for deadline := time.Now().Add(10 * time.Second); !p.Frozen(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a worker stopped by SIGSTOP is not frozen")
		}
	}
	p.Signal(syscall.SIGCONT)
	for deadline := time.Now().Add(10 * time.Second); p.Frozen(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a worker is frozen after SIGCONT")
		}
	}
}

// TestStartRemovesShm (issue 27, item 6): a worker killed before it could
// unlink its files in /dev/shm leaves none: Start removes the worker's
// before it reports its exit, and the watchdog those of its group's other
// processes once they are gone too. The files are named as shmfile names
// them, by pid and process group; another's stays.
func TestStartRemovesShm(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process groups and /dev/shm")
	}
	if _, err := os.Stat(shmfile.Dir); err != nil {
		t.Skip(err)
	}
	other := filepath.Join(shmfile.Dir, fmt.Sprintf("godist-%d-%d-0000000000000000-t-other", 1<<30+os.Getpid(), 1<<30+os.Getpid()))
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Skip(err)
	}
	defer os.Remove(other)
	exits := make(chan Exit, 1)
	// The worker's child outlives it a moment, its output elsewhere.
	p, err := Start(0, Command{Path: "/bin/sh", Args: []string{"-c", `sleep 1 >/dev/null 2>&1 &
: > /dev/shm/godist-$!-$$-0000000000000000-t-child
: > /dev/shm/godist-$$-$$-0000000000000000-t-worker
kill -9 $$`}, OwnGroup: true}, exits)
	if err != nil {
		t.Fatal(err)
	}
	pid := p.PID()
	mine := func() []string {
		m, _ := filepath.Glob(fmt.Sprintf("%s/godist-*-%d-0000000000000000-t-*", shmfile.Dir, pid))
		return m
	}
	defer func() {
		for _, f := range mine() {
			os.Remove(f)
		}
	}()
	e := <-exits
	if e.Signal != syscall.SIGKILL {
		t.Fatalf("exit %+v", e)
	}
	if _, err := os.Stat(fmt.Sprintf("%s/godist-%d-%d-0000000000000000-t-worker", shmfile.Dir, pid, pid)); err == nil {
		t.Errorf("the worker's file outlived its exit")
	}
	for deadline := time.Now().Add(20 * time.Second); len(mine()) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%v outlived the worker's group by 20 s", mine())
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another process's file is gone: %v", err)
	}
}
