package elastic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godist/godist/store"
)

func newRdzv(st store.Store, id string, cfg Config, rank int) *StoreRendezvous {
	return &StoreRendezvous{
		Store: st, Config: cfg, Poll: 5 * time.Millisecond, JoinTimeout: 10 * time.Second,
		Self: Node{ID: id, Addr: "host-" + id, NodeRank: rank, LocalWorldSize: 2},
	}
}

func TestStoreRendezvousConcurrent(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			st := store.NewPrefix("godist-rdzv/test", store.NewMem())
			cfg := Config{MinNodes: n, MaxNodes: n, KeepAlive: 10 * time.Second}
			rounds := make([]Round, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				r := newRdzv(st, fmt.Sprintf("n%d", i), cfg, -1)
				defer r.Close()
				wg.Go(func() { rounds[i], errs[i] = r.Next(context.Background(), -1) })
			}
			wg.Wait()
			seen := map[int]bool{}
			for i, rd := range rounds {
				if errs[i] != nil {
					t.Fatalf("node %d: %v", i, errs[i])
				}
				if rd.NumNodes != n || rd.WorldSize != 2*n || rd.RankOffset != 2*rd.NodeRank || seen[rd.NodeRank] {
					t.Fatalf("node %d: %+v", i, rd)
				}
				seen[rd.NodeRank] = true
				if rd.MasterAddr != rounds[0].MasterAddr || rd.MasterPort != rounds[0].MasterPort || rd.MasterPort == 0 {
					t.Fatalf("nodes disagree on the master: %+v vs %+v", rd, rounds[0])
				}
				if rd.MasterAddr != rd.Members[0].Addr {
					t.Fatalf("master %s is not node 0's address %s", rd.MasterAddr, rd.Members[0].Addr)
				}
			}
		})
	}
}

