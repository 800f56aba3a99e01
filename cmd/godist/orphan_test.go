package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunLauncherKilled is issue 19, item 7: a SIGKILL of godist run must
// not leave its workers, nor their children, running. Each worker is a
// shell that writes its own pid and a child's to a file; the test kills
// the launcher with SIGKILL once all are running, and every one of those
// processes must be gone soon after: at once when they obey SIGTERM, after
// --stop-timeout when they ignore it. The parent-death signal reaches the
// shells alone; their children are what the watchdog is for.
func TestRunLauncherKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs godist run and kills it")
	}
	if runtime.GOOS != "linux" {
		t.Skip("process groups and the watchdog are Linux's")
	}
	const grace = 1500 * time.Millisecond
	for _, c := range []struct {
		name   string
		script string // writes "SHELL_PID CHILD_PID" to $D/pid.$LOCAL_RANK
		ignore bool   // its processes ignore SIGTERM
	}{
		// The worker is the sleep itself: the parent-death signal's case.
		{"Exec", `echo $$ $$ > "$D/t.$LOCAL_RANK"; mv "$D/t.$LOCAL_RANK" "$D/pid.$LOCAL_RANK"; exec sleep 30`, false},
		// A child of the worker (a data loader, a shell pipeline).
		{"Child", `sleep 30 & echo $$ $! > "$D/t.$LOCAL_RANK"; mv "$D/t.$LOCAL_RANK" "$D/pid.$LOCAL_RANK"; wait`, false},
		// Both ignore SIGTERM (the ignored disposition is inherited): only
		// the SIGKILL after the grace period stops the child.
		{"IgnoresTERM", `trap "" TERM; sleep 30 & echo $$ $! > "$D/t.$LOCAL_RANK"; mv "$D/t.$LOCAL_RANK" "$D/pid.$LOCAL_RANK"; wait`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			p := start(t, 60*time.Second, cleanEnv("GODIST_TEST_AS_MAIN=1", "D="+dir), self,
				"run", "--standalone", "--nproc-per-node", "2", "--stop-timeout", grace.String(), "/bin/sh", "-c", c.script)
			var pids []int
			t.Cleanup(func() {
				for _, pid := range pids {
					if alive(pid) {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			})
			for r := range 2 {
				pids = append(pids, waitPIDs(t, p, filepath.Join(dir, "pid."+strconv.Itoa(r)), 20*time.Second)...)
			}
			killed := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			p.wait()
			limit := 2 * time.Second
			if c.ignore {
				limit += grace
			}
			for _, pid := range pids {
				for alive(pid) {
					if time.Since(killed) > limit {
						t.Fatalf("pid %d (of %v) still runs %v after the launcher's SIGKILL\n%v", pid, pids, limit, p)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			took := time.Since(killed)
			t.Logf("workers and children (%v) gone %v after the launcher's SIGKILL", pids, took.Round(time.Millisecond))
			if c.ignore && took < grace {
				t.Errorf("processes that ignore SIGTERM gone after %v, before the grace period %v", took, grace)
			}
		})
	}
}

// waitPIDs returns the pids written to path once it exists.
func waitPIDs(t *testing.T, p *proc, path string, limit time.Duration) []int {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			var pids []int
			for _, f := range strings.Fields(string(b)) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("%s: %q", path, b)
				}
				pids = append(pids, pid)
			}
			return pids
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		select {
		case <-p.done:
			t.Fatalf("the launcher ended before %s was written: %v", path, p)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v: %v", path, limit, p)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid is a process that has not exited (a zombie
// has).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) STATE ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}
