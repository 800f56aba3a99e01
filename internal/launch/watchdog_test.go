package launch

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestWatchLine(t *testing.T) {
	for _, c := range []struct {
		pg    int
		grace time.Duration
	}{{2, 0}, {12345, 5 * time.Second}, {1 << 22, 1500 * time.Millisecond}} {
		line := watchLine(c.pg, c.grace)
		pg, grace, err := parseWatchLine(strings.TrimSuffix(line, "\n"))
		if err != nil || pg != c.pg || grace != c.grace || !strings.HasSuffix(line, "\n") {
			t.Errorf("%q: %d %v %v", line, pg, grace, err)
		}
	}
	for _, bad := range []string{"", "+", "+12", "12 5", "+1 5", "+0 5", "+-3 5", "+12 -5", "+12 5 6", "+012 5", "+12 05",
		"+12  5", "+ 12 5", "+12 99999999999999999999", "+12 86400001"} {
		if pg, grace, err := parseWatchLine(bad); err == nil {
			t.Errorf("parseWatchLine(%q) = %d, %v; want an error", bad, pg, grace)
		}
	}
}

func FuzzParseWatchLine(f *testing.F) {
	f.Add("+12345 5000")
	f.Add("+2 0")
	f.Add("-7 1")
	f.Fuzz(func(t *testing.T, s string) {
		pg, grace, err := parseWatchLine(s)
		if err != nil {
			return
		}
		if pg <= 1 || grace < 0 {
			t.Fatalf("%q: accepted %d, %v", s, pg, grace)
		}
		if again := watchLine(pg, grace); again != s+"\n" {
			t.Fatalf("%q decodes to %d, %v, which encode to %q", s, pg, grace, again)
		}
	})
}

// TestGuard drives the watchdog's core with a made-up clock and made-up
// processes.
func TestGuard(t *testing.T) {
	t0 := time.Unix(1000, 0)
	alive := map[int]bool{10: true, 20: true, 30: true, 40: true}
	isAlive := func(pg int) bool { return alive[pg] }
	var g guard
	if !g.done() || g.wait(t0) != 0 || len(g.orphan(t0)) != 0 {
		t.Fatal("an empty guard has work")
	}
	g.add(10, time.Second)
	g.add(20, 3*time.Second)
	g.add(30, 0)
	g.add(40, time.Second)
	g.add(10, 2*time.Second) // the longer grace wins
	g.add(10, time.Second)
	if g.done() || len(g.due(t0.Add(time.Hour))) != 0 || g.wait(t0) != 0 {
		t.Fatal("groups are due before the launcher is gone")
	}
	// 40 ends while the launcher lives: it is forgotten (its number may
	// be reused).
	delete(alive, 40)
	if gone := g.prune(isAlive); !slices.Equal(gone, []int{40}) {
		t.Fatalf("pruned %v, want [40]", gone)
	}
	if got := g.orphan(t0); !slices.Equal(got, []int{10, 20, 30}) {
		t.Fatalf("SIGTERM to %v, want [10 20 30]", got)
	}
	if got := g.due(t0); !slices.Equal(got, []int{30}) { // no grace
		t.Fatalf("due at once: %v", got)
	}
	if w := g.wait(t0); w != 2*time.Second {
		t.Fatalf("wait %v, want 2s", w)
	}
	// 20 obeys SIGTERM.
	delete(alive, 20)
	g.prune(isAlive)
	if got := g.due(t0.Add(1999 * time.Millisecond)); len(got) != 0 || g.done() {
		t.Fatalf("due before its grace: %v", got)
	}
	if got := g.due(t0.Add(2 * time.Second)); !slices.Equal(got, []int{10}) {
		t.Fatalf("due after its grace: %v", got)
	}
	if got := g.due(t0.Add(time.Hour)); len(got) != 0 || !g.done() || g.wait(t0) != 0 {
		t.Fatalf("killed twice (%v), or not done", got)
	}
}

// TestMain lets this test binary be a launcher (launcherEnv) that a test
// kills.
func TestMain(m *testing.M) {
	if mode := os.Getenv(launcherEnv); mode != "" {
		os.Exit(testLauncher(mode, os.Getenv("D")))
	}
	os.Exit(m.Run())
}

