package dist

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// TestFlightRingWraps: a ring of 4 keeps the last 4 calls, oldest first,
// in the state each is in; a call whose slot was overwritten updates
// nothing.
func TestFlightRingWraps(t *testing.T) {
	s := newCallState(7, 1, []int{0, 1, 2}, time.Minute)
	s.flight = newFlightRing(4)
	t0 := time.Unix(1000, 0)
	ar := call{op: opAllReduce, dtype: tensor.Float32, count: 2, root: -1, rop: Sum}
	var ids []callID
	for i := range 10 {
		id, seq, _, err := s.beginCollective(ar, t0.Add(time.Duration(i)*time.Second))
		if err != nil || seq != uint64(i+1) {
			t.Fatalf("call %d: seq %d, %v", i, seq, err)
		}
		ids = append(ids, id)
	}
	// Calls 0..5 are gone from the ring; ending them must not touch it.
	for _, id := range ids[:6] {
		s.endAt(id, t0.Add(time.Hour), nil)
	}
	s.endAt(ids[6], t0.Add(20*time.Second), nil)
	s.endAt(ids[7], t0.Add(21*time.Second), errors.New("boom"))
	s.wait(ids[8], 2, t0.Add(22*time.Second))
	es := s.flight.entries(7)
	if len(es) != 4 {
		t.Fatalf("%d entries, want 4: %+v", len(es), es)
	}
	want := []struct {
		seq   uint64
		state FlightState
		wait  int
	}{{7, FlightDone, -1}, {8, FlightFailed, -1}, {9, FlightWaiting, 2}, {10, FlightRunning, -1}}
	for i, w := range want {
		e := es[i]
		if e.Seq != w.seq || e.State != w.state || e.WaitingOn != w.wait || e.Group != 7 {
			t.Errorf("entry %d: seq %d state %s waiting on %d group %d, want seq %d %s %d", i, e.Seq, e.State, e.WaitingOn, e.Group, w.seq, w.state, w.wait)
		}
		if e.Op != "all_reduce" || e.DType != "float32" || e.Count != 2 || e.Bytes != 8 || e.ReduceOp != "SUM" || e.Root != -1 || e.Peer != -1 {
			t.Errorf("entry %d: %+v", i, e)
		}
		if !e.Start.Equal(t0.Add(time.Duration(w.seq-1) * time.Second)) {
			t.Errorf("entry %d starts at %v", i, e.Start)
		}
	}
	if es[0].End != t0.Add(20*time.Second) || es[0].Duration(time.Time{}) != 14*time.Second {
		t.Errorf("entry 0 ends %v", es[0].End)
	}
	if es[1].Error != "boom" {
		t.Errorf("entry 1 error %q", es[1].Error)
	}
	s.received(ids[8])
	if e := s.flight.entries(7)[2]; e.State != FlightRunning || e.WaitingOn != -1 {
		t.Errorf("after the receive: %s waiting on %d", e.State, e.WaitingOn)
	}
	// A send and a receive: their peers by global rank.
	s2 := newCallState(7, 1, []int{3, 5, 9}, time.Minute)
	s2.flight = newFlightRing(2)
	p := call{op: opSend, dtype: tensor.Int64, count: 3, root: -1}
	s2.beginSend(p, 2, 4, t0)
	s2.beginRecv(p, AnySource, 4, t0)
	es = s2.flight.entries(7)
	if es[0].Op != "send" || es[0].Peer != 9 || es[0].Tag != 4 || es[0].Bytes != 24 || es[1].Op != "recv" || es[1].Peer != -1 {
		t.Errorf("p2p entries %+v", es)
	}
	// No ring: nothing recorded, nothing breaks.
	s3 := newCallState(0, 0, []int{0, 1}, time.Minute)
	id, _, _, _ := s3.beginCollective(ar, t0)
	s3.wait(id, 1, t0)
	s3.endAt(id, t0, nil)
	if es := s3.flight.entries(0); es != nil {
		t.Errorf("no ring: %v", es)
	}
}

// inprocGroups connects world ranks over the in-process transport.
func inprocGroups(world int, timeout time.Duration) []*Group {
	m := transport.NewInProc(world, transport.Faults{})
	gs := make([]*Group, world)
	for r, ep := range m.Endpoints {
		gs[r] = FromEndpoint(ep, nil, "inproc", timeout)
	}
	return gs
}

