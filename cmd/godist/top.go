package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/store"
)

func topMain(args []string) int { return topRun(args, os.Getenv, os.Stdout, os.Stderr) }

// topRun is godist top with the environment read through getenv.
func topRun(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("godist top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("store", "", "`host:port` of the job's store (default $MASTER_ADDR:$MASTER_PORT; godist run logs it as the workers' master)")
	once := fs.Bool("once", false, "print one table and exit")
	every := durationFlag(fs, "interval", time.Second, "refresh the table every `duration` (or number of seconds)")
	world := fs.Int("world-size", 0, "ranks to show (default: the world size in rank 0's record)")
	tokenEnv := fs.String("token-env", "GODIST_TOKEN", "name of the environment `variable` holding the job token (hex or raw)")
	jobID := fs.String("job-id", getenv("GODIST_RUN_ID"), "job `id` the store expects (default $GODIST_RUN_ID; a job started without a run id has its launcher's, such as openmpi:NS, or master:HOST:PORT, which a refusal names)")
	timeout := durationFlag(fs, "timeout", 10*time.Second, "how long, in seconds or a duration, to wait for the store and for rank 0's record")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: godist top [flags]

Shows, for every rank of a running job, the call it is in (operation,
sequence number, size), for how long, and which peer it waits on, from
the status records the ranks publish to the job's store. A rank whose
record is older than it lets one grow (two heartbeats; two intervals and
a second while a call is in flight) is STALE: stopped (SIGSTOP, a
debugger), hung outside Go, or on a host that is gone; the summary names
it and the ranks that wait on it, directly or through others.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "godist top: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	if *addr == "" {
		host, port := getenv("MASTER_ADDR"), getenv("MASTER_PORT")
		if host == "" || port == "" {
			fmt.Fprintln(stderr, "godist top: no store address: pass --store host:port or set MASTER_ADDR and MASTER_PORT")
			return exitUsage
		}
		*addr = net.JoinHostPort(host, port)
	}
	if *world < 0 || *every <= 0 || *timeout <= 0 {
		fmt.Fprintln(stderr, "godist top: --world-size, --interval and --timeout must be positive")
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := store.Dial(ctx, *addr, store.DialOptions{Token: tokenFrom(getenv(*tokenEnv)), JobID: *jobID, Rank: -1, Timeout: *timeout, ConnectTimeout: *timeout})
	if err != nil {
		fmt.Fprintf(stderr, "godist top: cannot reach the job's store: %v\n", err)
		return exitFail
	}
	defer st.Close()
	for {
		rows, err := readStatuses(ctx, st, *world, *timeout)
		if err != nil {
			if ctx.Err() != nil {
				return exitOK
			}
			fmt.Fprintf(stderr, "godist top: %v\n", err)
			return exitFail
		}
		var b strings.Builder
		if !*once {
			b.WriteString("\x1b[H\x1b[2J") // home, clear
		}
		fmt.Fprintf(&b, "godist top: store %s, %d ranks, %s\n\n", *addr, len(rows), time.Now().Format("15:04:05"))
		renderTop(&b, rows, time.Now())
		io.WriteString(stdout, b.String())
		if *once {
			return exitOK
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-time.After(*every):
		}
	}
}

// topRow is one rank's line: its record, or why there is none.
type topRow struct {
	rank int
	st   *dist.RankStatus
	err  error // a record that could not be read or was refused
}

// readStatuses reads every rank's record: the world size from rank 0's
// (waited for up to timeout) unless world is given, then each rank's
// without waiting.
func readStatuses(ctx context.Context, st store.Store, world int, timeout time.Duration) ([]topRow, error) {
	var first *dist.RankStatus
	if world == 0 {
		gctx, cancel := context.WithTimeout(ctx, timeout)
		b, err := st.Get(gctx, dist.StatusKey(0))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("no status record from rank 0 (%v): is the job running, with its status on (GODIST_TOP not 0)?", err)
		}
		s, err := dist.DecodeRankStatus(b)
		if err != nil || s.Rank != 0 {
			return nil, fmt.Errorf("rank 0's status record: %v", err)
		}
		first, world = &s, s.WorldSize
	}
	rows := make([]topRow, world)
	for r := range world {
		rows[r].rank = r
		if r == 0 && first != nil {
			rows[r].st = first
			continue
		}
		key := dist.StatusKey(r)
		ok, err := st.Check(ctx, key)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		b, err := st.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		s, err := dist.DecodeRankStatus(b)
		switch {
		case err != nil:
			rows[r].err = err
		case s.Rank != r:
			rows[r].err = fmt.Errorf("record of rank %d under rank %d's key", s.Rank, r)
		default:
			rows[r].st = &s
		}
	}
	return rows, nil
}

