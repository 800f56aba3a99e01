package elastic

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func node(id string, rank int) Node {
	return Node{ID: id, Addr: "host-" + id, NodeRank: rank, LocalWorldSize: 2}
}

// step applies Decide for one node to a shared state, as the executor
// does with a CompareAndSet that always wins.
func step(cfg Config, s *State, self Node, after int, now time.Time, beats map[string]Heartbeat) Decision {
	d := Decide(cfg, View{State: *s, Self: self, After: after, Now: now, Beats: beats})
	if d.Write {
		*s = d.Next
	}
	return d
}

func TestDecideFixedSize(t *testing.T) {
	cfg := Config{MinNodes: 2, MaxNodes: 2, LastCall: time.Second, KeepAlive: 10 * time.Second}
	var s State
	a, b := node("a", -1), node("b", -1)
	if d := step(cfg, &s, a, -1, t0, nil); d.Action != Wait || len(s.Members) != 1 || s.Complete {
		t.Fatalf("first node: %v, state %+v", d.Action, s)
	}
	// Waiting again changes nothing.
	if d := step(cfg, &s, a, -1, t0.Add(time.Second), nil); d.Action != Wait || d.Write {
		t.Fatalf("first node again: %v write=%v", d.Action, d.Write)
	}
	d := step(cfg, &s, b, -1, t0.Add(2*time.Second), nil)
	if d.Action != Start || d.NodeRank != 1 || d.NumNodes != 2 || d.RankOffset != 2 || d.WorldSize != 4 || !s.Complete {
		t.Fatalf("second node: %+v", d)
	}
	d = step(cfg, &s, a, -1, t0.Add(3*time.Second), nil)
	if d.Action != Start || d.NodeRank != 0 || d.RankOffset != 0 || d.Write {
		t.Fatalf("first node after completion: %+v", d)
	}
}

func TestDecideStaticRanks(t *testing.T) {
	cfg := Config{MinNodes: 3, MaxNodes: 3}
	var s State
	// They arrive in the reverse of their node ranks.
	for i, n := range []Node{node("c", 2), node("b", 1), node("a", 0)} {
		d := step(cfg, &s, n, -1, t0.Add(time.Duration(i)*time.Second), nil)
		if i < 2 && d.Action != Wait {
			t.Fatalf("node %s: %v", n.ID, d.Action)
		}
	}
	for want, n := range []Node{node("a", 0), node("b", 1), node("c", 2)} {
		d := step(cfg, &s, n, -1, t0.Add(5*time.Second), nil)
		if d.Action != Start || d.NodeRank != want || d.RankOffset != 2*want {
			t.Fatalf("node %s: %+v, want node rank %d", n.ID, d, want)
		}
	}
}

func TestDecideDuplicateNodeRank(t *testing.T) {
	cfg := Config{MinNodes: 2, MaxNodes: 2}
	var s State
	step(cfg, &s, node("a", 0), -1, t0, nil)
	d := step(cfg, &s, node("b", 0), -1, t0, nil)
	var re *RendezvousError
	if d.Action != Abort || !errors.As(d.Err, &re) || re.Node != "host-b" {
		t.Fatalf("duplicate node rank: %+v", d)
	}
	t.Log(d.Err)
	d = step(cfg, &s, node("c", 5), -1, t0, nil)
	if d.Action != Abort || !errors.As(d.Err, &re) {
		t.Fatalf("node rank out of range: %+v", d)
	}
}

func TestDecideLastCall(t *testing.T) {
	cfg := Config{MinNodes: 1, MaxNodes: 3, LastCall: 10 * time.Second}
	var s State
	a, b := node("a", -1), node("b", -1)
	step(cfg, &s, a, -1, t0, nil)
	if !s.Deadline.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("deadline %v", s.Deadline)
	}
	step(cfg, &s, b, -1, t0.Add(5*time.Second), nil)
	if d := step(cfg, &s, a, -1, t0.Add(9*time.Second), nil); d.Action != Wait {
		t.Fatalf("before the last call ends: %v", d.Action)
	}
	d := step(cfg, &s, a, -1, t0.Add(10*time.Second), nil)
	if d.Action != Start || d.NumNodes != 2 || !s.Complete || !s.Deadline.IsZero() {
		t.Fatalf("at the end of the last call: %+v state %+v", d, s)
	}
}

