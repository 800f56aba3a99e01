package dist

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/dist/internal/samehost"
	"github.com/godist/godist/internal/cpuyield"
	"github.com/godist/godist/store"
	"github.com/godist/godist/transport"
)

// DefaultTimeout is how long a call waits for its peers before the group
// fails, as PyTorch's gloo default.
const DefaultTimeout = 30 * time.Minute

// world is what all groups of one process share: the endpoint, the store
// and the registry of groups by id.
type world struct {
	rank, size int
	ep         *transport.Endpoint
	store      store.Store
	backend    string
	closers    []func() error

	// The flight recorder (flight.go): entries per group (0: none), where
	// dumps go ("": os.TempDir()), whether a timeout or desync dumps by
	// itself, and what stops the SIGUSR1 handler Init installed.
	flightSize int
	flightDir  string
	autoDump   bool
	stopSignal func()
	host       string            // this rank's host, as the other ranks reach it
	model      algo.Model        // the cost model of calls across hosts (topology.go)
	jobID      string            // the job id of every handshake (Options.JobID)
	noCtl      bool              // no control blocks (samehost.go): FromEndpoint's worlds, or Options.SmallCollectives off
	onDemand   bool              // connections made on first use (Options.Connect)
	pins       map[string]string // algorithms pinned by collective (Options.Algorithms; read-only)
	yield      bool              // the control block's waits yield the CPU between polls: more ranks than CPUs
	stopStatus func()            // stops the status publisher (status.go)
	// statusEvery is how often the publisher runs (0: it does not), and
	// statusOK when it last published (Unix nanoseconds): a store that
	// has taken nothing for a while does not answer (waitchain.go).
	statusEvery time.Duration
	statusOK    atomic.Int64
	// storeHost is the rank that serves the store (rank 0 under env://
	// and tcp://), or -1 (etcd://, file://, a store of the caller's).
	storeHost int

	mu struct {
		sync.Mutex
		groups map[uint32]*Group
	}
	probe []byte // measureModel's buffer, while it measures (measure.go)
}

func newWorld(rank, size int, ep *transport.Endpoint, st store.Store, backend string) *world {
	w := &world{rank: rank, size: size, ep: ep, store: st, backend: backend, flightSize: DefaultFlightEntries, storeHost: -1, model: algo.DefaultModel}
	w.mu.groups = map[uint32]*Group{}
	registerWorld(w)
	ep.SetHandlers(transport.Handlers{Control: w.onControl, PeerDown: w.onPeerDown, PeerUp: w.onPeerUp, Unexpected: w.onUnexpected})
	return w
}

func (w *world) register(g *Group) {
	w.mu.Lock()
	w.mu.groups[g.id] = g
	w.mu.Unlock()
}

func (w *world) group(id uint32) *Group {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.groups[id]
}

func (w *world) groups() []*Group {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*Group, 0, len(w.mu.groups))
	for _, g := range w.mu.groups {
		out = append(out, g)
	}
	return out
}

// The transport's events go to the groups' state machines.

func (w *world) onPeerDown(e *transport.PeerError) {
	for _, g := range w.groups() {
		g.decide(func(s *callState, _ time.Time) output { return s.peerDown(e.Rank, e) })
	}
}

func (w *world) onPeerUp(r int) {
	for _, g := range w.groups() {
		g.tellLate(r)
	}
}

func (w *world) onControl(src int, key transport.Key, msg []byte) {
	g := w.group(key.Group &^ p2pBit)
	if g == nil {
		return
	}
	m, err := decodeControl(msg)
	if err != nil {
		return // see proto.go: a control message only ever makes a group fail sooner
	}
	g.decide(func(s *callState, _ time.Time) output { return s.control(src, m) })
}

func (w *world) onUnexpected(src int, h *transport.Header) {
	if h.Key.Group&p2pBit != 0 {
		return
	}
	if g := w.group(h.Key.Group); g != nil {
		g.decide(func(s *callState, _ time.Time) output { return s.unexpected(src, h.Key.Seq, h.FP) })
	}
}

