package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/store"
	"github.com/godist/godist/tensor"
)

// TestTopWorker is a rank of TestTopStoppedRank: it loops all_reduce
// until its group fails or a minute passes. It does nothing in a normal
// test run.
func TestTopWorker(t *testing.T) {
	if os.Getenv("GODIST_TOP_WORKER") != "1" {
		t.Skip("a worker of TestTopStoppedRank")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := dist.Init(ctx, dist.Options{StatusInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	x := tensor.Zeros(2)
	for ctx.Err() == nil {
		if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
			return
		}
		time.Sleep(time.Millisecond) // the step's compute
	}
}

// TestTopStoppedRank is issue 19's "godist top shown on a job with one
// rank stopped by SIGSTOP naming that rank": three processes loop
// all_reduce; rank 1 is stopped; godist top --once, against the job's
// store, shows rank 1 STALE and the others waiting on it.
func TestTopStoppedRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 processes")
	}
	dumps := t.TempDir()
	ps := disttest.StartProcs(t, 3, "TestTopWorker", "top-test", "GODIST_TOP_WORKER=1", "GODIST_TIMEOUT=60s",
		"GODIST_FLIGHT_SIGNAL=1", "GODIST_FLIGHT_DIR="+dumps)
	t.Cleanup(func() {
		for _, p := range ps {
			p.Cmd.Process.Kill()
		}
		disttest.WaitProcs(t, ps, 10*time.Second)
	})
	env := map[string]string{}
	for _, kv := range ps[0].Cmd.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	getenv := func(k string) string { return env[k] }
	top := func() (string, int) {
		var out, errs bytes.Buffer
		code := topRun([]string{"--once", "--timeout", "20s"}, getenv, &out, &errs)
		return out.String() + errs.String(), code
	}
	// Wait until every rank has run some calls.
	st, err := store.Dial(context.Background(), "127.0.0.1:"+env["MASTER_PORT"],
		store.DialOptions{Token: tokenFrom(env["GODIST_TOKEN"]), JobID: env["GODIST_RUN_ID"], Rank: -1, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	deadline := time.Now().Add(30 * time.Second)
	for r := 0; r < 3; {
		if time.Now().After(deadline) {
			out, _ := top()
			t.Fatalf("rank %d did not start looping\n%s", r, out)
		}
		if ok, _ := st.Check(context.Background(), dist.StatusKey(r)); ok {
			b, _ := st.Get(context.Background(), dist.StatusKey(r))
			if s, err := dist.DecodeRankStatus(b); err == nil && s.Calls >= 20 {
				r++
				continue
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, code := top()
	t.Logf("running:\n%s", out)
	if code != 0 || strings.Contains(out, "STALE") {
		t.Fatalf("exit %d before any rank stopped:\n%s", code, out)
	}
	if err := ps[1].Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	defer ps[1].Cmd.Process.Signal(syscall.SIGCONT)
	row := func(out string, r int) string {
		m := regexp.MustCompile(fmt.Sprintf(`(?m)^%d  .*$`, r)).FindString(out)
		return m
	}
	for {
		out, code = top()
		if code == 0 && strings.Contains(row(out, 1), "STALE") && strings.Contains(out, "ranks 0, 2 wait on it") {
			break
		}
		if time.Since(stopped) > 15*time.Second {
			t.Fatalf("godist top does not name the stopped rank 15 s after its SIGSTOP (exit %d):\n%s", code, out)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("rank 1 stopped %.1fs ago:\n%s", time.Since(stopped).Seconds(), out)
	if !regexp.MustCompile(`(?m)^rank 1 \(127\.0\.0\.1, pid \d+\) has not reported for`).MatchString(out) {
		t.Errorf("the summary does not name rank 1:\n%s", out)
	}
	for _, r := range []int{0, 2} {
		if l := row(out, r); !strings.Contains(l, "waiting") || strings.Contains(l, "STALE") || !strings.Contains(l, "all_reduce") {
			t.Errorf("rank %d's row %q: want it waiting in all_reduce, not stale", r, l)
		}
	}
	// Rank 1's own row: the pid of the stopped process.
	if l := row(out, 1); !strings.Contains(l, fmt.Sprint(ps[1].Cmd.Process.Pid)) {
		t.Errorf("rank 1's row %q lacks its pid %d", l, ps[1].Cmd.Process.Pid)
	}

	// SIGUSR1 makes every rank write its flight record
	// (GODIST_FLIGHT_SIGNAL=1, as godist run sets it): the running ranks
	// at once, the stopped one when it continues. godist trace merges
	// them into one Chrome trace, a track per rank.
	for _, p := range ps {
		p.Cmd.Process.Signal(syscall.SIGUSR1)
	}
	var files []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		files, _ = filepath.Glob(filepath.Join(dumps, "godist-flight-rank*.json"))
		if len(files) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flight records after SIGUSR1: %v", files)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ps[1].Cmd.Process.Signal(syscall.SIGCONT)
	for deadline := time.Now().Add(10 * time.Second); len(files) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("flight records after SIGCONT: %v", files)
		}
		time.Sleep(50 * time.Millisecond)
		files, _ = filepath.Glob(filepath.Join(dumps, "godist-flight-rank*.json"))
	}
	var tr, errs bytes.Buffer
	if code := traceRun(files, &tr, &errs); code != 0 {
		t.Fatalf("godist trace: exit %d: %s", code, errs.String())
	}
	var trace struct {
		TraceEvents []struct {
			Name, Ph string
			PID      int
			Args     map[string]any
		}
	}
	if err := json.Unmarshal(tr.Bytes(), &trace); err != nil {
		t.Fatal(err)
	}
	calls := map[int]int{}
	waiting := map[int]bool{}
	for _, e := range trace.TraceEvents {
		if e.Ph == "X" && e.Name == "all_reduce" {
			calls[e.PID]++
			if e.Args["state"] == "waiting" {
				waiting[e.PID] = true
			}
		}
	}
	for r := range 3 {
		if calls[r] < 20 {
			t.Errorf("rank %d: %d all_reduce events in the trace", r, calls[r])
		}
	}
	if !waiting[0] || !waiting[2] {
		t.Errorf("ranks 0 and 2 were waiting when dumped; the trace says %v", waiting)
	}
}

// TestRenderTop: the table and the summary from records alone: a stale
// rank, ranks that wait on it directly and through another, an idle one,
// one with no record and one whose record was refused.
func TestRenderTop(t *testing.T) {
	now := time.Unix(1700000000, 0)
	rec := func(r int, state string, waiting int, age time.Duration) *dist.RankStatus {
		s := &dist.RankStatus{Rank: r, WorldSize: 6, Host: "h", PID: 100 + r, State: state, WaitingOn: waiting,
			Since: now.Add(-10 * time.Second), Updated: now.Add(-age), HeartbeatMS: 2000}
		if state != dist.StatusIdle {
			s.Op, s.Seq, s.Bytes = "all_reduce", 77, 8
		}
		return s
	}
	rows := []topRow{
		{rank: 0, st: rec(0, dist.StatusWaiting, 2, 100*time.Millisecond)}, // through rank 2
		{rank: 1, st: rec(1, dist.StatusRunning, -1, 9*time.Second)},       // stopped
		{rank: 2, st: rec(2, dist.StatusWaiting, 1, 200*time.Millisecond)},
		{rank: 3, st: rec(3, dist.StatusIdle, -1, time.Second)},
		{rank: 4},
		{rank: 5, err: fmt.Errorf("bad state")},
	}
	var b strings.Builder
	renderTop(&b, rows, now)
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"RANK  HOST  PID  STATE",
		"STALE (running)",
		"rank 1 (h, pid 101) has not reported for 9.0s",
		"ranks 0, 2 wait on it",
		"rank 4 has published no status yet",
		"rank 5's status record was refused: bad state",
		"10.0s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	if strings.Count(out, "STALE") != 1 {
		t.Errorf("want only rank 1 stale")
	}
}