func TestDecideDeadMembersDropped(t *testing.T) {
	cfg := Config{MinNodes: 2, MaxNodes: 2, KeepAlive: 5 * time.Second}
	var s State
	step(cfg, &s, node("a", -1), -1, t0, nil)
	// a dies; b arrives much later: a is dropped and b waits.
	beats := map[string]Heartbeat{"a": {At: t0.Add(time.Second)}}
	d := step(cfg, &s, node("b", -1), -1, t0.Add(time.Minute), beats)
	if d.Action != Wait || len(s.Members) != 1 || s.Members[0].ID != "b" {
		t.Fatalf("dead member kept: %+v %+v", d, s)
	}
	// A fresh heartbeat keeps a member.
	var s2 State
	step(cfg, &s2, node("a", -1), -1, t0, nil)
	beats = map[string]Heartbeat{"a": {At: t0.Add(59 * time.Second)}}
	if d := step(cfg, &s2, node("b", -1), -1, t0.Add(time.Minute), beats); d.Action != Start {
		t.Fatalf("live member dropped: %+v", d)
	}
}

func TestDecideRestartAndWaitingList(t *testing.T) {
	cfg := Config{MinNodes: 1, MaxNodes: 2, LastCall: time.Second, KeepAlive: time.Hour}
	var s State
	a, b := node("a", -1), node("b", -1)
	step(cfg, &s, a, -1, t0, nil)
	d := step(cfg, &s, a, -1, t0.Add(time.Second), nil)
	if d.Action != Start || d.Next.Round != 0 || d.NumNodes != 1 {
		t.Fatalf("a alone: %+v", d)
	}
	if r, why, err := Check(cfg, s, 0, "a", nil, t0); r || err != nil {
		t.Fatalf("nothing changed but Check says %v %q %v", r, why, err)
	}
	// b arrives late: it waits, and a is told to re-rendezvous.
	if d := step(cfg, &s, b, -1, t0.Add(2*time.Second), nil); d.Action != Wait || len(s.Waiting) != 1 {
		t.Fatalf("late node: %+v", d)
	}
	r, why, err := Check(cfg, s, 0, "a", nil, t0.Add(2*time.Second))
	if !r || err != nil {
		t.Fatalf("waiting node did not trigger a restart: %v %q %v", r, why, err)
	}
	t.Log(why)
	// a comes back having done round 0: round 1 opens, b joins it, full.
	if d := step(cfg, &s, a, 0, t0.Add(3*time.Second), nil); d.Action != Wait || s.Round != 1 {
		t.Fatalf("a reopening: %+v %+v", d, s)
	}
	d = step(cfg, &s, b, -1, t0.Add(3*time.Second), nil)
	if d.Action != Start || d.NumNodes != 2 || d.NodeRank != 1 || len(s.Waiting) != 0 {
		t.Fatalf("b joining round 1: %+v %+v", d, s)
	}
	if d := step(cfg, &s, a, 0, t0.Add(3*time.Second), nil); d.Action != Start || d.NodeRank != 0 || d.WorldSize != 4 {
		t.Fatalf("a in round 1: %+v", d)
	}
	// Full: a third node waits but triggers no restart.
	c := node("c", -1)
	step(cfg, &s, c, -1, t0.Add(4*time.Second), nil)
	if r, _, _ := Check(cfg, s, 1, "a", nil, t0.Add(4*time.Second)); r {
		t.Fatal("a waiting node triggered a restart of a full job")
	}
	// b fails and re-rendezvouses: a is told.
	step(cfg, &s, b, 1, t0.Add(5*time.Second), nil)
	if r, _, _ := Check(cfg, s, 1, "a", nil, t0.Add(5*time.Second)); !r {
		t.Fatal("a newer round did not trigger a restart")
	}
}