// Group is a process group: a set of ranks that run collectives together.
// Every member must issue the same collectives in the same order; the
// order is checked on every message. A Group is safe for concurrent use:
// calls are numbered in the order they are issued.
//
// When a member dies, or a call finds the members out of step, the group
// fails: every pending and later call returns an error naming the rank and
// the cause. A failed group stays failed; build a new one.
//
// The Group drives its calls' state machine (callstate.go): it feeds it
// what it sees and carries out what it decides.
type Group struct {
	world   *world
	id      uint32
	ranks   []int // global rank of each member, ascending
	rank    int   // this process's rank in the group
	timeout time.Duration
	spans   bool                 // the members are on more than one host
	topo    func() algo.Topology // the members by host, made on first use (topology.go)

	// The same-host engine (samehost.go): the control block of small
	// collectives, once InitSmallCollectives has made one, and the
	// tensors from NewSharedTensor.
	host *samehost.Engine

	ctx    context.Context // cancelled, with the failure as cause, when the group fails
	cancel context.CancelCauseFunc

	mu struct {
		sync.Mutex
		st       *callState
		timer    *time.Timer          // calls st.tick; armed as st decides
		told     chan struct{}        // closed when the peers have been told of the failure
		toldMsg  []byte               // what they were told (tellLate)
		children uint32               // subgroups made from this group so far
		plans    map[schedKey]planned // calls' plans and this rank's schedules (topology.go)
		running  int                  // calls between runCall's start and end
		idle     chan struct{}        // closed when running drops to 0 (waitIdle)
	}
}

// p2pBit marks the group ids of point-to-point frames, whose sequence
// numbers count the messages of their stream rather than collectives.
const p2pBit = 1 << 31

func newGroup(w *world, id uint32, ranks []int, timeout time.Duration) *Group {
	g := &Group{world: w, id: id, ranks: ranks, rank: slices.Index(ranks, w.rank), timeout: timeout}
	g.ctx, g.cancel = context.WithCancelCause(context.Background())
	g.mu.st = newCallState(id, w.rank, ranks, timeout)
	g.mu.st.flight = newFlightRing(w.flightSize)
	g.mu.plans = map[schedKey]planned{}
	g.spans = spansHosts(w.ep, ranks)
	g.topo = sync.OnceValue(func() algo.Topology { return topologyOf(w.ep, ranks) })
	g.host = samehost.New(samehost.Config{ID: id, Ranks: ranks, Rank: g.rank, Yield: w.yield, Group: (*hostGroup)(g)})
	w.register(g)
	return g
}

// Rank returns this process's rank in the group.
func (g *Group) Rank() int { return g.rank }

// Size returns the number of members.
func (g *Group) Size() int { return len(g.ranks) }

// Ranks returns the members' global ranks, ascending.
func (g *Group) Ranks() []int { return slices.Clone(g.ranks) }

// GlobalRank returns the global rank of group rank r.
func (g *Group) GlobalRank(r int) int { return g.ranks[r] }

// Backend names the transport ("tcp" or "inproc").
func (g *Group) Backend() string { return g.world.backend }

// JobID returns the job id this rank presented in every handshake: a
// store client of the job's own (a tool, a side channel) must present the
// same (store.DialOptions.JobID). It is "" for a group over an endpoint
// built elsewhere (FromEndpoint).
func (g *Group) JobID() string { return g.world.jobID }

// Endpoint returns the job's transport endpoint, which every group of the
// job shares: for a layer that sends messages of its own beside the
// collectives (package rpc).
func (g *Group) Endpoint() *transport.Endpoint { return g.world.ep }

// WorldRank is the rank of this process in the whole job.
func (g *Group) WorldRank() int { return g.world.rank }

// WorldSize is the number of processes in the whole job.
func (g *Group) WorldSize() int { return g.world.size }

// Failed returns a channel that is closed when the group fails (or is
// destroyed); Err then says why. A layer that waits on a subgroup's call
// can watch its parent with it: a member of the parent that dies fails
// the parent at once, but not a subgroup it is not in.
func (g *Group) Failed() <-chan struct{} { return g.ctx.Done() }

// Err returns the error that failed the group, or nil.
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.st.err
}

func (g *Group) groupRank(global int) int { return slices.Index(g.ranks, global) }

// decide runs one step of the state machine under the lock and carries
// out what it decided.
func (g *Group) decide(step func(s *callState, now time.Time) output) {
	now := time.Now()
	g.mu.Lock()
	out := step(g.mu.st, now)
	g.armLocked(out.Arm, now)
	g.mu.Unlock()
	g.carry(out)
}