const launcherEnv = "LAUNCH_TEST_LAUNCHER"

// testLauncher starts two workers, each a shell with a child, that write
// their pids to dir/pid.N, and waits for both files; then, in mode
// "block", it waits to be killed, and in mode "exit" it exits at once,
// its workers still running. In mode "gate", its one worker stays at the
// gate until the launcher is killed (and must never run); "gatebin" is
// "gate" through this binary's gate instead of the shell's.
func testLauncher(mode, dir string) int {
	exits := make(chan Exit, 2)
	if mode == "gate" || mode == "gatebin" {
		cmd := exec.Command("/bin/sh", "-c", `echo ran > "$D/ran"`) // the shell's gate
		if mode == "gatebin" {
			cmd.Env = append(os.Environ(), "A.B=1") // a name the shell would drop: this binary's gate
		}
		cmd.SysProcAttr = procAttr(true)
		g, err := gated(cmd)
		want := map[string]string{"gate": "/bin/sh", "gatebin": "/proc/self/exe"}[mode]
		if !shellThere() {
			want = "/proc/self/exe"
		}
		if cmd.Path != want {
			err = fmt.Errorf("the gate is %s, want %s", cmd.Path, want)
		}
		if err == nil && g != nil {
			err = cmd.Start()
			g.started()
		}
		if err != nil || g == nil {
			fmt.Fprintln(os.Stderr, "gate:", err)
			return 1
		}
		fmt.Println(cmd.Process.Pid)
		select {}
	}
	for r := range 2 {
		_, err := Start(r, Command{Path: "/bin/sh", Args: []string{"-c", `sleep 30 & echo $$ $! > "$D/t$1"; mv "$D/t$1" "$D/pid$1"; wait`, "sh", strconv.Itoa(r)},
			OwnGroup: true, OrphanGrace: 500 * time.Millisecond}, exits)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	for r := range 2 {
		for {
			if _, err := os.Stat(filepath.Join(dir, "pid"+strconv.Itoa(r))); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	fmt.Println("running")
	if mode == "exit" {
		return 0
	}
	select {}
}

// TestWatchdog: when a launcher dies without stopping its workers, by
// SIGKILL or by just exiting, its workers and what they started are
// stopped soon after; a worker held at its gate never runs its program.
func TestWatchdog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills launchers")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the watchdog is Linux's")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"block", "exit", "gate", "gatebin"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			var out bytes.Buffer
			cmd := exec.Command(self)
			// (GORACE: a race-enabled binary otherwise sleeps 1s in exit.)
			cmd.Env = append(os.Environ(), launcherEnv+"="+mode, "D="+dir, "GORACE=atexit_sleep_ms=0")
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdout, cmd.Stderr = pw, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pw.Close()
			defer cmd.Process.Kill()
			line := make(chan string, 1)
			go func() {
				b := make([]byte, 64)
				n, _ := pr.Read(b)
				line <- strings.TrimSpace(string(b[:n]))
				pr.Close()
			}()
			var first string
			select {
			case first = <-line:
			case <-time.After(20 * time.Second):
				t.Fatal("the launcher did not start its workers")
			}
			var pids []int
			if strings.HasPrefix(mode, "gate") {
				pid, err := strconv.Atoi(first)
				if err != nil {
					t.Fatalf("%q: %s", first, out.String())
				}
				pids = []int{pid}
			} else {
				if first != "running" {
					t.Fatalf("%q: %s", first, out.String())
				}
				for r := range 2 {
					b, _ := os.ReadFile(filepath.Join(dir, "pid"+strconv.Itoa(r)))
					for _, f := range strings.Fields(string(b)) {
						pid, _ := strconv.Atoi(f)
						pids = append(pids, pid)
					}
				}
			}
			defer func() {
				for _, pid := range pids {
					if processAlive(pid) {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}()
			gone := time.Now()
			if mode != "exit" {
				cmd.Process.Signal(syscall.SIGKILL)
			}
			cmd.Wait()
			for _, pid := range pids {
				for processAlive(pid) {
					if time.Since(gone) > 3*time.Second {
						t.Fatalf("pid %d (of %v) still runs 3s after the launcher ended", pid, pids)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			t.Logf("%v gone %v after the launcher", pids, time.Since(gone).Round(time.Millisecond))
			if _, err := os.Stat(filepath.Join(dir, "ran")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a worker held at its gate ran its program (%v)", err)
			}
		})
	}
}

// TestGatedWorker: a worker in its own group runs through its gate and
// sees no difference: its pid is the one Start reports, its argv,
// environment and open files are its own; through the shell's gate (a
// program named by its path) and through this binary's (a program found
// in PATH, or an environment the shell would change) alike.
func TestGatedWorker(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("gates are Linux's")
	}
	exits := make(chan Exit, 1)
	script := `echo $$; tr '\0' ' ' < /proc/$$/cmdline; echo; tr '\0' '\n' < /proc/$$/environ | sort; ls /proc/$$/fd; exit 4`
	for _, c := range []struct {
		name, path, gate string
		env              []string // beside this process's PATH, unless noPath
		noPath           bool
	}{
		{"shell", "/bin/sh", "/bin/sh", []string{"X=x", "PWD=/nowhere"}, false},
		{"shell, no PWD", "/bin/sh", "/bin/sh", []string{"X=x", "_=/usr/bin/y"}, false},
		{"shell, found in PATH", "sh", "/bin/sh", []string{"X=x"}, false},
		{"shell, no PATH", "/bin/sh", "/bin/sh", []string{"X=x"}, true},
		{"binary, another PATH", "sh", "/proc/self/exe", []string{"X=x", "PATH=/bin:/usr/bin:/nonexistent"}, false},
		{"binary, found in PATH, none passed on", "sh", "/proc/self/exe", []string{"X=x"}, true},
		{"binary, odd names", "/bin/sh", "/proc/self/exe", []string{"X=x", "A.B=1", "1Y=2", "NOVALUE"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := c.env
			if !c.noPath {
				env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
			}
			cmd := exec.Command(c.path, "-c", script)
			cmd.Env = env
			want := c.gate
			if !shellThere() { // /bin/sh is not dash: this binary's gate everywhere
				want = "/proc/self/exe"
			}
			if g, err := gated(cmd); err != nil || g == nil || cmd.Path != want {
				t.Fatalf("gate %q (%v); want %s", cmd.Path, err, want)
			} else {
				g.shut()
				g.started()
			}
			var outs [2]bytes.Buffer
			var pids [2]int
			for i, own := range []bool{false, true} {
				p, err := Start(1, Command{Path: c.path, Args: []string{"-c", script}, Env: env, Stdout: &outs[i], OwnGroup: own}, exits)
				if err != nil {
					t.Fatal(err)
				}
				e := <-exits
				if e.Code != 4 || e.PID != p.PID() {
					t.Fatalf("exit %+v, pid %d; want exit 4 and that pid", e, p.PID())
				}
				pids[i] = p.PID()
			}
			ungated, _ := strings.CutPrefix(outs[0].String(), strconv.Itoa(pids[0])+"\n")
			viaGate, found := strings.CutPrefix(outs[1].String(), strconv.Itoa(pids[1])+"\n")
			if !found || ungated != viaGate || !strings.Contains(viaGate, "\nX=x\n") {
				t.Errorf("without the gate:\n%s\nthrough it:\n%s", outs[0].String(), outs[1].String())
			}
		})
	}
	// Its signal mask, ignored signals and file limit are those it
	// would have had without the gate.
	var outs [2]bytes.Buffer
	for i, own := range []bool{false, true} {
		if _, err := Start(3, Command{Path: "/bin/sh", Args: []string{"-c", `grep -E '^Sig(Blk|Ign)' /proc/self/status; ulimit -n`},
			Stdout: &outs[i], OwnGroup: own}, exits); err != nil {
			t.Fatal(err)
		}
		<-exits
	}
	if outs[0].String() != outs[1].String() || outs[0].Len() == 0 {
		t.Errorf("signals and limits: without the gate %q, with it %q", outs[0].String(), outs[1].String())
	}
	for _, bad := range []string{"/no/such/program", "no-such-program-anywhere", "/etc/passwd"} {
		if _, err := Start(2, Command{Path: bad, OwnGroup: true}, exits); err == nil {
			t.Errorf("started %s", bad)
		}
	}
}

// processAlive reports whether pid is a process that has not exited (a
// zombie has).
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}
