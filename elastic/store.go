package elastic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/godist/godist/internal/launch"
	"github.com/godist/godist/store"
)

// Round is a completed rendezvous as one node sees it.
type Round struct {
	Round      int
	NodeRank   int
	NumNodes   int
	Members    []Node // in node-rank order
	RankOffset int    // global rank of this node's local rank 0
	WorldSize  int    // workers over all nodes
	// MasterAddr and MasterPort are where the workers' rank 0 serves its
	// store (env:// init): node 0's address and a port it found free for
	// this round, distinct from the launcher's store.
	MasterAddr string
	MasterPort int
}

// Keys the executor uses, under the store it is given (which the launcher
// prefixes with the run id).
const (
	stateKey = "state"
	beatKey  = "beat/"  // + node ID: "<unix nanos>" or "done"
	roundKey = "round/" // + round + "/master": "host:port" of the workers' store
)

// StoreRendezvous runs rendezvous through a store: the state is one JSON
// value under "state", changed only by CompareAndSet, so that concurrent
// nodes serialize; each node's heartbeat is its own key. Decisions are
// Decide's; this type only reads, writes, sleeps and publishes ports.
type StoreRendezvous struct {
	Store  store.Store // usually a prefix view under the run id
	Config Config
	Self   Node
	// Poll is how often the state is read while waiting (default 100ms).
	Poll time.Duration
	// JoinTimeout bounds one rendezvous (default 10 minutes).
	JoinTimeout time.Duration
	// PickPort returns a port that is free on this host for the workers'
	// store, when this node is node rank 0 (default: a free TCP port).
	PickPort func() (int, error)
	// Now is the clock (default time.Now).
	Now func() time.Time

	beatOnce sync.Once
	beatStop chan struct{}
	beatDone chan struct{}

	// seen caches the heartbeats read (see beats).
	seen struct {
		sync.Mutex
		m map[string]seenBeat
	}
}

// seenBeat is a heartbeat as read at a time; ok false: the key was
// missing (the node was never seen).
type seenBeat struct {
	beat Heartbeat
	ok   bool
	read time.Time
}

func (r *StoreRendezvous) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *StoreRendezvous) poll() time.Duration {
	if r.Poll > 0 {
		return r.Poll
	}
	return 100 * time.Millisecond
}

// read returns the state and its encoding, creating the initial state if
// there is none.
func (r *StoreRendezvous) read(ctx context.Context) (State, []byte, error) {
	init, _ := json.Marshal(State{})
	raw, err := r.Store.CompareAndSet(ctx, stateKey, nil, init)
	if err != nil {
		return State{}, nil, err
	}
	var s State
	if err := json.Unmarshal(raw, &s); err != nil {
		return State{}, nil, fmt.Errorf("elastic: bad rendezvous state %.80q in the store: %w (is another program using this --rdzv-id?)", raw, err)
	}
	return s, raw, nil
}