// armLocked arms the timer for at (when not zero).
func (g *Group) armLocked(at, now time.Time) {
	if at.IsZero() {
		return
	}
	d := at.Sub(now)
	if g.mu.timer == nil {
		g.mu.timer = time.AfterFunc(d, g.onTimer)
	} else {
		g.mu.timer.Reset(d)
	}
}

func (g *Group) onTimer() {
	g.decide(func(s *callState, now time.Time) output { return s.tick(now) })
}

// carry does what the state machine decided, other than arming the timer:
// fail the calls in flight, tell the other members, probe.
func (g *Group) carry(out output) {
	if te := out.Timeout; te != nil {
		// Which rank the waits lead to, before anyone sees the error.
		g.world.explainTimeout(te)
		g.decide(func(s *callState, _ time.Time) output { return s.timedOut(te) })
	}
	if out.Fail != nil {
		g.world.dumpOnFailure(out.Fail)
		g.cancel(out.Fail)
	}
	if out.Tell != nil {
		g.tell(out.Tell)
	}
	if len(out.Probes) > 0 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			for _, p := range out.Probes {
				m := control{Kind: ctlProbe, Seq: p.Seq, Got: p.FP}
				_ = g.world.ep.Control(ctx, p.To, transport.Key{Group: g.id}, m.encode())
			}
		}()
	}
}

// tell sends m to the members tellTargets names, from a goroutine of its
// own (the caller may be the transport's reader); flushAbort waits for it.
// They pass it on (proto.go), and a member connected later hears it then
// (tellLate).
func (g *Group) tell(m *control) {
	done := make(chan struct{})
	msg := m.encode()
	g.mu.Lock()
	g.mu.told, g.mu.toldMsg = done, msg
	g.mu.Unlock()
	targets := tellTargets(g.rank, len(g.ranks))
	for i, r := range targets {
		targets[i] = g.ranks[r]
	}
	go g.send(msg, targets, done)
}

// send sends the control message msg to the global ranks to, within 2 s
// in all, and then closes done (when not nil).
func (g *Group) send(msg []byte, to []int, done chan struct{}) {
	if done != nil {
		defer close(done)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, r := range to {
		_ = g.world.ep.Control(ctx, r, transport.Key{Group: g.id}, msg)
	}
}

// tellLate tells global rank r, connected to just now, why the group
// failed, if it has and r is a member.
func (g *Group) tellLate(r int) {
	g.mu.Lock()
	msg := g.mu.toldMsg
	member := g.mu.st.isMember(r)
	g.mu.Unlock()
	if msg == nil || !member {
		return
	}
	go g.send(msg, []int{r}, nil)
}

// flushAbort waits (at most a second) until the peers have been told why
// the group failed, so that a process exiting on the error does not beat
// the news.
func (g *Group) flushAbort() {
	g.mu.Lock()
	ch := g.mu.told
	g.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-time.After(time.Second):
		}
	}
}

// Abort fails the group with err, unless it has failed already, and tells
// the other members, whose calls then return an *AbortError carrying err's
// text (PyTorch's ProcessGroup abort). A strategy that learns of a failure
// elsewhere (a rank of another group of the job died) uses it so that its
// peers in this group hear the root cause at once, not a timeout or this
// rank's departure.
func (g *Group) Abort(err error) {
	if err == nil {
		err = errors.New("aborted")
	}
	g.decide(func(s *callState, _ time.Time) output {
		return s.fail(err, &control{Kind: ctlAbort, From: s.me, Text: err.Error()})
	})
}

// fail fails the group with err unless it has failed already.
func (g *Group) fail(err error) {
	g.decide(func(s *callState, _ time.Time) output { return s.fail(err, nil) })
}

// ticket is a call begun: its handle in the state machine, its number
// (a collective's sequence number, or a message's number in its stream)
// and what it is.
type ticket struct {
	id  callID
	seq uint64
	c   call
}

// beginCollective numbers collective c, or refuses it when the group has
// failed.
func (g *Group) beginCollective(c call) (ticket, error) {
	now := time.Now()
	g.mu.Lock()
	id, seq, out, err := g.mu.st.beginCollective(c, now)
	g.armLocked(out.Arm, now)
	if c.via == byBlock && err == nil {
		// Numbered in the order of the calls' sequence numbers.
		g.host.Block().Issue(seq)
	}
	g.mu.Unlock()
	g.carry(out)
	return ticket{id, seq, c}, err
}

