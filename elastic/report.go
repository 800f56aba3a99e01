package elastic

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/godist/godist/internal/launch"
)

// ErrorRecord is what a failed worker wrote to its error file
// (GODIST_ERROR_FILE, which the agent sets for each worker; dist.RecordError
// writes it, and a PyTorch worker's @record writes torchelastic's form):
// its rank, the kind of failure ("peer_lost", "aborted", "timeout",
// "desync" or "other"), the peer it blames (-1 none), its message and a
// timestamp (Unix seconds).
type ErrorRecord = launch.Record

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
	// Recorded is what the worker wrote to its error file; nil when it
	// wrote none (or one that could not be read).
	Recorded *ErrorRecord
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
	if r := f.Recorded; r != nil {
		fmt.Fprintf(&b, "  error:      %s\n", recorded(r))
		for i, l := range strings.Split(strings.TrimRight(r.Message, "\n"), "\n") {
			if i == 0 {
				fmt.Fprintf(&b, "  message:    %s\n", l)
			} else {
				fmt.Fprintf(&b, "              %s\n", l)
			}
		}
	}
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
			fmt.Fprintf(&b, "  rank %d (local rank %d) on %s, pid %d: %s at %s", o.Rank, o.LocalRank, o.Host, o.PID, o.What(), o.Time.Format(time.RFC3339Nano))
			if o.Recorded != nil {
				fmt.Fprintf(&b, " (%s)", recorded(o.Recorded))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString(bar + "\n")
	return b.String()
}

// recorded says what a worker's error file says of its failure's kind:
// "peer_lost: rank 1", "other".
func recorded(r *ErrorRecord) string {
	if r.Peer >= 0 {
		return fmt.Sprintf("%s: rank %d", r.Kind, r.Peer)
	}
	return string(r.Kind)
}

// RootCauseFirst orders failures so that the likely root cause comes
// first. Workers die within a millisecond of each other when one takes the
// group down, and the order in which the launcher reaps them is not the
// order in which they died, so time alone does not tell. The rule
// (launch.RootCause): a failure is secondary when its worker's error file
// says it lost, was failed by, or timed out waiting on a peer that failed
// too (see ErrorRecord; a worker's stderr is not read for it); the root
// cause is the earliest failure that is not secondary (a signal, an error
// of its own, a worker that left no file), or the earliest of all when
// every failure is secondary. The others follow in time order.
func RootCauseFirst(fs []Failure) []Failure {
	if len(fs) < 2 {
		return fs
	}
	out := slices.Clone(fs)
	slices.SortStableFunc(out, func(a, b Failure) int { return a.Time.Compare(b.Time) })
	seen := make([]launch.Failed, len(out))
	for i, f := range out {
		seen[i] = launch.Failed{Rank: f.Rank, Signaled: f.Signal != 0, Record: f.Recorded}
	}
	if i := launch.RootCause(seen); i > 0 {
		root := out[i]
		copy(out[1:i+1], out[:i])
		out[0] = root
	}
	return out
}

// SignalName returns a signal's name, such as "SIGKILL".
func SignalName(s syscall.Signal) string { return launch.SignalName(s) }