// beats returns the heartbeats of the nodes named in s, reading from the
// store only those that may have news. Reading every node's heartbeat at
// every poll made a rendezvous of n nodes cost n² reads a poll (256 nodes
// did not settle in five minutes through a TCP store), while heartbeats
// change only every KeepAlive/4. So a node that is done stays done; a
// heartbeat read (or a node that joined) less than maxAge ago is used as
// it is; the others are read again, those that would count their node
// gone first, then the oldest reads, at most budget a call (all of them
// when budget is negative). A node is judged by its heartbeat as read
// (Heartbeat.Read), so one not read yet is not counted gone. Unbounded,
// the reads of nodes that would count gone came all at once KeepAlive
// after hundreds of nodes joined (every cached heartbeat turning old
// together), each call read hundreds in turn and judged them all at its
// end; beside a CPU hog, 256 nodes through etcd then never settled: the
// round's members fell from 243 to 160 as the nodes dropped each other.
func (r *StoreRendezvous) beats(ctx context.Context, s State, maxAge time.Duration, budget int) (map[string]Heartbeat, error) {
	now := r.now()
	have := make(map[string]seenBeat)
	var suspect, stale []Node
	r.seen.Lock()
	for _, ns := range [][]Node{s.Members, s.Waiting} {
		for _, n := range ns {
			if _, ok := have[n.ID]; ok {
				continue
			}
			c, cached := r.seen.m[n.ID]
			if !cached {
				// As good as a read when it joined: a node is not
				// counted gone before KeepAlive after it joined, so
				// the hundreds joining at once are not read at all.
				c = seenBeat{read: n.Joined}
			}
			switch {
			case c.beat.Done:
			case gone(r.Config, n, map[string]Heartbeat{n.ID: c.beat}, now):
				suspect = append(suspect, n)
			case now.Sub(c.read) >= maxAge:
				stale = append(stale, n)
			}
			have[n.ID] = c
		}
	}
	r.seen.Unlock()
	oldest := func(a, b Node) int { return have[a.ID].read.Compare(have[b.ID].read) }
	slices.SortFunc(suspect, oldest)
	slices.SortFunc(stale, oldest)
	toRead := slices.Concat(suspect, stale)
	if budget >= 0 && len(toRead) > budget {
		toRead = toRead[:budget]
	}
	// The reads go to the store without the cache's lock held.
	read := make(map[string]seenBeat)
	for _, n := range toRead {
		c, err := r.readBeat(ctx, n.ID)
		if err != nil {
			return nil, err
		}
		read[n.ID], have[n.ID] = c, c
	}
	r.seen.Lock()
	if r.seen.m == nil {
		r.seen.m = make(map[string]seenBeat)
	}
	maps.Copy(r.seen.m, read)
	r.seen.Unlock()
	out := make(map[string]Heartbeat, len(have))
	for id, c := range have {
		b := Heartbeat{Read: c.read}
		if c.ok {
			b.At, b.Done = c.beat.At, c.beat.Done
		}
		out[id] = b
	}
	return out, nil
}

// maxBackoff bounds the window a node that lost compare-and-sets in a
// row draws its pause from.
const maxBackoff = 4 * time.Second

// beatBudget is how many heartbeats Next and Check read a call: at a
// poll of 100 ms and more, every heartbeat of 256 nodes is read again
// within two seconds, well inside KeepAlive.
const beatBudget = 16

// readBeat reads one node's heartbeat from the store, stamped with the
// time the read began: what it finds is at least as new as the
// heartbeat was then.
func (r *StoreRendezvous) readBeat(ctx context.Context, id string) (seenBeat, error) {
	k := beatKey + id
	now := r.now()
	ok, err := r.Store.Check(ctx, k)
	if err != nil || !ok {
		return seenBeat{read: now}, err
	}
	v, err := r.Store.Get(ctx, k)
	if err != nil {
		return seenBeat{}, err
	}
	return seenBeat{beat: parseBeat(v), ok: true, read: now}, nil
}

// beatAge is how old a heartbeat read may be for Next and Check: the
// interval at which nodes write them.
func (r *StoreRendezvous) beatAge() time.Duration {
	if r.Config.KeepAlive > 0 {
		return r.Config.KeepAlive / 4
	}
	return time.Second
}

func parseBeat(v []byte) Heartbeat {
	if string(v) == "done" {
		return Heartbeat{Done: true}
	}
	ns, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return Heartbeat{}
	}
	return Heartbeat{At: time.Unix(0, ns)}
}

// StartHeartbeat publishes this node's heartbeat every KeepAlive/4 until
// Close or Finish. Next starts it when needed.
func (r *StoreRendezvous) StartHeartbeat(ctx context.Context) error {
	if err := r.Store.Set(ctx, beatKey+r.Self.ID, []byte(strconv.FormatInt(r.now().UnixNano(), 10))); err != nil {
		return err
	}
	r.beatOnce.Do(func() {
		r.beatStop, r.beatDone = make(chan struct{}), make(chan struct{})
		every := r.Config.KeepAlive / 4
		if every <= 0 {
			every = time.Second
		}
		go func() {
			defer close(r.beatDone)
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-r.beatStop:
					return
				case <-t.C:
					c, cancel := context.WithTimeout(context.Background(), every)
					r.Store.Set(c, beatKey+r.Self.ID, []byte(strconv.FormatInt(r.now().UnixNano(), 10)))
					cancel()
				}
			}
		}()
	})
	return nil
}

