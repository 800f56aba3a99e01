package launch

import (
	"bytes"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
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
