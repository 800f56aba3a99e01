package elastic

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Failure is one worker that exited non-zero or died by a signal.
type Failure struct {
	Rank, LocalRank, NodeRank int
	Role                      string
	Host                      string
	PID                       int
	ExitCode                  int            // the exit status; -1 when killed by a signal
	Signal                    syscall.Signal // the signal that killed it, or 0
	Time                      time.Time      // when the launcher saw it exit
	Stderr                    []string       // its last lines of stderr
}

// Status is the exit status the launcher reports for f: the exit code, or
// 128 + the signal number for a worker killed by a signal (the shell's
// convention).
func (f Failure) Status() int {
	if f.Signal != 0 {
		return 128 + int(f.Signal)
	}
	return f.ExitCode
}

// What says how the worker ended: "exit code 3" or "signal SIGKILL (9)".
func (f Failure) What() string {
	if f.Signal != 0 {
		return fmt.Sprintf("signal %s (%d)", SignalName(f.Signal), int(f.Signal))
	}
	return fmt.Sprintf("exit code %d", f.ExitCode)
}

// Error makes a Failure an error naming the rank.
func (f Failure) Error() string {
	return fmt.Sprintf("rank %d (local rank %d on %s, pid %d) failed with %s", f.Rank, f.LocalRank, f.Host, f.PID, f.What())
}

// Report is the root-cause report of a job that failed for good: the first
// failure in full, then a line per other failure.
type Report struct {
	Program     string
	Restarts    int // restarts done
	MaxRestarts int
	Failures    []Failure // Failures[0] is the root cause
}

// ExitCode is the launcher's exit status: the root cause's.
func (r *Report) ExitCode() int {
	if len(r.Failures) == 0 {
		return 1
	}
	if s := r.Failures[0].Status(); s != 0 {
		return s
	}
	return 1
}

func (r *Report) String() string {
	var b strings.Builder
	bar := strings.Repeat("=", 72)
	fmt.Fprintf(&b, "%s\ngodist run: %s FAILED (after %d of %d restarts)\n%s\n", bar, r.Program, r.Restarts, r.MaxRestarts, bar)
	if len(r.Failures) == 0 {
		b.WriteString("no worker failure was recorded\n")
		return b.String()
	}
	f := r.Failures[0]
	fmt.Fprintf(&b, "Root cause (first failure):\n")
	fmt.Fprintf(&b, "  rank:       %d (local rank %d, node rank %d, role %s)\n", f.Rank, f.LocalRank, f.NodeRank, f.Role)
	fmt.Fprintf(&b, "  host:       %s\n", f.Host)
	fmt.Fprintf(&b, "  pid:        %d\n", f.PID)
	fmt.Fprintf(&b, "  exit:       %s\n", f.What())
	fmt.Fprintf(&b, "  time:       %s\n", f.Time.Format(time.RFC3339Nano))
	if len(f.Stderr) == 0 {
		fmt.Fprintf(&b, "  stderr:     (empty, or sent to a file under --log-dir)\n")
	} else {
		fmt.Fprintf(&b, "  last %d lines of stderr:\n", len(f.Stderr))
		for _, l := range f.Stderr {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	if len(r.Failures) > 1 {
		fmt.Fprintf(&b, "Other failures:\n")
		for _, o := range r.Failures[1:] {
			fmt.Fprintf(&b, "  rank %d (local rank %d) on %s, pid %d: %s at %s\n", o.Rank, o.LocalRank, o.Host, o.PID, o.What(), o.Time.Format(time.RFC3339Nano))
		}
	}
	b.WriteString(bar + "\n")
	return b.String()
}

// peerLoss matches the stderr lines of a worker that failed because
// another one died first: godist's "rank N is gone", gloo's "Connection
// closed by peer", a reset connection or a broken pipe.
var peerLoss = regexp.MustCompile(`(?i)rank (\d+) is gone|connection closed by peer|connection reset by peer|broken pipe`)

// RootCauseFirst orders failures so that the likely root cause comes
// first. Workers die within a millisecond of each other when one takes the
// group down, and the order in which the launcher reaps them is not the
// order in which they died, so time alone does not tell. The rule: a
// failure whose last stderr lines say that a peer was lost (see peerLoss)
// is secondary; the root cause is the earliest failure that is not
// secondary (a signal, a panic, an error of its own), or the earliest of
// all when every failure is secondary. The others follow in time order.
func RootCauseFirst(fs []Failure) []Failure {
	if len(fs) < 2 {
		return fs
	}
	out := slices.Clone(fs)
	slices.SortStableFunc(out, func(a, b Failure) int { return a.Time.Compare(b.Time) })
	secondary := func(f Failure) bool {
		if f.Signal != 0 {
			return false
		}
		for _, l := range f.Stderr {
			if peerLoss.MatchString(l) {
				return true
			}
		}
		return false
	}
	if i := slices.IndexFunc(out, func(f Failure) bool { return !secondary(f) }); i > 0 {
		root := out[i]
		copy(out[1:i+1], out[:i])
		out[0] = root
	}
	return out
}
