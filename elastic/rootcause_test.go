package elastic

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// recordSh defines rec KIND PEER MESSAGE in a worker's shell: it writes
// the worker's error file as dist.RecordError does, with the time now to
// the nanosecond.
const recordSh = `rec() {
	printf '{"version":1,"rank":%s,"kind":"%s","peer":%s,"message":"%s","timestamp":%s,"time_ns":%s}' \
		"$RANK" "$1" "$2" "$3" "$(date +%s)" "$(date +%s%N)" > "$GODIST_ERROR_FILE.tmp"
	mv "$GODIST_ERROR_FILE.tmp" "$GODIST_ERROR_FILE"
}
`

// TestAgentKilledRankReapedLate is issue 27, item 4: rank 2 is SIGKILLed
// and reaped late (a child of its holds its output open); rank 0 sees it
// go and fails; the agent stops the others; rank 1 dies of its SIGTERM;
// rank 3, which ignores SIGTERM, sees rank 1 go before it learns of rank
// 2, and fails blaming rank 1, before rank 2 is reaped. Rank 2 is the
// root cause. Before, the failures were ordered by when the agent reaped
// them, and rank 1, which it had stopped, was none of them: rank 3, the
// first failure that blamed no failed rank, was the root cause.
func TestAgentKilledRankReapedLate(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process groups")
	}
	var out, errb lockedWriter
	out.w, errb.w = &bytes.Buffer{}, &bytes.Buffer{}
	script := recordSh + `
case "$RANK" in
0)	while [ ! -e "$D/dying.2" ]; do sleep 0.01; done
	sleep 0.05
	rec peer_lost 2 "dist: all_reduce failed: rank 2 is gone"
	exit 1;;
1)	echo $$ > "$D/t.1"; mv "$D/t.1" "$D/pid.1"
	exec sleep 30;;
2)	while [ ! -e "$D/pid.1" ] || [ ! -e "$D/ready.3" ]; do sleep 0.01; done
	(trap '' TERM; exec sleep 2) &
	touch "$D/dying.2"
	kill -9 $$;;
3)	trap '' TERM
	touch "$D/ready.3"
	p=$(cat "$D/pid.1" 2>/dev/null); while [ -z "$p" ]; do sleep 0.01; p=$(cat "$D/pid.1" 2>/dev/null); done
	while kill -0 "$p" 2>/dev/null; do sleep 0.01; done
	rec peer_lost 1 "dist: all_reduce failed: rank 1 is gone"
	exit 1;;
esac`
	a := &Agent{Rendezvous: &fakeRdzv{}, Spec: Spec{
		Program: "/bin/sh", Args: []string{"-c", script}, NProc: 4, Host: "hostA", Stdout: &out, Stderr: &errb,
		StopGrace: 3 * time.Second, Env: append(os.Environ(), "D="+t.TempDir()),
	}}
	res := a.Run(context.Background())
	if res.Report == nil || len(res.Report.Failures) == 0 {
		t.Fatalf("result %+v\n%s%s", res, out.String(), errb.String())
	}
	rep := res.Report.String()
	root := res.Report.Failures[0]
	if root.Rank != 2 || root.Signal != syscall.SIGKILL || res.ExitCode != 128+9 {
		t.Fatalf("root cause rank %d (%s), exit %d; want rank 2, SIGKILL, 137:\n%s%s", root.Rank, root.What(), res.ExitCode, rep, errb.String())
	}
	// Rank 2 happened no later than rank 0's report of it, though reaped
	// after every other; rank 1 is listed as stopped by the launcher.
	for _, f := range res.Report.Failures[1:] {
		if f.Time.Before(root.Time) {
			t.Errorf("rank %d at %v, before the root cause at %v", f.Rank, f.Time, root.Time)
		}
		if f.Rank == 0 && !f.Time.Equal(root.Time) {
			t.Errorf("rank 2 at %v, want the time of rank 0's report of it, %v", root.Time, f.Time)
		}
	}
	for _, s := range []string{"rank 1 (local rank 1) on hostA", "signal SIGTERM (15) from the launcher", "(peer_lost: rank 1), after the launcher stopped it\n"} {
		if !strings.Contains(rep, s) {
			t.Errorf("the report lacks %q:\n%s", s, rep)
		}
	}
	if t.Failed() {
		t.Log(rep)
	}
}

// TestAgentFrozenStoreHost is issue 27, item 5: rank 0, which serves the
// workers' store, is stopped (SIGSTOP); the others time out, one naming
// it and the other its neighbour (a survivor that cannot read the store
// follows no chain). The agent stops the group, finds rank 0 stopped, and
// kills it after the grace period. Rank 0 is the root cause, and the
// report says that it stopped responding and serves the store. Before,
// rank 0, killed by the agent's own SIGKILL, was not a failure at all,
// and a survivor was the root cause.
func TestAgentFrozenStoreHost(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process groups, /proc")
	}
	var out, errb lockedWriter
	out.w, errb.w = &bytes.Buffer{}, &bytes.Buffer{}
	script := recordSh + `
case "$RANK" in
0)	echo $$ > "$D/t.0"; mv "$D/t.0" "$D/pid.0"
	kill -STOP $$
	exit 0;;
*)	p=$(cat "$D/pid.0" 2>/dev/null); while [ -z "$p" ]; do sleep 0.01; p=$(cat "$D/pid.0" 2>/dev/null); done
	while ! grep -q ') T ' "/proc/$p/stat"; do sleep 0.01; done
	rec timeout $((RANK - 1)) "dist: all_reduce timed out after 1s waiting on ranks [$((RANK - 1))]"
	exit 1;;
esac`
	a := &Agent{Rendezvous: &fakeRdzv{}, Spec: Spec{
		Program: "/bin/sh", Args: []string{"-c", script}, NProc: 3, Host: "hostA", Stdout: &out, Stderr: &errb,
		StopGrace: 500 * time.Millisecond, Env: append(os.Environ(), "D="+t.TempDir()),
	}}
	res := a.Run(context.Background())
	if res.Report == nil || len(res.Report.Failures) == 0 {
		t.Fatalf("result %+v\n%s%s", res, out.String(), errb.String())
	}
	rep := res.Report.String()
	root := res.Report.Failures[0]
	if root.Rank != 0 {
		t.Fatalf("root cause rank %d (%s), want rank 0:\n%s%s", root.Rank, root.What(), rep, errb.String())
	}
	for _, s := range []string{"rank 0 stopped responding: its process was stopped (SIGSTOP or a debugger)", "serves the workers' store",
		"exit:       stopped (SIGSTOP or a debugger), then signal SIGKILL (9) from the launcher"} {
		if !strings.Contains(rep, s) {
			t.Errorf("the report lacks %q:\n%s", s, rep)
		}
	}
	// Rank 0 happened no later than the timeout that names it.
	for _, f := range res.Report.Failures[1:] {
		if f.Recorded != nil && f.Recorded.Blames() == 0 && f.Time.Before(root.Time) {
			t.Errorf("rank 0 at %v, after rank %d's timeout naming it at %v", root.Time, f.Rank, f.Time)
		}
	}
	// The launcher's status is a survivor's, not that of its own SIGKILL.
	if res.ExitCode != 1 {
		t.Errorf("exit status %d, want 1", res.ExitCode)
	}
	if t.Failed() {
		t.Log(rep)
	}
}