func (r *StoreRendezvous) stopHeartbeat() {
	if r.beatStop != nil {
		select {
		case <-r.beatStop:
		default:
			close(r.beatStop)
		}
		<-r.beatDone
	}
}

// Next takes part in rendezvous rounds until this node is in a complete
// round newer than after (-1 for none), and returns it. Node rank 0
// publishes the workers' master port for the round; the others wait for
// it. Errors: *JobFailedError when another node gave the job up,
// *RendezvousError for a membership that cannot work or a join timeout,
// store errors otherwise.
func (r *StoreRendezvous) Next(ctx context.Context, after int) (Round, error) {
	if err := r.StartHeartbeat(ctx); err != nil {
		return Round{}, fmt.Errorf("elastic: node %s: publishing its heartbeat: %w", r.Self.Addr, err)
	}
	timeout := r.JoinTimeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastRound = -1
	lost := 0 // compare-and-sets lost in a row
	for {
		s, raw, err := r.read(ctx)
		if err != nil {
			return Round{}, r.timeout(ctx, lastRound, timeout, err)
		}
		lastRound = s.Round
		// After a lost compare-and-set the heartbeats come from those
		// read before: reading them between the state's read and the
		// write widens the window in which another node's write makes
		// this one lose (16 reads of a loaded store).
		budget := beatBudget
		if lost > 0 {
			budget = 0
		}
		beats, err := r.beats(ctx, s, r.beatAge(), budget)
		if err != nil {
			return Round{}, r.timeout(ctx, lastRound, timeout, err)
		}
		d := Decide(r.Config, View{State: s, Self: r.Self, After: after, Now: r.now(), Beats: beats})
		if d.Write {
			next, err := json.Marshal(d.Next)
			if err != nil {
				return Round{}, err
			}
			began := time.Now()
			got, err := r.Store.CompareAndSet(ctx, stateKey, raw, next)
			if err != nil {
				return Round{}, r.timeout(ctx, lastRound, timeout, err)
			}
			if !bytes.Equal(got, next) {
				// Another node wrote first: decide again, after a pause
				// drawn at random from a window that doubles with each
				// loss (Ethernet's backoff), so that hundreds of nodes
				// joining at once take turns instead of all rereading
				// and losing again. Its slot is a read and a write of
				// the state as long as this write took: on a loaded
				// store (etcd beside a CPU hog, tens of ms a call) a
				// fixed 1 ms slot kept the window below what a hundred
				// nodes need, and they joined one every two seconds.
				lost++
				slot := max(time.Millisecond, 2*time.Since(began))
				if err := sleep(ctx, rand.N(min(slot<<min(lost, 10), maxBackoff))); err != nil {
					return Round{}, r.timeout(ctx, lastRound, timeout, err)
				}
				continue
			}
			lost = 0
		}
		switch d.Action {
		case Abort:
			return Round{}, d.Err
		case Start:
			rd := Round{Round: d.Next.Round, NodeRank: d.NodeRank, NumNodes: d.NumNodes, Members: d.Next.Members,
				RankOffset: d.RankOffset, WorldSize: d.WorldSize}
			if err := r.master(ctx, &rd); err != nil {
				return Round{}, r.timeout(ctx, rd.Round, timeout, err)
			}
			return rd, nil
		}
		if err := sleep(ctx, r.pause(s)); err != nil {
			return Round{}, r.timeout(ctx, lastRound, timeout, err)
		}
	}
}

// pause is how long a node waits before reading the state again: Poll,
// stretched by one Poll for every 64 nodes in the state (every node reads
// the whole state, so the load on the store grows with the square of the
// nodes at a fixed poll), drawn at random from half to one and a half of
// that, so that the nodes' reads spread out.
func (r *StoreRendezvous) pause(s State) time.Duration {
	d := r.poll() * time.Duration(1+(len(s.Members)+len(s.Waiting))/64)
	return d/2 + rand.N(d)
}