// TestFlightRecordConcurrent: calls from several goroutines while others
// read the record (run it with -race); every group ends up with the last
// entries, all done, in sequence order.
func TestFlightRecordConcurrent(t *testing.T) {
	const world, iters = 3, 300
	gs := inprocGroups(world, time.Minute)
	defer func() {
		for _, g := range gs {
			g.Destroy()
		}
	}()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := tensor.Zeros(4)
			for range iters {
				if err := g.AllReduce(context.Background(), x, Sum); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var readers sync.WaitGroup
	for _, g := range gs {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = g.FlightRecord()
				var buf bytes.Buffer
				if err := g.WriteChromeTrace(&buf); err != nil {
					t.Error(err)
				}
				_ = g.world.status(time.Time{})
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	for r, g := range gs {
		es := g.FlightRecord()
		if len(es) != DefaultFlightEntries {
			t.Fatalf("rank %d: %d entries", r, len(es))
		}
		for i, e := range es {
			if want := uint64(iters - DefaultFlightEntries + i + 1); e.Seq != want || e.State != FlightDone {
				t.Fatalf("rank %d entry %d: seq %d %s, want %d done", r, i, e.Seq, e.State, want)
			}
		}
	}
}

// TestFlightDumpOnTimeout: a call that times out because a peer never
// comes writes the flight record, naming the call as failed and the peer
// it waited on.
func TestFlightDumpOnTimeout(t *testing.T) {
	gs := inprocGroups(2, 300*time.Millisecond)
	dir := t.TempDir()
	gs[0].world.flightDir, gs[0].world.autoDump = dir, true
	// Rank 1's directory is this test's own: in the default one
	// (os.TempDir), a record that an earlier process of the same pid
	// left would pass for rank 1's.
	gs[1].world.flightDir = t.TempDir()
	defer func() {
		for _, g := range gs {
			g.Destroy()
		}
	}()
	x := tensor.Zeros(2)
	// A first call that both make, then one that rank 1 never makes.
	var wg sync.WaitGroup
	for _, g := range gs {
		wg.Add(1)
		go func() { defer wg.Done(); g.AllReduce(context.Background(), tensor.Zeros(2), Sum) }()
	}
	wg.Wait()
	err := gs[0].Broadcast(context.Background(), x, 1)
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("got %v, want a TimeoutError", err)
	}
	path := gs[0].world.flightPath()
	if filepath.Dir(path) != dir {
		t.Fatalf("flight path %s not in %s", path, dir)
	}
	b, rerr := os.ReadFile(path)
	if rerr != nil {
		t.Fatalf("no flight record after the timeout: %v", rerr)
	}
	var d FlightDump
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if d.Rank != 0 || d.WorldSize != 2 || d.PID != os.Getpid() || !strings.Contains(d.Reason, "timed out") || len(d.Groups) != 1 {
		t.Fatalf("dump header %+v", d)
	}
	es := d.Groups[0].Entries
	if len(es) != 2 || es[0].Op != "all_reduce" || es[0].State != FlightDone {
		t.Fatalf("entries %+v", es)
	}
	last := es[1]
	// The dump is written when the group fails, before the call ends.
	if last.Op != "broadcast" || last.Seq != 2 || last.Root != 1 || last.WaitingOn != 1 || last.State != FlightWaiting {
		t.Errorf("timed-out call recorded as %+v", last)
	}
	if !strings.Contains(d.Groups[0].Error, "timed out") {
		t.Errorf("group error %q", d.Groups[0].Error)
	}
	// Afterwards the call is failed in the live record.
	if e := gs[0].FlightRecord()[1]; e.State != FlightFailed || !strings.Contains(e.Error, "timed out") {
		t.Errorf("after the error: %+v", e)
	}
	// A group made by FromEndpoint does not dump by itself.
	if _, err := os.Stat(gs[1].world.flightPath()); err == nil {
		t.Errorf("rank 1 dumped without being asked")
	}
}

// TestFlightDumpOnSignal: with DumpOnSignal, SIGUSR1 writes the record.
func TestFlightDumpOnSignal(t *testing.T) {
	gs := inprocGroups(2, time.Minute)
	dir := t.TempDir()
	gs[0].world.flightDir = dir
	gs[1].world.flightDir = t.TempDir() // SIGUSR1 dumps it too: not into os.TempDir
	defer func() {
		for _, g := range gs {
			g.Destroy()
		}
	}()
	stop := DumpOnSignal()
	defer stop()
	var wg sync.WaitGroup
	for _, g := range gs {
		wg.Add(1)
		go func() { defer wg.Done(); g.Barrier(context.Background()) }()
	}
	wg.Wait()
	path := gs[0].world.flightPath()
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			var d FlightDump
			if err := json.Unmarshal(b, &d); err != nil || d.Reason != "SIGUSR1" || len(d.Groups[0].Entries) != 1 || d.Groups[0].Entries[0].Op != "barrier" {
				t.Fatalf("dump %v: %s", err, b)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no dump at %s after SIGUSR1", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestChromeTrace: the trace is the Trace Event Format: one process per
// rank, one thread per group, a complete event per call with its
// duration, an in-flight call lasting to the dump's time.
func TestChromeTrace(t *testing.T) {
	t0 := time.Unix(2000, 0)
	dumps := []*FlightDump{
		{Rank: 0, Host: "h0", Time: t0.Add(10 * time.Second), Groups: []FlightGroup{{ID: 0, Ranks: []int{0, 1}, Entries: []FlightEntry{
			{Op: "all_reduce", Seq: 1, Bytes: 8, DType: "float32", Root: -1, Peer: -1, WaitingOn: -1, State: FlightDone, Start: t0, End: t0.Add(1500 * time.Microsecond)},
			{Op: "broadcast", Seq: 2, Root: 1, Peer: -1, WaitingOn: 1, State: FlightWaiting, Start: t0.Add(2 * time.Second)},
		}}}},
		{Rank: 1, Time: t0.Add(10 * time.Second), Groups: []FlightGroup{{ID: 5, Ranks: []int{0, 1}, Entries: []FlightEntry{
			{Op: "send", Seq: 0, Peer: 0, Tag: 3, Root: -1, WaitingOn: -1, State: FlightDone, Start: t0.Add(time.Millisecond), End: t0.Add(2 * time.Millisecond)},
		}}}},
	}
	var buf bytes.Buffer
	if err := WriteChromeTrace(&buf, dumps...); err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Cat  string         `json:"cat"`
			Ph   string         `json:"ph"`
			TS   float64        `json:"ts"`
			Dur  *float64       `json:"dur"`
			PID  int            `json:"pid"`
			TID  uint32         `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(buf.Bytes(), &tr); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	type ev struct {
		name, ph string
		pid      int
		tid      uint32
		ts, dur  float64
	}
	var got []ev
	names := map[int]string{}
	for _, e := range tr.TraceEvents {
		switch e.Ph {
		case "M":
			if e.Name == "process_name" {
				names[e.PID] = e.Args["name"].(string)
			}
		case "X":
			if e.Dur == nil {
				t.Fatalf("complete event without dur: %+v", e)
			}
			got = append(got, ev{e.Name, e.Ph, e.PID, e.TID, e.TS, *e.Dur})
		default:
			t.Errorf("unexpected phase %q", e.Ph)
		}
	}
	want := []ev{
		{"all_reduce", "X", 0, 0, 0, 1500},
		{"broadcast", "X", 0, 0, 2e6, 8e6},
		{"send", "X", 1, 5, 1000, 1000},
	}
	if len(got) != len(want) {
		t.Fatalf("events %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if names[0] != "rank 0 (h0)" || names[1] != "rank 1" {
		t.Errorf("process names %v", names)
	}
	if !strings.Contains(buf.String(), `"waiting_on":1`) || !strings.Contains(buf.String(), `"cat":"p2p"`) {
		t.Errorf("args missing: %s", buf.String())
	}
}

// TestFlightDumpOnDesync: members that issue different collectives both
// fail with a DesyncError, and each writes its flight record with the
// call that did not match.
func TestFlightDumpOnDesync(t *testing.T) {
	gs := inprocGroups(2, time.Minute)
	dirs := []string{t.TempDir(), t.TempDir()}
	for r, g := range gs {
		g.world.flightDir, g.world.autoDump = dirs[r], true
	}
	defer func() {
		for _, g := range gs {
			g.Destroy()
		}
	}()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); errs[0] = gs[0].AllReduce(context.Background(), tensor.Zeros(3), Sum) }()
	go func() { defer wg.Done(); errs[1] = gs[1].Broadcast(context.Background(), tensor.Zeros(3), 0) }()
	wg.Wait()
	for r, g := range gs {
		var de *DesyncError
		if !errors.As(errs[r], &de) {
			t.Fatalf("rank %d: %v, want a DesyncError", r, errs[r])
		}
		b, err := os.ReadFile(g.world.flightPath())
		if err != nil {
			t.Fatalf("rank %d: no flight record: %v", r, err)
		}
		var d FlightDump
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		want := []string{"all_reduce", "broadcast"}[r]
		if !strings.Contains(d.Reason, "out of step") || len(d.Groups[0].Entries) != 1 || d.Groups[0].Entries[0].Op != want {
			t.Errorf("rank %d's record: %s", r, b)
		}
	}
}

// BenchmarkCallStateRecorder is the state machine's share of a call
// (begin, wait, receive, end, with the clock read the Group does at the
// end), with and without the flight recorder.
func BenchmarkCallStateRecorder(b *testing.B) {
	ar := call{op: opAllReduce, dtype: tensor.Float32, count: 2, root: -1, rop: Sum}
	for _, size := range []int{0, DefaultFlightEntries} {
		b.Run(fmt.Sprintf("ring%d", size), func(b *testing.B) {
			s := newCallState(0, 0, []int{0, 1}, time.Minute)
			s.flight = newFlightRing(size)
			s.probeAfter = 0
			b.ReportAllocs()
			for b.Loop() {
				now := time.Now()
				id, _, _, _ := s.beginCollective(ar, now)
				s.wait(id, 1, now)
				s.received(id)
				s.endAt(id, time.Now(), nil)
			}
		})
	}
}
