package elastic

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Config is what every node of a job must agree on for rendezvous.
type Config struct {
	// MinNodes and MaxNodes bound the membership of a round (--nnodes
	// MIN:MAX). A fixed --nnodes N is MinNodes = MaxNodes = N.
	MinNodes, MaxNodes int
	// LastCall is how long a round stays open for more nodes once
	// MinNodes have joined (torch's last_call_timeout).
	LastCall time.Duration
	// KeepAlive is how old a node's heartbeat may be before the others
	// count it as gone (torch's keep_alive_interval × max_attempt).
	KeepAlive time.Duration
}

// Node is one agent (one `godist run` process) taking part in rendezvous.
type Node struct {
	ID   string `json:"id"`   // unique per agent process (NewNodeID)
	Addr string `json:"addr"` // host the node's workers are reached at
	// NodeRank is the rank the node asked for (static rendezvous,
	// --node-rank), or -1 to be given one in join order.
	NodeRank int `json:"node_rank"`
	// LocalWorldSize is the number of workers the node starts.
	LocalWorldSize int       `json:"local_world_size"`
	Joined         time.Time `json:"joined"`
}

// State is the rendezvous state that the nodes share through the store.
// Members is in node-rank order once Complete.
type State struct {
	Round    int       `json:"round"`
	Complete bool      `json:"complete"`
	Members  []Node    `json:"members"`
	Waiting  []Node    `json:"waiting,omitempty"` // arrived after Complete
	Deadline time.Time `json:"deadline,omitzero"` // end of the last call
	Failed   string    `json:"failed,omitempty"`  // why the job gave up, when it has
}

// Heartbeat is what a node last published about itself, as read at a
// time.
type Heartbeat struct {
	At   time.Time // when; the zero time for a node never seen
	Done bool      // the node's workers finished successfully
	// Read is when the store was read for it (the zero time: at the
	// View's Now). A node counts as gone only if its heartbeat was
	// older than KeepAlive when read: on a loaded store a call that reads
	// many heartbeats in turn ends seconds after its first read, and a
	// node whose beat was fresh then may have beaten again since.
	Read time.Time
}

// View is what a node observed: the state it read, its own identity, the
// last round it took part in (-1 for none) and the time.
type View struct {
	State State
	Self  Node
	After int
	Now   time.Time
	// Beats holds the heartbeats of the nodes in State.Members and
	// State.Waiting, by ID; a node missing here has never been seen (as
	// of Now).
	Beats map[string]Heartbeat
}

// Action is what Decide tells a node to do.
type Action int

const (
	// Wait: poll the state again later.
	Wait Action = iota
	// Start: the round is complete and the node is in it; start the
	// workers with Decision.NodeRank.
	Start
	// Abort: the job failed on some node (Decision.Err says which) or the
	// membership cannot work (duplicate node ranks).
	Abort
)