// renderTop writes the table of rows at now, and a summary naming the
// stale ranks and who waits on them.
func renderTop(w io.Writer, rows []topRow, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tHOST\tPID\tSTATE\tOP\tSEQ\tBYTES\tFOR\tWAITING ON\tUPDATED")
	stale := map[int]bool{}
	var missing, bad []int
	for _, row := range rows {
		s := row.st
		if s == nil {
			what := "-"
			if row.err != nil {
				what, bad = "bad record", append(bad, row.rank)
			} else {
				missing = append(missing, row.rank)
			}
			fmt.Fprintf(tw, "%d\t-\t-\t%s\t-\t-\t-\t-\t-\t-\n", row.rank, what)
			continue
		}
		state := s.State
		if s.Stale(now) {
			stale[row.rank] = true
			state = "STALE (" + s.State + ")"
		}
		op, seq, size, waiting := "-", "-", "-", "-"
		if s.Op != "" {
			op, seq, size = s.Op, strconv.FormatUint(s.Seq, 10), formatSize(int(s.Bytes))
			if s.Group != 0 {
				op += fmt.Sprintf(" [group %d]", s.Group)
			}
		}
		if s.WaitingOn >= 0 {
			waiting = strconv.Itoa(s.WaitingOn)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s ago\n", row.rank, s.Host, s.PID, state, op, seq, size,
			shortDur(now.Sub(s.Since)), waiting, shortDur(now.Sub(s.Updated)))
	}
	tw.Flush()
	var notes []string
	for _, row := range rows {
		if !stale[row.rank] {
			continue
		}
		s := row.st
		note := fmt.Sprintf("rank %d (%s, pid %d) has not reported for %s: stopped (SIGSTOP, a debugger), hung outside Go, or its host is gone",
			row.rank, s.Host, s.PID, shortDur(now.Sub(s.Updated)))
		if ws := waitersOf(rows, row.rank, stale); len(ws) > 0 {
			note += fmt.Sprintf("; %s on it", rankList(ws, "waits", "wait"))
		}
		notes = append(notes, note)
	}
	if len(missing) > 0 {
		notes = append(notes, fmt.Sprintf("%s published no status yet (not started, or GODIST_TOP=0)", rankList(missing, "has", "have")))
	}
	if len(bad) > 0 {
		for _, r := range bad {
			notes = append(notes, fmt.Sprintf("rank %d's status record was refused: %v", r, rows[r].err))
		}
	}
	if len(notes) > 0 {
		io.WriteString(w, "\n"+strings.Join(notes, "\n")+"\n")
	}
}

// waitersOf returns the ranks, not stale themselves, whose chain of
// waits (r waits on WaitingOn, which waits on ...) reaches rank target.
func waitersOf(rows []topRow, target int, stale map[int]bool) []int {
	var out []int
	for _, row := range rows {
		if row.st == nil || stale[row.rank] || row.rank == target {
			continue
		}
		seen := map[int]bool{}
		for r := row.rank; r >= 0 && r < len(rows) && !seen[r]; {
			seen[r] = true
			s := rows[r].st
			if s == nil || s.State != dist.StatusWaiting {
				break
			}
			if s.WaitingOn == target {
				out = append(out, row.rank)
				break
			}
			if stale[s.WaitingOn] {
				break // it waits on another stopped rank
			}
			r = s.WaitingOn
		}
	}
	return out
}

// rankList names ranks with a verb that agrees: "rank 2 waits", "ranks
// 0, 3 wait".
func rankList(rs []int, one, many string) string {
	rs = slices.Clone(rs)
	slices.Sort(rs)
	ss := make([]string, len(rs))
	for i, r := range rs {
		ss[i] = strconv.Itoa(r)
	}
	if len(rs) == 1 {
		return "rank " + ss[0] + " " + one
	}
	return "ranks " + strings.Join(ss, ", ") + " " + many
}

// shortDur prints d to a tenth of a second below a minute.
func shortDur(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Minute {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return d.Round(time.Second).String()
}