func TestStoreRendezvousJoinAndFail(t *testing.T) {
	ctx := context.Background()
	st := store.NewMem()
	// The last call is long enough for b, polling every 5 ms, to join the
	// round a reopens for it on a loaded machine (at 20 ms a stall of the
	// process could close it with a alone); a's first round waits it out.
	cfg := Config{MinNodes: 1, MaxNodes: 2, LastCall: 500 * time.Millisecond, KeepAlive: 10 * time.Second}
	a, b := newRdzv(st, "a", cfg, -1), newRdzv(st, "b", cfg, -1)
	defer a.Close()
	defer b.Close()
	ra, err := a.Next(ctx, -1)
	if err != nil || ra.NumNodes != 1 {
		t.Fatalf("a alone: %+v %v", ra, err)
	}
	if r, why, err := a.Check(ctx, ra.Round); r || err != nil {
		t.Fatalf("a: %v %q %v", r, why, err)
	}
	done := make(chan Round)
	go func() {
		rb, err := b.Next(ctx, -1)
		if err != nil {
			t.Error(err)
		}
		done <- rb
	}()
	// a notices b waiting, and re-rendezvouses.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, _, err := a.Check(ctx, ra.Round)
		if err != nil {
			t.Fatal(err)
		}
		if r {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a never saw b waiting")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ra2, err := a.Next(ctx, ra.Round)
	rb := <-done
	if err != nil || ra2.NumNodes != 2 || rb.NumNodes != 2 || ra2.Round != rb.Round || ra2.NodeRank == rb.NodeRank {
		t.Fatalf("after b joined: %+v %+v %v", ra2, rb, err)
	}
	// The job fails on b: a is told, and a later rendezvous aborts.
	if err := b.Fail(ctx, "rank 3 died"); err != nil {
		t.Fatal(err)
	}
	var jf *JobFailedError
	if _, _, err := a.Check(ctx, ra2.Round); !errors.As(err, &jf) || !strings.Contains(err.Error(), "rank 3 died") {
		t.Fatalf("Check after Fail: %v", err)
	}
	if _, err := a.Next(ctx, ra2.Round); !errors.As(err, &jf) {
		t.Fatalf("Next after Fail: %v", err)
	}
}

func TestStoreRendezvousFinishWaits(t *testing.T) {
	ctx := context.Background()
	st := store.NewMem()
	cfg := Config{MinNodes: 2, MaxNodes: 2, KeepAlive: 10 * time.Second}
	a, b := newRdzv(st, "a", cfg, 0), newRdzv(st, "b", cfg, 1)
	var wg sync.WaitGroup
	var rb Round
	wg.Go(func() { rb, _ = b.Next(ctx, -1) })
	ra, err := a.Next(ctx, -1)
	wg.Wait()
	if err != nil || ra.NodeRank != 0 || rb.NodeRank != 1 {
		t.Fatalf("%+v %+v %v", ra, rb, err)
	}
	finished := make(chan error)
	go func() { finished <- a.Finish(ctx, ra.Round, true) }()
	select {
	case err := <-finished:
		t.Fatalf("a finished before b: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	b.Finish(ctx, rb.Round, false)
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
}

func TestStoreRendezvousJoinTimeout(t *testing.T) {
	r := newRdzv(store.NewMem(), "a", Config{MinNodes: 2, MaxNodes: 2}, -1)
	r.JoinTimeout = 50 * time.Millisecond
	defer r.Close()
	_, err := r.Next(context.Background(), -1)
	var re *RendezvousError
	if !errors.As(err, &re) || re.Node != "host-a" {
		t.Fatalf("want a *RendezvousError naming the node: %v", err)
	}
	t.Log(err)
}

// fakeRdzv is a one-node Rendezvous for agent tests.
type fakeRdzv struct {
	mu     sync.Mutex
	rounds int
	failed string
}

func (f *fakeRdzv) Next(ctx context.Context, after int) (Round, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rounds++
	return Round{Round: after + 1, NumNodes: 1, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: 1,
		Members: []Node{{ID: "x", Addr: "127.0.0.1"}}}, nil
}
func (f *fakeRdzv) Check(context.Context, int) (bool, string, error) { return false, "", nil }
func (f *fakeRdzv) Fail(_ context.Context, why string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = why
	return nil
}
func (f *fakeRdzv) Finish(context.Context, int, bool) error { return nil }

func TestAgentReport(t *testing.T) {
	var out, errb lockedWriter
	out.w, errb.w = &bytes.Buffer{}, &bytes.Buffer{}
	rz := &fakeRdzv{}
	a := &Agent{Rendezvous: rz, Spec: Spec{
		Program: "/bin/sh", NProc: 2, MaxRestarts: 1, Host: "hostA", Stdout: &out, Stderr: &errb, StopGrace: time.Second,
		Args: []string{"-c", `if [ "$RANK" = 1 ]; then for i in $(seq 1 30); do echo "line $i" >&2; done; exit 3; fi; sleep 30`},
	}}
	res := a.Run(context.Background())
	if res.ExitCode != 3 || res.Restarts != 1 || res.Report == nil || rz.rounds != 2 {
		t.Fatalf("result %+v after %d rounds\n%s", res, rz.rounds, errb.String())
	}
	rep := res.Report.String()
	for _, s := range []string{"rank:       1 (local rank 1, node rank 0", "host:       hostA", "exit:       exit code 3",
		"last 20 lines of stderr:", "    line 30\n", "    line 11\n"} {
		if !strings.Contains(rep, s) {
			t.Errorf("report lacks %q:\n%s", s, rep)
		}
	}
	if strings.Contains(rep, "line 10\n") {
		t.Errorf("report has more than 20 lines:\n%s", rep)
	}
	if !strings.Contains(rz.failed, "rank 1") {
		t.Errorf("the job was not marked failed: %q", rz.failed)
	}
	if !strings.Contains(errb.String(), "[rank 1] line 30\n") {
		t.Errorf("console lacks the prefixed stderr:\n%s", errb.String())
	}
}

// TestAgentSignalForwarded: SIGINT to the launcher reaches the workers,
// which stop at once. The worker execs sleep, so that the process the
// signal must stop is the worker itself, with no shell in between: with
// `echo up; sleep 30` a CI run under load once took until the stop grace's
// SIGKILL (5 s) to end.
func TestAgentSignalForwarded(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	var out lockedWriter
	out.w = &bytes.Buffer{}
	a := &Agent{Rendezvous: &fakeRdzv{}, Spec: Spec{
		Program: "/bin/sh", Args: []string{"-c", `echo up; exec sleep 30`}, NProc: 2, Stdout: &out, Stderr: &out,
		Signals: sigs,
	}}
	go func() {
		for !strings.Contains(out.String(), "[rank 1] up") || !strings.Contains(out.String(), "[rank 0] up") {
			time.Sleep(5 * time.Millisecond)
		}
		sigs <- syscall.SIGINT
	}()
	start := time.Now()
	res := a.Run(context.Background())
	if res.ExitCode != 128+int(syscall.SIGINT) || time.Since(start) > 5*time.Second {
		t.Fatalf("want 130 soon: %+v after %v\n%s", res, time.Since(start), out.String())
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

func TestRootCauseFirst(t *testing.T) {
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	lost := func(peer int) *ErrorRecord {
		return &ErrorRecord{Kind: "peer_lost", Peer: peer, Message: fmt.Sprintf("dist: all_reduce failed: rank %d is gone", peer)}
	}
	// The text a worker prints does not count, only its file.
	gone := []string{"dist: group failed: rank 1 is gone: transport: connection to rank 1 lost"}
	cases := []struct {
		name string
		in   []Failure
		want []int // ranks in order
	}{
		{"one", []Failure{{Rank: 3, Time: at(0)}}, []int{3}},
		{"by time", []Failure{{Rank: 2, Time: at(5), ExitCode: 1}, {Rank: 0, Time: at(1), ExitCode: 1}}, []int{0, 2}},
		{"peer loss reaped first", []Failure{{Rank: 0, Time: at(0), ExitCode: 1, Recorded: lost(1)}, {Rank: 1, Time: at(1), Signal: syscall.SIGKILL}}, []int{1, 0}},
		{"lost a peer that failed on its own", []Failure{{Rank: 1, Time: at(0), ExitCode: 1, Recorded: lost(2)},
			{Rank: 0, Time: at(2), ExitCode: 3, Recorded: &ErrorRecord{Kind: "other", Peer: -1, Message: "bad batch"}},
			{Rank: 2, Time: at(1), ExitCode: 1, Recorded: lost(0)}}, []int{0, 1, 2}},
		{"lost a peer that did not fail here", []Failure{{Rank: 1, Time: at(0), ExitCode: 1, Recorded: lost(7)}, {Rank: 0, Time: at(1), ExitCode: 3}}, []int{1, 0}},
		{"stderr alone decides nothing", []Failure{{Rank: 0, Time: at(0), ExitCode: 1, Stderr: gone}, {Rank: 1, Time: at(1), ExitCode: 1}}, []int{0, 1}},
		{"all secondary", []Failure{{Rank: 2, Time: at(3), ExitCode: 1, Recorded: lost(1)}, {Rank: 1, Time: at(1), ExitCode: 1, Recorded: lost(2)}}, []int{1, 2}},
	}
	for _, c := range cases {
		var got []int
		for _, f := range RootCauseFirst(c.in) {
			got = append(got, f.Rank)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestAgentErrorFile: rank 0 fails first, its error file blaming rank 1
// (it lost it); rank 1 fails 300 ms later with an error of its own. The
// file makes rank 1 the root cause, and the launcher's exit status its
// 3, though rank 0 was reaped first; without a file, rank 0 would be.
// Rank 1's failure happened no later than rank 0's report of it. Each
// worker gets its own file, under both variable names.
func TestAgentErrorFile(t *testing.T) {
	var out, errb lockedWriter
	out.w, errb.w = &bytes.Buffer{}, &bytes.Buffer{}
	// Rank 1's shell ignores the agent's SIGTERM (so does its sleep), so
	// that it ends on its own; rank 0 fails once rank 1 is ready for that.
	script := `echo "files $GODIST_ERROR_FILE $TORCHELASTIC_ERROR_FILE"
if [ "$RANK" = 0 ]; then
	while [ ! -e "$READY" ]; do sleep 0.01; done
	printf '{"version":1,"rank":0,"kind":"peer_lost","peer":1,"message":"dist: all_reduce failed: connection lost","timestamp":1}' > "$GODIST_ERROR_FILE"
	exit 1
fi
trap '' TERM
touch "$READY"
sleep 0.3
printf '{"version":1,"rank":1,"kind":"other","peer":-1,"message":"bad batch\\nat step 3","timestamp":2}' > "$GODIST_ERROR_FILE"
exit 3`
	a := &Agent{Rendezvous: &fakeRdzv{}, Spec: Spec{
		Program: "/bin/sh", Args: []string{"-c", script}, NProc: 2, Host: "hostA", Stdout: &out, Stderr: &errb, StopGrace: 5 * time.Second,
		Env: append(os.Environ(), "READY="+filepath.Join(t.TempDir(), "ready")),
	}}
	res := a.Run(context.Background())
	if res.ExitCode != 3 || res.Report == nil || len(res.Report.Failures) != 2 {
		t.Fatalf("result %+v\n%s%s", res, out.String(), errb.String())
	}
	root, other := res.Report.Failures[0], res.Report.Failures[1]
	if root.Rank != 1 || root.Recorded == nil || root.Recorded.Message != "bad batch\nat step 3" ||
		other.Rank != 0 || other.Recorded == nil || other.Recorded.Blames() != 1 || !other.Time.Equal(root.Time) {
		t.Fatalf("failures %+v", res.Report.Failures)
	}
	rep := res.Report.String()
	for _, s := range []string{"rank:       1 (local rank 1", "exit:       exit code 3", "error:      other\n",
		"message:    bad batch\n              at step 3\n", "rank 0 (local rank 0) on hostA", "(peer_lost: rank 1)"} {
		if !strings.Contains(rep, s) {
			t.Errorf("report lacks %q:\n%s", s, rep)
		}
	}
	files := regexp.MustCompile(`\[rank (\d)\] files (\S+) (\S+)\n`).FindAllStringSubmatch(out.String(), -1)
	if len(files) != 2 || files[0][2] == files[1][2] {
		t.Fatalf("error files: %q\n%s", files, out.String())
	}
	for _, f := range files {
		if f[2] != f[3] || !strings.HasSuffix(f[2], "/attempt_0/"+f[1]+"/error.json") {
			t.Errorf("rank %s: GODIST_ERROR_FILE %s, TORCHELASTIC_ERROR_FILE %s", f[1], f[2], f[3])
		}
		if _, err := os.Stat(f[2]); err == nil {
			t.Errorf("the temporary error file %s outlived the run", f[2])
		}
	}
}

// countChecks counts a store's Check calls.
type countChecks struct {
	store.Store
	n int
}

func (c *countChecks) Check(ctx context.Context, keys ...string) (bool, error) {
	c.n++
	return c.Store.Check(ctx, keys...)
}

// TestBeatsBudget: KeepAlive after 40 nodes joined at once, when every
// node's heartbeat would count it gone unread, a call reads at most
// beatBudget heartbeats, the nodes it did not read are not counted gone,
// and the ones it read and found missing are; three calls read them all.
func TestBeatsBudget(t *testing.T) {
	st := &countChecks{Store: store.NewMem()}
	cfg := Config{MinNodes: 41, MaxNodes: 41, KeepAlive: 10 * time.Second}
	joined := t0
	now := joined.Add(cfg.KeepAlive + time.Second)
	r := newRdzv(st, "self", cfg, -1)
	r.Now = func() time.Time { return now }
	var s State
	for i := range 40 {
		n := node(fmt.Sprintf("n%02d", i), -1)
		n.Joined = joined
		s.Members = append(s.Members, n)
	}
	read := map[string]bool{}
	for call := 1; call <= 3; call++ {
		before := st.n
		beats, err := r.beats(context.Background(), s, r.beatAge(), beatBudget)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.n - before; got > beatBudget {
			t.Fatalf("call %d read %d heartbeats, more than %d", call, got, beatBudget)
		}
		if len(beats) != len(s.Members) {
			t.Fatalf("call %d: %d heartbeats for %d members", call, len(beats), len(s.Members))
		}
		for _, n := range s.Members {
			b := beats[n.ID]
			if b.Read.Equal(now) {
				read[n.ID] = true
			}
			if g := gone(cfg, n, beats, now); g != read[n.ID] {
				t.Fatalf("call %d: node %s gone %v, read %v (heartbeat %+v)", call, n.ID, g, read[n.ID], b)
			}
		}
	}
	if len(read) != len(s.Members) {
		t.Fatalf("three calls read %d of %d heartbeats", len(read), len(s.Members))
	}
}
