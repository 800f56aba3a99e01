package elastic

import (
	"fmt"
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
	// Time is when it failed, as well as the launcher can tell
	// (RootCauseFirst sets it, see launch.Happened): when its error file
	// says, no later than the first report of another worker that blames
	// it, else when the launcher saw it exit.
	Time   time.Time
	Exited time.Time // when the launcher saw it exit (reaped it)
	Stderr []string  // its last lines of stderr
	// Recorded is what the worker wrote to its error file; nil when it
	// wrote none (or one that could not be read).
	Recorded *ErrorRecord
	// StoppedAt, when not zero, is when the launcher signalled the
	// worker, still running, to stop the group (after an earlier failure,
	// a signal to the launcher); Sent, that the signal that killed it was
	// one the launcher sent; Frozen, that the process was itself stopped
	// (SIGSTOP, a debugger) when the launcher came to stop it.
	StoppedAt time.Time
	Sent      bool
	Frozen    bool
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

// What says how the worker ended: "exit code 3", "signal SIGKILL (9)",
// "signal SIGTERM (15) from the launcher" or, for a worker the launcher
// found stopped, "stopped (SIGSTOP or a debugger), then signal SIGKILL
// (9) from the launcher".
func (f Failure) What() string {
	s := fmt.Sprintf("exit code %d", f.ExitCode)
	if f.Signal != 0 {
		s = fmt.Sprintf("signal %s (%d)", SignalName(f.Signal), int(f.Signal))
		if f.Sent {
			s += " from the launcher"
		}
	}
	if f.Frozen {
		s = "stopped (SIGSTOP or a debugger), then " + s
	}
	return s
}

// Error makes a Failure an error naming the rank.
func (f Failure) Error() string {
	if f.Frozen {
		return fmt.Sprintf("rank %d (local rank %d on %s, pid %d) stopped responding: its process was stopped (SIGSTOP or a debugger), and the launcher ended it with %s",
			f.Rank, f.LocalRank, f.Host, f.PID, (Failure{Signal: f.Signal, ExitCode: f.ExitCode}).What())
	}
	return fmt.Sprintf("rank %d (local rank %d on %s, pid %d) failed with %s", f.Rank, f.LocalRank, f.Host, f.PID, f.What())
}

// Report is the root-cause report of a job that failed for good: the first
// failure in full, then a line per other failure.
type Report struct {
	Program     string
	Restarts    int // restarts done
	MaxRestarts int
	// Failures[0] is the root cause; the workers that the launcher
	// stopped are among them (Failure.StoppedAt).
	Failures []Failure
	// Rank0Store: rank 0 serves the workers' store (env://, as godist run
	// sets it up unless --rdzv-backend etcd), so that every rank loses
	// the store when rank 0 stops responding.
	Rank0Store bool
	// Lost, when set, is the root cause: another node stopped sending
	// heartbeats, and this node stopped its workers for it.
	Lost *NodeLostError
}

// ExitCode is the launcher's exit status: the root cause's, or when the
// launcher killed the root cause itself (it had stopped responding), the
// first other failure's that it did not kill; 1 when there is none.
func (r *Report) ExitCode() int {
	if r.Lost != nil {
		return 1
	}
	for _, f := range r.Failures {
		if s := f.Status(); s != 0 && !f.Sent {
			return s
		}
	}
	return 1
}

func (r *Report) String() string {
	var b strings.Builder
	bar := strings.Repeat("=", 72)
	fmt.Fprintf(&b, "%s\ngodist run: %s FAILED (after %d of %d restarts)\n%s\n", bar, r.Program, r.Restarts, r.MaxRestarts, bar)
	if l := r.Lost; l != nil {
		fmt.Fprintf(&b, "Root cause: a node was lost\n")
		fmt.Fprintf(&b, "  host:       %s (node %s)\n", l.Node.Addr, l.Node.ID)
		fmt.Fprintf(&b, "  ranks:      %d..%d\n", l.FirstRank, l.LastRank)
		fmt.Fprintf(&b, "  why:        no heartbeat for %v (round %d): the host is down or cut off from the network, or its launcher is stopped\n", l.Silence.Round(100*time.Millisecond), l.Round)
		b.WriteString(bar + "\n")
		return b.String()
	}
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
	if why := r.why(); why != "" {
		fmt.Fprintf(&b, "  why:        %s\n", why)
	}
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
			if !o.StoppedAt.IsZero() && !o.Sent && !o.Time.Before(o.StoppedAt) {
				b.WriteString(", after the launcher stopped it")
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

// why says, for a root cause that the launcher itself killed, why it is
// the root cause: it had stopped responding, and which ranks say so.
func (r *Report) why() string {
	f := r.Failures[0]
	if !f.Frozen && !f.Sent {
		return ""
	}
	var s string
	if f.Frozen {
		s = fmt.Sprintf("rank %d stopped responding: its process was stopped (SIGSTOP or a debugger) when the launcher came to stop the group", f.Rank)
	} else {
		s = fmt.Sprintf("rank %d failed before the launcher came to stop the group", f.Rank)
	}
	if named := launch.Blamed(asFailed(r.Failures), f.Rank); len(named) > 0 {
		s += fmt.Sprintf("; rank%s %s named it", plural(len(named)), joinInts(named))
	}
	if f.Rank == 0 && r.Rank0Store {
		s += "; it serves the workers' store, which every rank lost with it"
	}
	return s
}

// asFailed is fs as launch.RootCause sees them.
func asFailed(fs []Failure) []launch.Failed {
	out := make([]launch.Failed, len(fs))
	for i, f := range fs {
		exited := f.Exited
		if exited.IsZero() {
			exited = f.Time
		}
		out[i] = launch.Failed{Rank: f.Rank, Signaled: f.Signal != 0 && !f.Sent, Record: f.Recorded,
			Exited: exited, StoppedAt: f.StoppedAt, Frozen: f.Frozen}
	}
	return out
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ", ")
}

// RootCauseFirst orders failures so that the likely root cause comes
// first, the others following in the order they happened, and sets each
// one's Time to when it happened (launch.Order and launch.Happened).
// Workers die within a millisecond of each other when one takes the group
// down, and the order in which the launcher reaps them is not the order
// in which they died: a SIGKILLed worker may be reaped after the
// survivors. So a failure's time is the one its error file records (see
// ErrorRecord), bounded by the first report of another worker that
// blames it; and a failure is secondary when its worker's error file says
// it lost, was failed by, or timed out waiting on a peer that failed or
// that the launcher stopped (a worker's stderr is not read for it), or
// when the launcher stopped the worker, found it running, and nothing
// shows it failing before. The root cause is the earliest failure that
// is not secondary: a signal, an error of its own, a worker that left no
// file, one that the launcher found stopped (SIGSTOP).
func RootCauseFirst(fs []Failure) []Failure {
	seen := asFailed(fs)
	at := launch.Happened(seen)
	out := make([]Failure, 0, len(fs))
	for _, i := range launch.Order(seen) {
		f := fs[i]
		if !at[i].IsZero() {
			f.Time = at[i]
		}
		out = append(out, f)
	}
	return out
}

// SignalName returns a signal's name, such as "SIGKILL".
func SignalName(s syscall.Signal) string { return launch.SignalName(s) }