func TestCheck(t *testing.T) {
	cfg := Config{MinNodes: 2, MaxNodes: 3, KeepAlive: 5 * time.Second}
	s := State{Round: 4, Complete: true, Members: []Node{node("a", -1), node("b", -1)}}
	s.Members[0].Joined, s.Members[1].Joined = t0, t0
	now := t0.Add(time.Minute)
	fresh := map[string]Heartbeat{"a": {At: now}, "b": {At: now}}
	cases := []struct {
		name    string
		s       func(State) State
		beats   map[string]Heartbeat
		round   int
		restart bool
		failed  bool
	}{
		{"steady", nil, fresh, 4, false, false},
		{"newer round", func(s State) State { s.Round = 5; s.Complete = false; return s }, fresh, 4, true, false},
		{"dead member", nil, map[string]Heartbeat{"a": {At: now}, "b": {At: t0}}, 4, true, false},
		{"member done", nil, map[string]Heartbeat{"a": {At: now}, "b": {Done: true}}, 4, false, false},
		{"done beats waiting", func(s State) State { s.Waiting = []Node{node("c", -1)}; return s },
			map[string]Heartbeat{"a": {At: now}, "b": {Done: true}, "c": {At: now}}, 4, false, false},
		{"waiting", func(s State) State { s.Waiting = []Node{node("c", -1)}; return s },
			map[string]Heartbeat{"a": {At: now}, "b": {At: now}, "c": {At: now}}, 4, true, false},
		{"waiting but dead", func(s State) State { s.Waiting = []Node{node("c", -1)}; return s },
			map[string]Heartbeat{"a": {At: now}, "b": {At: now}, "c": {At: t0}}, 4, false, false},
		{"failed", func(s State) State { s.Failed = "rank 3 died"; return s }, fresh, 4, false, true},
	}
	for _, c := range cases {
		st := cloneState(s)
		if c.s != nil {
			st = c.s(st)
		}
		r, why, err := Check(cfg, st, c.round, "a", c.beats, now)
		var jf *JobFailedError
		if r != c.restart || errors.As(err, &jf) != c.failed {
			t.Errorf("%s: Check = %v, %q, %v; want restart %v, failed %v", c.name, r, why, err, c.restart, c.failed)
		}
		var lost *NodeLostError
		if errors.As(err, &lost) != (c.name == "dead member") {
			t.Errorf("%s: Check = %v, %q, %v; a *NodeLostError only for a dead member", c.name, r, why, err)
		}
	}
}

// TestCheckLostNode: a member that stopped heartbeating is named with its
// address, its ranks, how long it has been silent, and how many members
// are left against the fewest the job may run with (the agent restarts
// only when both restarts and nodes allow).
func TestCheckLostNode(t *testing.T) {
	cfg := Config{MinNodes: 2, MaxNodes: 3, KeepAlive: 5 * time.Second}
	s := State{Round: 2, Complete: true, Members: []Node{node("a", -1), node("b", -1), node("c", -1)}}
	for i := range s.Members {
		s.Members[i].Joined, s.Members[i].LocalWorldSize = t0, 4
	}
	s.Members[1].Addr = "10.0.0.2"
	now := t0.Add(time.Minute)
	beats := map[string]Heartbeat{"a": {At: now}, "b": {At: now.Add(-7 * time.Second)}, "c": {At: now}}
	r, why, err := Check(cfg, s, 2, "a", beats, now)
	var lost *NodeLostError
	if !r || !errors.As(err, &lost) {
		t.Fatalf("Check = %v, %q, %v; want a restart with a *NodeLostError", r, why, err)
	}
	want := NodeLostError{Node: s.Members[1], Round: 2, Silence: 7 * time.Second, FirstRank: 4, LastRank: 7, Alive: 2, MinNodes: 2}
	if *lost != want {
		t.Errorf("lost %+v, want %+v", *lost, want)
	}
	if msg := lost.Error(); !strings.Contains(msg, "node 10.0.0.2 (b, ranks 4..7) stopped sending heartbeats 7s ago") {
		t.Errorf("message %q does not name the node, its ranks and its silence", msg)
	}
	// Two of three lost: one left, fewer than MinNodes.
	beats["c"] = Heartbeat{At: t0}
	if _, _, err := Check(cfg, s, 2, "a", beats, now); !errors.As(err, &lost) || lost.Alive != 1 || lost.Node.ID != "b" {
		t.Errorf("two lost: %v (alive %d); want node b named first, 1 alive", err, lost.Alive)
	}
}

func TestDecideFailedAborts(t *testing.T) {
	s := State{Round: 2, Failed: "rank 1 on host-x: signal SIGKILL"}
	d := Decide(Config{MinNodes: 1, MaxNodes: 1}, View{State: s, Self: node("a", -1), After: -1, Now: t0})
	var jf *JobFailedError
	if d.Action != Abort || !errors.As(d.Err, &jf) {
		t.Fatalf("%+v", d)
	}
}