func (r *StoreRendezvous) timeout(ctx context.Context, round int, limit time.Duration, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &RendezvousError{Node: r.Self.Addr, Round: round, Reason: fmt.Sprintf(
			"no complete round within the join timeout %v (want %d to %d nodes; are the other launchers running with the same --rdzv-endpoint and --rdzv-id?): %v",
			limit, r.Config.MinNodes, r.Config.MaxNodes, err)}
	}
	return err
}

// master publishes (node 0) or reads (the others) the workers' master
// address for the round.
func (r *StoreRendezvous) master(ctx context.Context, rd *Round) error {
	key := roundKey + strconv.Itoa(rd.Round) + "/master"
	if rd.NodeRank == 0 {
		pick := r.PickPort
		if pick == nil {
			pick = FreePort
		}
		port, err := pick()
		if err != nil {
			return fmt.Errorf("elastic: node %s: finding a free port for the workers' store: %w", r.Self.Addr, err)
		}
		addr := net.JoinHostPort(r.Self.Addr, strconv.Itoa(port))
		if err := r.Store.Set(ctx, key, []byte(addr)); err != nil {
			return err
		}
	}
	v, err := r.Store.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("elastic: waiting for node 0 (%s) to publish the workers' master port for round %d: %w", rd.Members[0].Addr, rd.Round, err)
	}
	host, port, err := net.SplitHostPort(string(v))
	if err != nil {
		return fmt.Errorf("elastic: bad master address %q for round %d: %w", v, rd.Round, err)
	}
	rd.MasterAddr = host
	rd.MasterPort, err = strconv.Atoi(port)
	return err
}

// Check reads the state and tells whether this node, running round
// `round`, must re-rendezvous (see the pure Check).
func (r *StoreRendezvous) Check(ctx context.Context, round int) (bool, string, error) {
	s, _, err := r.read(ctx)
	if err != nil {
		return false, "", err
	}
	beats, err := r.beats(ctx, s, r.beatAge(), beatBudget)
	if err != nil {
		return false, "", err
	}
	return Check(r.Config, s, round, r.Self.ID, beats, r.now())
}

// Fail marks the job failed for every node, with the reason.
func (r *StoreRendezvous) Fail(ctx context.Context, reason string) error {
	for {
		s, raw, err := r.read(ctx)
		if err != nil {
			return err
		}
		if s.Failed != "" {
			return nil
		}
		s.Failed = reason
		next, _ := json.Marshal(s)
		got, err := r.Store.CompareAndSet(ctx, stateKey, raw, next)
		if err != nil {
			return err
		}
		if bytes.Equal(got, next) {
			return nil
		}
	}
}

// Finish marks this node's workers as done, stops the heartbeat, and when
// wait is true (the node serving the store), waits until every other
// member of round is done or gone, or ctx ends.
func (r *StoreRendezvous) Finish(ctx context.Context, round int, wait bool) error {
	r.stopHeartbeat()
	if err := r.Store.Set(ctx, beatKey+r.Self.ID, []byte("done")); err != nil {
		return err
	}
	if !wait {
		return nil
	}
	for {
		s, _, err := r.read(ctx)
		if err != nil {
			return err
		}
		beats, err := r.beats(ctx, s, 0, -1) // who is done, now
		if err != nil {
			return err
		}
		pending := false
		for _, m := range s.Members {
			if m.ID != r.Self.ID && !beats[m.ID].Done && !gone(r.Config, m, beats, r.now()) {
				pending = true
			}
		}
		if !pending || s.Round != round || s.Failed != "" {
			return nil
		}
		if err := sleep(ctx, r.poll()); err != nil {
			return err
		}
	}
}

// Close stops the heartbeat. It does not close Store.
func (r *StoreRendezvous) Close() error {
	r.stopHeartbeat()
	return nil
}

// NewToken returns a fresh random job token, hex encoded.
func NewToken() string { return launch.NewToken() }

// NewNodeID returns a fresh random node ID.
func NewNodeID() string { return launch.RandomHex(6) }

// FreePort returns a TCP port that was free on every interface a moment
// ago.
func FreePort() (int, error) { return launch.FreePort("") }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
