package launch

import (
	"slices"
	"time"
)

// Telling a root cause from its consequences. When one worker fails, its
// peers fail within milliseconds, having lost it; the launcher then stops
// the others, whose peers may see them go before they learn of the first
// failure. The order in which the launcher reaps its workers is none of
// these: a worker killed by SIGKILL may be reaped after the survivors'
// own exits. So the decision rests on what the workers recorded (their
// error files, with the time each saw its failure), on what the launcher
// itself did (which workers it stopped, and when), and on what it saw of
// each process; it is a pure function of those, passed in as values.

// Failed is what RootCause knows of a worker that failed, or that the
// launcher stopped while it ran.
type Failed struct {
	Rank     int     // global rank
	Signaled bool    // a signal killed it, one the launcher did not send
	Record   *Record // its error file; nil when it left none (or one that could not be read)
	// Exited is when the launcher saw it end (reaped it); zero unknown.
	Exited time.Time
	// StoppedAt, when not zero, is when the launcher signalled the
	// worker, still running, to stop the group (after an earlier failure,
	// a signal to the launcher, a change of membership). What it did
	// afterwards is a consequence of that, unless it had failed before.
	StoppedAt time.Time
	// Frozen: when the launcher stopped it, the process was itself
	// stopped (SIGSTOP, a debugger): it had stopped responding before,
	// at a time nobody saw.
	Frozen bool
}

// Happened returns, for each of fs, when its failure happened as well as
// the launcher can tell, by one clock (the host's):
//   - when its error file says it saw its failure (Record.When), else
//     when the launcher saw it exit (Exited);
//   - no later than the earliest failure of another worker that blames it
//     (Record.Blames: it lost it, was failed by it, or timed out waiting
//     on it): a worker killed by SIGKILL writes no file, and is reaped
//     whenever the launcher gets to it;
//   - for a frozen worker, no later than the launcher's stop.
//
// When a worker was frozen, timeouts bound the time of frozen workers
// alone: a frozen worker makes every worker that waits on it time out,
// whichever peer each names. A zero time is unknown.
func Happened(fs []Failed) []time.Time {
	frozen := slices.ContainsFunc(fs, func(f Failed) bool { return f.Frozen })
	own := make([]time.Time, len(fs))
	for i, f := range fs {
		own[i] = earliest(f.Exited, f.Record.When())
	}
	at := slices.Clone(own)
	for i, f := range fs {
		for j, g := range fs {
			if j == i || g.Record.Blames() != f.Rank {
				continue
			}
			if frozen && g.Record.Kind == Timeout && !f.Frozen {
				continue
			}
			at[i] = earliest(at[i], own[j])
		}
		if f.Frozen {
			at[i] = earliest(at[i], f.StoppedAt)
		}
	}
	return at
}

// compareTimes compares a and b, a zero (unknown) time after the others.
func compareTimes(a, b time.Time) int {
	switch za, zb := a.IsZero(), b.IsZero(); {
	case za && zb:
		return 0
	case za:
		return 1
	case zb:
		return -1
	}
	return a.Compare(b)
}

// earliest returns the earlier of a and b, ignoring a zero one.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// Consequences reports, for each of fs, whether its failure is a
// consequence of another's (at is Happened(fs)):
//   - its worker recorded that it lost, was failed by, or timed out
//     waiting on a worker that is among fs (a failed one, or one the
//     launcher stopped), and no signal of another's killed it; or
//   - the launcher stopped it, found it running (not frozen), and nothing
//     shows it failing before that: whatever it did afterwards, and its
//     disappearance that its peers saw, the launcher caused.
//
// A worker killed by a signal the launcher did not send is never a
// consequence.
func Consequences(fs []Failed, at []time.Time) []bool {
	ranks := make(map[int]bool, len(fs))
	for _, f := range fs {
		ranks[f.Rank] = true
	}
	out := make([]bool, len(fs))
	for i, f := range fs {
		switch p := f.Record.Blames(); {
		case f.Signaled:
		case p >= 0 && p != f.Rank && ranks[p]:
			out[i] = true
		case !f.StoppedAt.IsZero() && !f.Frozen && !at[i].Before(f.StoppedAt):
			out[i] = true
		}
	}
	return out
}

// Order returns the indices of fs, the likely root cause first, then the
// others by when they happened (Happened; ties by their own times, then
// in fs's order; an unknown time after the known ones). The root cause is
// the earliest failure that is not a consequence (Consequences); when
// every one is, the earliest that came before the launcher stopped
// anything, else the earliest of all. With no error files and no stop,
// that is the first to exit: the exit status alone cannot tell a cause
// from a consequence, and workers' stderr is not parsed for it.
func Order(fs []Failed) []int {
	at := Happened(fs)
	idx := make([]int, len(fs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if c := compareTimes(at[a], at[b]); c != 0 {
			return c
		}
		// Bounded by the same report (two that blame each other): by
		// their own times.
		return compareTimes(earliest(fs[a].Exited, fs[a].Record.When()), earliest(fs[b].Exited, fs[b].Record.When()))
	})
	cons := Consequences(fs, at)
	root := slices.IndexFunc(idx, func(i int) bool { return !cons[i] })
	if root < 0 {
		root = slices.IndexFunc(idx, func(i int) bool { return fs[i].StoppedAt.IsZero() || at[i].Before(fs[i].StoppedAt) })
	}
	if root > 0 {
		r := idx[root]
		copy(idx[1:root+1], idx[:root])
		idx[0] = r
	}
	return idx
}

// RootCause returns the index in fs of the likely root cause (see Order),
// or -1 for no failure.
func RootCause(fs []Failed) int {
	if len(fs) == 0 {
		return -1
	}
	return Order(fs)[0]
}

// Blamed returns the ranks of fs whose records blame rank, in fs's order
// (for a report: "ranks 1, 2 name it").
func Blamed(fs []Failed, rank int) []int {
	var rs []int
	for _, f := range fs {
		if f.Rank != rank && f.Record.Blames() == rank {
			rs = append(rs, f.Rank)
		}
	}
	return rs
}
