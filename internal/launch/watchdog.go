package launch

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The watchdog: a launcher's workers outlive it when it dies by SIGKILL
// (or any death that skips its own clean-up), unless something else
// stops them. The parent-death signal reaches a worker alone, not the
// processes it started, and not at all where the platform lacks it. So
// Start, for a worker in a group of its own, also hands the group to a
// watchdog: one small process per launcher, the launcher's own binary
// re-executed in a hidden mode (see the package's init), in a process
// group of its own, which reads a pipe whose other end only the launcher
// holds. When that pipe ends (the launcher has exited, however it died),
// the watchdog sends SIGTERM to every group it guards that still has a
// process, then SIGKILL to those still there after their grace period,
// and exits. A group it forgets, having no process left, leaves no file
// in /dev/shm (shmfile): its processes may have been killed before they
// could unlink theirs.
//
// The pipe carries one line per group, "+PGID GRACE_MS\n", written when
// the worker has started and before it runs its program (see gate) (watchLine, parseWatchLine). The watchdog forgets a
// group once it has no process left, so that a pgid cannot be signalled
// after its number has been reused.

// A worker that the watchdog is to guard does not run its program until
// the watchdog has its group. Start runs it through a gate: /bin/sh or
// this binary again (see gated), which waits for a newline on a pipe from
// the launcher and then executes the program in its place (the same
// process, so the same pid and group, with the program's own argv and
// environment); or, should the pipe end first (the launcher died before
// the watchdog had the group), exits without running it.

// gate is the launcher's end of a gated worker's pipe.
type gate struct {
	r, w *os.File // the worker's end, closed once it is started; ours
}

// started closes the worker's end, which the worker has now.
func (g *gate) started() {
	if g != nil {
		g.r.Close()
	}
}

// open lets the worker run its program.
func (g *gate) open() {
	if g != nil {
		g.w.Write([]byte{'\n'}) // a line for the shell's gate, a byte for this binary's
		g.w.Close()
	}
}

// shut closes the gate for good: the worker exits.
func (g *gate) shut() {
	if g != nil {
		g.w.Close()
	}
}

// DefaultOrphanGrace is Command.OrphanGrace's default.
const DefaultOrphanGrace = 5 * time.Second

// watchLine is the message that puts process group pg in the watchdog's
// care, with grace between SIGTERM and SIGKILL.
func watchLine(pg int, grace time.Duration) string {
	return "+" + strconv.Itoa(pg) + " " + strconv.FormatInt(grace.Milliseconds(), 10) + "\n"
}

// parseWatchLine decodes a watchLine without its newline.
func parseWatchLine(s string) (pg int, grace time.Duration, err error) {
	rest, ok := strings.CutPrefix(s, "+")
	a, b, ok2 := strings.Cut(rest, " ")
	if !ok || !ok2 {
		return 0, 0, fmt.Errorf("launch: watchdog: bad line %q, want +PGID GRACE_MS", s)
	}
	pg, err = strconv.Atoi(a)
	if err != nil || pg <= 1 || a != strconv.Itoa(pg) {
		return 0, 0, fmt.Errorf("launch: watchdog: bad process group in %q", s)
	}
	ms, err := strconv.ParseInt(b, 10, 64)
	if err != nil || ms < 0 || ms > int64(24*time.Hour/time.Millisecond) || b != strconv.FormatInt(ms, 10) {
		return 0, 0, fmt.Errorf("launch: watchdog: bad grace in %q", s)
	}
	return pg, time.Duration(ms) * time.Millisecond, nil
}

// guard is the watchdog's core: the process groups it guards and, once
// the launcher is gone, which of them to signal and when. It does no
// I/O: whether a group still has a process, and the time, come in as
// values.
type guard struct {
	groups map[int]*guarded
}

type guarded struct {
	grace  time.Duration
	killAt time.Time // zero until the launcher is gone
	killed bool      // SIGKILL sent
}

// add guards group pg; a group added again keeps the longer grace.
func (g *guard) add(pg int, grace time.Duration) {
	if g.groups == nil {
		g.groups = map[int]*guarded{}
	}
	if x, ok := g.groups[pg]; ok {
		x.grace = max(x.grace, grace)
		return
	}
	g.groups[pg] = &guarded{grace: grace}
}

// prune forgets the groups that have no process left, and returns them
// (sorted): their files in /dev/shm can go.
func (g *guard) prune(alive func(pg int) bool) []int {
	var gone []int
	for pg := range g.groups {
		if !alive(pg) {
			delete(g.groups, pg)
			gone = append(gone, pg)
		}
	}
	slices.Sort(gone)
	return gone
}

// orphan is the launcher's end: it returns the groups to send SIGTERM,
// in order, each to be killed once its grace has passed after now.
func (g *guard) orphan(now time.Time) []int {
	for _, x := range g.groups {
		x.killAt = now.Add(x.grace)
	}
	return g.sorted(func(*guarded) bool { return true })
}

// due returns, once each, the orphaned groups whose grace has passed by
// now: send them SIGKILL.
func (g *guard) due(now time.Time) []int {
	pgs := g.sorted(func(x *guarded) bool { return !x.killed && !x.killAt.IsZero() && !now.Before(x.killAt) })
	for _, pg := range pgs {
		g.groups[pg].killed = true
	}
	return pgs
}

// wait returns how long from now until the next group is due; 0 when
// none is waiting for its grace to pass (all killed, or none left).
func (g *guard) wait(now time.Time) time.Duration {
	var d time.Duration
	for _, x := range g.groups {
		if x.killed || x.killAt.IsZero() {
			continue
		}
		if left := max(x.killAt.Sub(now), time.Nanosecond); d == 0 || left < d {
			d = left
		}
	}
	return d
}

// done reports whether nothing is left to do: every remaining group has
// been killed (a killed process may stay a zombie until its new parent
// reaps it).
func (g *guard) done() bool {
	for _, x := range g.groups {
		if !x.killed {
			return false
		}
	}
	return true
}

func (g *guard) sorted(keep func(*guarded) bool) []int {
	var pgs []int
	for pg, x := range g.groups {
		if keep(x) {
			pgs = append(pgs, pg)
		}
	}
	slices.Sort(pgs)
	return pgs
}