func (a Action) String() string {
	switch a {
	case Wait:
		return "wait"
	case Start:
		return "start"
	case Abort:
		return "abort"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is Decide's answer. When Write is true the node must store Next
// (with CompareAndSet against the state it read) before acting, and read
// again if another node wrote first.
type Decision struct {
	Next   State
	Write  bool
	Action Action
	// For Start: the node's rank among the nodes, the number of nodes and
	// the first global rank of its workers.
	NodeRank, NumNodes, RankOffset, WorldSize int
	Err                                       error
}

// RendezvousError is a rendezvous that cannot succeed, naming the node.
type RendezvousError struct {
	Node   string // the node's ID or address
	Round  int
	Reason string
}

func (e *RendezvousError) Error() string {
	return fmt.Sprintf("elastic: rendezvous round %d: node %s: %s", e.Round, e.Node, e.Reason)
}

// NodeLostError is what Check returns, with restart, when a member of the
// running round stopped sending heartbeats: its host is down or cut off,
// or its launcher is stopped. Unlike a node that leaves (it opens a new
// round) or one that waits to join, a lost node is a failure of the job:
// the agent restarts only when restarts are left and the nodes still
// alive are enough (Alive >= MinNodes), and otherwise ends the job with
// a report that names the node.
type NodeLostError struct {
	Node    Node
	Round   int
	Silence time.Duration // since its last heartbeat (or its joining)
	// FirstRank and LastRank are the global ranks its workers had.
	FirstRank, LastRank int
	// Alive is how many members still send heartbeats (this node among
	// them), MinNodes the fewest a round may have.
	Alive, MinNodes int
}

func (e *NodeLostError) Error() string {
	return fmt.Sprintf("node %s (%s, ranks %d..%d) stopped sending heartbeats %v ago, in round %d: its host is down or cut off from the network, or its launcher is stopped",
		e.Node.Addr, e.Node.ID, e.FirstRank, e.LastRank, e.Silence.Round(100*time.Millisecond), e.Round)
}

// JobFailedError is returned when another node gave the job up.
type JobFailedError struct{ Reason string }

func (e *JobFailedError) Error() string { return "elastic: the job failed: " + e.Reason }

// Decide is the rendezvous as a pure function: from what a node observed
// it returns the state to write and what to do.
//
// The rules, for a node that last took part in round v.After:
//   - a node that has not yet taken part (v.After < 0) and finds the
//     state of a job that ended, failed or complete, with every member
//     done or gone, and no live node waiting, opens a new round after it
//     (the store, etcd, outlived an earlier job with the same run id);
//   - a failed job (State.Failed) means Abort;
//   - a complete round the node took part in, or one older than that,
//     is over: the node opens round+1 with no members;
//   - in an open round, members whose heartbeat is older than KeepAlive
//     are dropped, the node joins (if there is room), and the round
//     closes at once when MaxNodes have joined, or when the last call
//     (LastCall after MinNodes had joined) is over;
//   - a complete newer round with the node in it means Start; without
//     it, the node puts itself on the waiting list (which tells the
//     members to re-rendezvous, see Check) and waits.
//
// Nodes that asked for a node rank (static rendezvous) get it; the others
// are ranked in join order.
func Decide(cfg Config, v View) Decision {
	s := cloneState(v.State)
	write := false
	if v.After < 0 && ended(cfg, s, v.Self.ID, v.Beats, v.Now) {
		// What a store that outlives jobs (etcd) keeps of an earlier job
		// with the same run id: begin anew, after its rounds.
		s, write = State{Round: s.Round + 1}, true
	}
	if s.Failed != "" {
		return Decision{Next: s, Action: Abort, Err: &JobFailedError{Reason: s.Failed}}
	}
	if s.Complete && s.Round <= v.After {
		s = State{Round: max(s.Round, v.After) + 1, Waiting: s.Waiting}
		write = true
	}
	if s.Complete {
		if i := indexOf(s.Members, v.Self.ID); i >= 0 {
			return startDecision(s, i, write)
		}
		w := alive(cfg, s.Waiting, v.Beats, v.Now, v.Self.ID)
		if len(w) != len(s.Waiting) {
			s.Waiting, write = w, true
		}
		if indexOf(s.Waiting, v.Self.ID) < 0 {
			self := v.Self
			self.Joined = v.Now
			s.Waiting, write = append(s.Waiting, self), true
		}
		return Decision{Next: s, Write: write, Action: Wait}
	}
	// The round is open.
	if m := alive(cfg, s.Members, v.Beats, v.Now, v.Self.ID); len(m) != len(s.Members) {
		s.Members, write = m, true
	}
	if i := indexOf(s.Waiting, v.Self.ID); i >= 0 {
		s.Waiting, write = slices.Delete(s.Waiting, i, i+1), true
	}
	if indexOf(s.Members, v.Self.ID) < 0 && len(s.Members) < cfg.MaxNodes {
		if v.Self.NodeRank >= 0 {
			for _, m := range s.Members {
				if m.NodeRank == v.Self.NodeRank {
					return Decision{Next: v.State, Action: Abort, Err: &RendezvousError{Node: v.Self.Addr, Round: s.Round,
						Reason: fmt.Sprintf("node rank %d is already taken by the node at %s (id %s); give every node its own --node-rank", m.NodeRank, m.Addr, m.ID)}}
				}
			}
			if v.Self.NodeRank >= cfg.MaxNodes {
				return Decision{Next: v.State, Action: Abort, Err: &RendezvousError{Node: v.Self.Addr, Round: s.Round,
					Reason: fmt.Sprintf("--node-rank %d is not below --nnodes %d", v.Self.NodeRank, cfg.MaxNodes)}}
			}
		}
		self := v.Self
		self.Joined = v.Now
		s.Members, write = append(s.Members, self), true
	}
	n := len(s.Members)
	switch {
	case n >= cfg.MaxNodes:
		s.Complete = true
	case n >= cfg.MinNodes:
		if s.Deadline.IsZero() {
			s.Deadline, write = v.Now.Add(cfg.LastCall), true
		}
		if !v.Now.Before(s.Deadline) {
			s.Complete = true
		}
	default:
		if !s.Deadline.IsZero() {
			s.Deadline, write = time.Time{}, true
		}
	}
	if !s.Complete {
		return Decision{Next: s, Write: write, Action: Wait}
	}
	// Close the round: rank the members, and let the ones that did not
	// make it wait for the next round.
	s.Deadline = time.Time{}
	sortMembers(s.Members)
	if i := indexOf(s.Members, v.Self.ID); i >= 0 {
		return startDecision(s, i, true)
	}
	return Decision{Next: s, Write: true, Action: Wait}
}

func startDecision(s State, i int, write bool) Decision {
	d := Decision{Next: s, Write: write, Action: Start, NodeRank: i, NumNodes: len(s.Members)}
	for j, m := range s.Members {
		if j < i {
			d.RankOffset += m.LocalWorldSize
		}
		d.WorldSize += m.LocalWorldSize
	}
	return d
}

// sortMembers puts the nodes that asked for a rank in that order and the
// others after them in join order (ties broken by ID, so that every node
// sorts the same way).
func sortMembers(ms []Node) {
	sort.SliceStable(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if (a.NodeRank >= 0) != (b.NodeRank >= 0) {
			return a.NodeRank >= 0
		}
		if a.NodeRank != b.NodeRank {
			return a.NodeRank < b.NodeRank
		}
		if !a.Joined.Equal(b.Joined) {
			return a.Joined.Before(b.Joined)
		}
		return a.ID < b.ID
	})
}

// ended reports whether s is what an earlier job with the same run id
// left: failed or complete, with members, all of them done or gone, and
// no live node waiting; self is none of them.
func ended(cfg Config, s State, self string, beats map[string]Heartbeat, now time.Time) bool {
	if (s.Failed == "" && !s.Complete) || len(s.Members) == 0 || indexOf(s.Members, self) >= 0 {
		return false
	}
	for _, m := range s.Members {
		if !beats[m.ID].Done && !gone(cfg, m, beats, now) {
			return false
		}
	}
	for _, w := range s.Waiting {
		if w.ID != self && !gone(cfg, w, beats, now) {
			return false
		}
	}
	return true
}

// alive returns the nodes of ns whose heartbeat is fresh (self always is).
// A node never seen counts as alive for KeepAlive after it joined.
func alive(cfg Config, ns []Node, beats map[string]Heartbeat, now time.Time, self string) []Node {
	var out []Node
	for _, n := range ns {
		if n.ID == self || !gone(cfg, n, beats, now) {
			out = append(out, n)
		}
	}
	if len(out) == len(ns) {
		return ns
	}
	return out
}

func gone(cfg Config, n Node, beats map[string]Heartbeat, now time.Time) bool {
	b := beats[n.ID]
	if cfg.KeepAlive <= 0 || b.Done {
		return false
	}
	if !b.Read.IsZero() && b.Read.Before(now) {
		now = b.Read // judged as of its read (Heartbeat.Read)
	}
	return now.Sub(lastBeat(n, beats)) > cfg.KeepAlive
}

// lastBeat is when n was last heard of: its last heartbeat, or when it
// joined.
func lastBeat(n Node, beats map[string]Heartbeat) time.Time {
	last := n.Joined
	if b, ok := beats[n.ID]; ok && b.At.After(last) {
		last = b.At
	}
	return last
}

// Check tells a node whose workers run in round `round` whether it must
// stop them and re-rendezvous, and why: another node opened a newer
// round (it failed or left), a node waits to join and there is room for
// it, or a member stopped heartbeating (then with a *NodeLostError). It
// returns a *JobFailedError when the job failed on another node. No restart is asked for once a member
// has finished (the job is ending).
func Check(cfg Config, s State, round int, self string, beats map[string]Heartbeat, now time.Time) (restart bool, why string, err error) {
	if s.Failed != "" {
		return false, "", &JobFailedError{Reason: s.Failed}
	}
	for _, m := range s.Members {
		if b := beats[m.ID]; b.Done && s.Round == round {
			return false, "", nil
		}
	}
	if s.Round != round {
		return true, fmt.Sprintf("another node opened rendezvous round %d", s.Round), nil
	}
	if !s.Complete {
		return true, fmt.Sprintf("rendezvous round %d is open again", s.Round), nil
	}
	live, rank := 0, 0
	var lost *NodeLostError
	for _, m := range s.Members {
		switch {
		case m.ID == self || !gone(cfg, m, beats, now):
			live++
		case lost == nil:
			lost = &NodeLostError{Node: m, Round: s.Round, Silence: now.Sub(lastBeat(m, beats)),
				FirstRank: rank, LastRank: rank + m.LocalWorldSize - 1, MinNodes: cfg.MinNodes}
		}
		rank += m.LocalWorldSize
	}
	if lost != nil {
		lost.Alive = live
		return true, lost.Error(), lost
	}
	if w := alive(cfg, s.Waiting, beats, now, ""); len(w) > 0 && len(s.Members) < cfg.MaxNodes {
		return true, fmt.Sprintf("%d node(s) waiting to join (first: %s)", len(w), w[0].Addr), nil
	}
	return false, "", nil
}

func indexOf(ns []Node, id string) int {
	return slices.IndexFunc(ns, func(n Node) bool { return n.ID == id })
}

func cloneState(s State) State {
	s.Members = slices.Clone(s.Members)
	s.Waiting = slices.Clone(s.Waiting)
	return s
}