// TestDecideEarlierJob: a store that outlives jobs (etcd) may hold the
// state of an earlier job with the same run id. A new node that finds it
// ended (every member done, or gone; failed or not) opens a fresh round
// after it; one that finds a live job waits or aborts as before.
func TestDecideEarlierJob(t *testing.T) {
	cfg := Config{MinNodes: 1, MaxNodes: 2, LastCall: time.Second, KeepAlive: 10 * time.Second}
	a, b, c := node("a", -1), node("b", -1), node("c", -1)
	a.Joined, b.Joined = t0, t0
	done := map[string]Heartbeat{"a": {Done: true}, "b": {Done: true}}
	finished := State{Round: 4, Complete: true, Members: []Node{a, b}}
	d := Decide(cfg, View{State: finished, Self: c, After: -1, Now: t0.Add(time.Hour), Beats: done})
	if !d.Write || d.Next.Round != 5 || d.Next.Complete || len(d.Next.Members) != 1 || d.Next.Members[0].ID != "c" {
		t.Fatalf("after a finished job: %+v", d)
	}
	failed := State{Round: 2, Complete: true, Members: []Node{a, b}, Failed: "rank 1: exit 1"}
	stale := map[string]Heartbeat{"a": {At: t0}, "b": {At: t0.Add(time.Second)}}
	d = Decide(cfg, View{State: failed, Self: c, After: -1, Now: t0.Add(time.Minute), Beats: stale})
	if d.Action == Abort || d.Next.Failed != "" || d.Next.Round != 3 {
		t.Fatalf("after a failed job whose nodes are gone: %+v", d)
	}
	// The same failed job with a live member: abort, as before.
	live := map[string]Heartbeat{"a": {At: t0.Add(time.Minute)}, "b": {At: t0}}
	if d := Decide(cfg, View{State: failed, Self: c, After: -1, Now: t0.Add(time.Minute), Beats: live}); d.Action != Abort {
		t.Fatalf("a failed job with a live node: %+v", d)
	}
	// A running job (a member alive) is not reset: the node waits.
	if d := Decide(cfg, View{State: finished, Self: c, After: -1, Now: t0.Add(time.Minute), Beats: live}); d.Action != Wait || d.Next.Round != 4 {
		t.Fatalf("a running job: %+v", d)
	}
	// A node that is a member of the round is never reset.
	if d := Decide(cfg, View{State: finished, Self: a, After: -1, Now: t0.Add(time.Hour), Beats: done}); d.Action != Start || d.Next.Round != 4 {
		t.Fatalf("a member: %+v", d)
	}
}

// TestDecideRandomSchedules runs nodes through Decide in seeded random
// orders and arrival times, with failures that make nodes re-rendezvous,
// and checks that every round that completes is one that all its members
// agree on, with distinct node ranks and MinNodes..MaxNodes members.
func TestDecideRandomSchedules(t *testing.T) {
	for seed := uint64(1); seed <= 400; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		nodes := 1 + rng.IntN(5)
		minN := 1 + rng.IntN(nodes)
		maxN := minN + rng.IntN(nodes-minN+1)
		static := minN == maxN && maxN == nodes && rng.IntN(2) == 0
		cfg := Config{MinNodes: minN, MaxNodes: maxN, LastCall: time.Duration(rng.IntN(5)) * time.Second, KeepAlive: time.Hour}
		desc := fmt.Sprintf("seed %d: %d nodes, %d:%d, static %v", seed, nodes, minN, maxN, static)
		ns := make([]Node, nodes)
		for i := range ns {
			r := -1
			if static {
				r = rng.IntN(nodes) // reshuffled below into a permutation
			}
			ns[i] = node(fmt.Sprintf("n%d", i), r)
		}
		if static {
			for i, p := range rng.Perm(nodes) {
				ns[i].NodeRank = p
			}
		}
		var s State
		after := make([]int, nodes)
		for i := range after {
			after[i] = -1
		}
		arrive := make([]time.Duration, nodes)
		for i := range arrive {
			arrive[i] = time.Duration(rng.IntN(10)) * time.Second
		}
		started := map[int]map[string]int{} // round -> node -> rank
		now := t0
		failures := rng.IntN(3)
		for it := 0; it < 2000; it++ {
			now = now.Add(time.Duration(rng.IntN(800)) * time.Millisecond)
			i := rng.IntN(nodes)
			if now.Sub(t0) < arrive[i] {
				continue
			}
			if after[i] >= 0 && after[i] == s.Round && s.Complete {
				// Running: maybe fail, which makes it re-rendezvous.
				if failures > 0 && rng.IntN(20) == 0 {
					failures--
					if d := step(cfg, &s, ns[i], after[i], now, nil); d.Action == Start {
						if d.Next.Round <= after[i] {
							t.Fatalf("%s: a failed node restarted in the round it left", desc)
						}
						if started[d.Next.Round] == nil {
							started[d.Next.Round] = map[string]int{}
						}
						started[d.Next.Round][ns[i].ID] = d.NodeRank
						after[i] = d.Next.Round
					}
				}
				continue
			}
			d := step(cfg, &s, ns[i], after[i], now, nil)
			switch d.Action {
			case Abort:
				t.Fatalf("%s: abort: %v", desc, d.Err)
			case Start:
				r := d.Next.Round
				if started[r] == nil {
					started[r] = map[string]int{}
				}
				if prev, ok := started[r][ns[i].ID]; ok && prev != d.NodeRank {
					t.Fatalf("%s: node %s has two ranks in round %d", desc, ns[i].ID, r)
				}
				started[r][ns[i].ID] = d.NodeRank
				if d.NumNodes < minN || d.NumNodes > maxN {
					t.Fatalf("%s: round %d has %d nodes", desc, r, d.NumNodes)
				}
				if static && d.NodeRank != ns[i].NodeRank {
					t.Fatalf("%s: static node %s got rank %d", desc, ns[i].ID, d.NodeRank)
				}
				after[i] = r
			}
		}
		// Some round has completed, and in each the ranks are distinct.
		if len(started) == 0 {
			t.Fatalf("%s: no round completed; state %+v", desc, s)
		}
		for r, m := range started {
			var ranks []int
			for _, k := range m {
				ranks = append(ranks, k)
			}
			slices.Sort(ranks)
			if len(slices.Compact(ranks)) != len(m) {
				t.Fatalf("%s: round %d: duplicate ranks %v", desc, r, m)
			}
		}
		// At the end, the latest complete round's members all started.
		if s.Complete {
			if got := len(started[s.Round]); got != len(s.Members) {
				t.Fatalf("%s: round %d: %d of %d members started", desc, s.Round, got, len(s.Members))
			}
		}
	}
}