// end takes call t out of flight.
func (g *Group) end(t ticket) {
	now := time.Now()
	g.mu.Lock()
	g.mu.st.endAt(t.id, now, nil)
	g.mu.Unlock()
}

// run executes one collective: it numbers it, bounds it by the group
// timeout and by the group's failure, and turns transport errors into
// dist errors (failing the group when the call cannot have completed
// everywhere).
func (g *Group) run(ctx context.Context, c call, fn func(ctx context.Context, seq uint64) error) error {
	t, err := g.beginCollective(c)
	if err != nil {
		return err
	}
	return g.runCall(ctx, t, fn)
}

// runCall runs begun call t.
func (g *Group) runCall(ctx context.Context, t ticket, fn func(ctx context.Context, seq uint64) error) error {
	g.mu.Lock()
	g.mu.running++
	g.mu.Unlock()
	defer g.doneRunning()
	// The call ends at the earliest of: the caller's cancellation or
	// deadline, the group timeout, and the group's failure.
	var opctx context.Context
	if ctx.Done() == nil {
		// A caller that never cancels (async calls, most loops): derive
		// straight from the group's context, one context and one timer.
		opctx = g.ctx
	} else {
		c, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(g.ctx, func() { cancel(context.Cause(g.ctx)) })
		defer stop()
		opctx = c
	}
	if t.c.bulk() {
		// A hold of the pollers begun in it ends soon after it
		// (cpuyield.BulkBegan).
		cpuyield.BulkBegan()
		defer func() { cpuyield.BulkEnded(time.Now()) }()
	}
	err := fn(opctx, t.seq)
	if err == nil {
		g.end(t)
		return nil
	}
	return g.callError(ctx, t, err)
}

// doneRunning counts the end of a call that runCall ran.
func (g *Group) doneRunning() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.running--
	if g.mu.running == 0 && g.mu.idle != nil {
		close(g.mu.idle)
		g.mu.idle = nil
	}
}

// waitIdle waits at most d until no call runs on g (of a failed group,
// they end promptly), and reports whether none does.
func (g *Group) waitIdle(d time.Duration) bool {
	g.mu.Lock()
	if g.mu.running == 0 {
		g.mu.Unlock()
		return true
	}
	if g.mu.idle == nil {
		g.mu.idle = make(chan struct{})
	}
	ch := g.mu.idle
	g.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// callError explains call t's failure err (ctx is the caller's), ends
// the call, and carries out what the state machine decided.
func (g *Group) callError(ctx context.Context, t ticket, err error) error {
	g.mu.Lock()
	if g.mu.st.timingOut != nil && g.mu.st.err == nil && errors.Is(err, transport.ErrPeerClosed) {
		// A timeout is being explained (timedOut comes next); a peer
		// that closed meanwhile most likely gave up on the same wait.
		// Report the timeout, which says where the waits lead, rather
		// than that departure.
		g.mu.Unlock()
		select {
		case <-g.ctx.Done():
		case <-time.After(2 * time.Second):
		}
		g.mu.Lock()
	}
	now := time.Now()
	var out output
	if g.mu.st.err == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		cause := ctx.Err()
		if cause == nil {
			cause = err
		}
		var dl time.Time
		if d, ok := ctx.Deadline(); ok && ctx.Err() != nil {
			dl = d
		}
		err, out = g.mu.st.callCancelled(t.id, cause, dl, now)
	} else {
		err, out = g.mu.st.callFailed(t.id, err)
	}
	g.mu.st.endAt(t.id, now, err)
	g.armLocked(out.Arm, now)
	g.mu.Unlock()
	g.carry(out)
	var te *TimeoutError
	if !errors.As(err, &te) {
		g.flushAbort()
	}
	return err
}

// await waits for a posted receive of collective seq from global rank
// peer; the state machine probes the peer if the wait grows long.
func (g *Group) await(ctx context.Context, r *transport.Receive, peer int, seq uint64) error {
	if r.Done() {
		_, err := r.Wait(ctx)
		return err
	}
	now := time.Now()
	g.mu.Lock()
	id := g.mu.st.byseq[seq]
	out := g.mu.st.wait(id, peer, now)
	g.armLocked(out.Arm, now)
	g.mu.Unlock()
	_, err := r.Wait(ctx)
	if err == nil {
		g.mu.Lock()
		g.mu.st.received(id)
		g.mu.Unlock()
	}
	return err
}