// TestAfterLoss: a lost node restarts the job only while restarts are
// left and the nodes left are enough; otherwise the job ends, saying why.
func TestAfterLoss(t *testing.T) {
	for _, c := range []struct {
		alive, min, restarts, max int
		restart                   bool
		says                      string
	}{
		{2, 2, 0, 3, true, "restarting with the 2 nodes left (restart 1 of 3)"},
		{2, 2, 3, 3, false, "no restart left (--max-restarts 3): ending the job"},
		{1, 2, 0, 3, false, "3 restart(s) left, and 1 node(s) left of the 2 the job needs (--nnodes): ending the job"},
		{1, 2, 0, 0, false, "no restart left (--max-restarts 0), and 1 node(s) left of the 2 the job needs (--nnodes): ending the job"},
	} {
		restart, why := afterLoss(&NodeLostError{Alive: c.alive, MinNodes: c.min}, c.restarts, c.max)
		if restart != c.restart || why != c.says {
			t.Errorf("alive %d of min %d, restarts %d of %d: %v %q; want %v %q", c.alive, c.min, c.restarts, c.max, restart, why, c.restart, c.says)
		}
	}
}

// TestDecideJudgesBeatsAsRead: a node counts as gone only if its
// heartbeat was older than KeepAlive when it was read (Heartbeat.Read),
// not when a call that read many heartbeats in turn decides; a node whose
// heartbeat was never read (Read at its join) is not gone yet; a
// heartbeat without a read time is judged at Now.
func TestDecideJudgesBeatsAsRead(t *testing.T) {
	cfg := Config{MinNodes: 2, MaxNodes: 2, KeepAlive: 5 * time.Second}
	now := t0.Add(time.Minute)
	for _, c := range []struct {
		name string
		beat Heartbeat
		gone bool
	}{
		{"fresh when read", Heartbeat{At: t0.Add(50 * time.Second), Read: t0.Add(52 * time.Second)}, false},
		{"old when read", Heartbeat{At: t0.Add(50 * time.Second), Read: t0.Add(58 * time.Second)}, true},
		{"judged at Now without a read time", Heartbeat{At: t0.Add(50 * time.Second)}, true},
		{"not read since it joined", Heartbeat{Read: t0}, false},
		{"read and missing", Heartbeat{Read: now}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s State
			step(cfg, &s, node("a", -1), -1, t0, nil)
			d := step(cfg, &s, node("b", -1), -1, now, map[string]Heartbeat{"a": c.beat})
			dropped := indexOf(s.Members, "a") < 0
			if dropped != c.gone {
				t.Fatalf("a dropped %v, want %v (decision %+v, state %+v)", dropped, c.gone, d, s)
			}
			if !c.gone && d.Action != Start {
				t.Fatalf("a kept but the round did not start: %+v", d)
			}
		})
	}
}
