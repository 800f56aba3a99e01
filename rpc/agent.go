package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/rpc/internal/wire"
	"github.com/godist/godist/transport"
)

// DefaultTimeout bounds a call whose context has no deadline (PyTorch's
// default rpc_timeout is 60 s too).
const DefaultTimeout = 60 * time.Second

// DefaultMaxMessage is the largest request or reply an agent accepts by
// default.
const DefaultMaxMessage = 1 << 30

// Options configure Init.
type Options struct {
	// Group is the job's default process group, whose authenticated
	// transport the agent shares (its messages are a frame kind of their
	// own), so that a job uses collectives and RPC side by side. When nil,
	// Init joins the job itself with dist.Init(Dist) and Shutdown leaves
	// it.
	Group *dist.Group
	// Dist configures the join when Group is nil (the zero value reads
	// everything from the environment, as under godist run).
	Dist dist.Options
	// Timeout bounds each call whose context has no deadline, and how
	// long a graceful Shutdown waits on a worker that answers nothing
	// (DefaultTimeout when zero; negative: unbounded).
	Timeout time.Duration
	// MaxMessage is the largest request or reply this worker accepts
	// (DefaultMaxMessage when zero). A larger request is refused before
	// any of it is decoded, and callers learn the limit at Init so that
	// they refuse to send one.
	MaxMessage int64
	// Functions are the functions this worker serves, registered before
	// Init so that no call can arrive before them. Functions can also be
	// registered on the Agent afterwards.
	Functions *Registry
	// Logger hears what the agent drops or recovers from; nil discards.
	Logger *slog.Logger
}

// WorkerInfo names a worker of the job.
type WorkerInfo struct {
	Name string
	ID   int // its rank
}

// Agent is one worker's end of the RPC framework: it serves the
// registered functions and sends this worker's calls. It is safe for
// concurrent use.
type Agent struct {
	self    WorkerInfo
	workers []WorkerInfo
	byName  map[string]int
	limits  []int64 // each peer's MaxMessage
	ep      *transport.Endpoint
	group   *dist.Group
	ownG    bool
	reg     *Registry
	timeout time.Duration
	limit   int64
	log     *slog.Logger

	nextID atomic.Uint64
	// ready is closed when Init has learned every worker (requests that
	// arrive earlier wait for it); isReady says the same without waiting.
	ready     chan struct{}
	isReady   atomic.Bool
	serveCtx  context.Context
	stopServe context.CancelFunc
	stopWatch func()
	stopSweep chan struct{}
	// sent and recv count the requests, replies and RRef messages this
	// agent sent and received, for graceful shutdown's agreement.
	sent, recv atomic.Int64
	serving    atomic.Int64 // requests being served
	// heard is when each worker last sent a message of graceful
	// shutdown's agreement (Unix ns), so that a worker waiting on it
	// learns that it is still there.
	heard []atomic.Int64

	rrefs *rrefs
	// idle hands requests to served goroutines that wait for more work:
	// a goroutine whose stack has grown to a handler's depth is reused
	// instead of growing a new one for every request.
	idle        chan request
	idleServers atomic.Int32

	mu struct {
		sync.Mutex
		pending  map[uint64]*call
		down     map[int]error // peers gone, and why
		closed   bool
		hellos   []*hello
		helloIn  chan struct{} // closed when every hello is in
		shutdown *shutdownState
		stopping bool // Shutdown was called
	}
}

// Init starts this worker's agent and waits until every worker of the
// job has started its own (PyTorch's init_rpc). name "" is
// "worker<rank>". Every worker must register the functions others call
// before Init returns on any of them (register them in
// Options.Functions).
func Init(ctx context.Context, name string, opt Options) (*Agent, error) {
	g := opt.Group
	own := false
	if g == nil {
		var err error
		if g, err = dist.Init(ctx, opt.Dist); err != nil {
			return nil, fmt.Errorf("rpc: %w", err)
		}
		own = true
	}
	rank := g.WorldRank()
	if name == "" {
		name = fmt.Sprintf("worker%d", rank)
	}
	if opt.Timeout == 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.MaxMessage <= 0 {
		opt.MaxMessage = DefaultMaxMessage
	}
	if opt.Functions == nil {
		opt.Functions = NewRegistry()
	}
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	size := g.WorldSize()
	a := &Agent{
		self: WorkerInfo{Name: name, ID: rank}, ep: g.Endpoint(), group: g, ownG: own,
		reg: opt.Functions, timeout: opt.Timeout, limit: opt.MaxMessage, log: log,
		stopSweep: make(chan struct{}), ready: make(chan struct{}), idle: make(chan request),
		heard: make([]atomic.Int64, size),
	}
	a.serveCtx, a.stopServe = context.WithCancel(context.WithValue(context.Background(), agentKey{}, a))
	a.mu.pending = map[uint64]*call{}
	a.mu.down = map[int]error{}
	a.mu.hellos = make([]*hello, size)
	a.mu.hellos[rank] = &hello{Version: protoVersion, Name: name, MaxMessage: opt.MaxMessage}
	a.mu.helloIn = make(chan struct{})
	if size == 1 {
		close(a.mu.helloIn)
	}
	a.rrefs = newRRefs(a)
	a.stopWatch = a.ep.WatchPeers(a.onPeerDown)
	a.ep.SetMessageHandler(opt.MaxMessage, a.onMessage)

	fail := func(err error) (*Agent, error) {
		a.mu.Lock()
		a.mu.closed = true
		a.mu.Unlock()
		close(a.ready) // waiting requests are answered: shut down
		a.detach()
		if own {
			g.Destroy()
		}
		return nil, err
	}
	var e wire.Encoder
	if err := e.Encode(hello{Version: protoVersion, Name: name, MaxMessage: opt.MaxMessage}); err != nil {
		return fail(err)
	}
	parts := e.Parts()
	for r := range size {
		if r == rank {
			continue
		}
		if err := a.ep.SendMessage(ctx, r, key(tagHello, 0), 0, parts...); err != nil {
			return fail(fmt.Errorf("rpc: worker %s cannot reach rank %d: %w", name, r, err))
		}
	}
	select {
	case <-a.mu.helloIn:
	case <-ctx.Done():
		a.mu.Lock()
		var missing []int
		for r, h := range a.mu.hellos {
			if h == nil {
				missing = append(missing, r)
			}
		}
		a.mu.Unlock()
		return fail(fmt.Errorf("rpc: worker %s: ranks %v did not start their RPC agents: %w", name, missing, ctx.Err()))
	}
	a.mu.Lock()
	hellos := a.mu.hellos
	a.mu.Unlock()
	a.workers = make([]WorkerInfo, size)
	a.byName = make(map[string]int, size)
	a.limits = make([]int64, size)
	for r, h := range hellos {
		if h.Version != protoVersion {
			return fail(fmt.Errorf("rpc: rank %d speaks RPC protocol %d, this worker %d: run the same godist version on every worker", r, h.Version, protoVersion))
		}
		if prev, dup := a.byName[h.Name]; dup {
			return fail(fmt.Errorf("rpc: ranks %d and %d are both named %q: worker names must be unique", prev, r, h.Name))
		}
		a.workers[r] = WorkerInfo{Name: h.Name, ID: r}
		a.byName[h.Name] = r
		a.limits[r] = h.MaxMessage
	}
	a.isReady.Store(true)
	close(a.ready)
	go a.sweep()
	return a, nil
}

type agentKey struct{}

// AgentFrom returns the agent serving the call whose context ctx is (a
// registered function's): how a handler calls other workers, or learns
// who it is (PyTorch's rpc.get_worker_info()), without a global. It is
// usable even while this worker's Init has not yet returned.
func AgentFrom(ctx context.Context) (*Agent, bool) {
	a, ok := ctx.Value(agentKey{}).(*Agent)
	return a, ok
}

// Self returns this worker's name and rank.
func (a *Agent) Self() WorkerInfo { return a.self }

// Workers returns every worker of the job, by rank.
func (a *Agent) Workers() []WorkerInfo { return append([]WorkerInfo(nil), a.workers...) }

// Worker returns the worker of that name.
func (a *Agent) Worker(name string) (WorkerInfo, bool) {
	r, ok := a.byName[name]
	if !ok {
		return WorkerInfo{}, false
	}
	return a.workers[r], true
}

// WorkerByRank returns the worker of that rank.
func (a *Agent) WorkerByRank(rank int) (WorkerInfo, bool) {
	if rank < 0 || rank >= len(a.workers) {
		return WorkerInfo{}, false
	}
	return a.workers[rank], true
}

// Group returns the process group the agent shares its transport with.
func (a *Agent) Group() *dist.Group { return a.group }

func (a *Agent) registry() *Registry { return a.reg }

func (a *Agent) name(rank int) string {
	if a.isReady.Load() && rank >= 0 && rank < len(a.workers) && a.workers[rank].Name != "" {
		return a.workers[rank].Name
	}
	return fmt.Sprintf("rank %d", rank)
}

// onMessage is the transport's message handler; it runs on a connection's
// reader and must not block.
func (a *Agent) onMessage(src int, k transport.Key, fp uint64, msg []byte, size int64) {
	if k.Group != rpcGroup {
		a.log.Warn("rpc: message of another layer dropped", "from", src, "group", k.Group)
		return
	}
	switch k.Tag {
	case tagHello:
		a.onHello(src, msg, size)
	case tagRequest:
		a.recv.Add(1)
		a.serving.Add(1)
		a.dispatch(request{src, k.Seq, fp, msg, size})
	case tagReply:
		a.recv.Add(1)
		a.onReply(src, k.Seq, msg, size)
	case tagRRef:
		a.recv.Add(1)
		a.rrefs.onMessage(src, msg)
	case tagShutdown:
		a.onShutdown(src, msg)
	default:
		a.log.Warn("rpc: message of unknown tag dropped", "from", src, "tag", k.Tag)
	}
}

func (a *Agent) onHello(src int, msg []byte, size int64) {
	var h hello
	d, err := wire.NewDecoder(msg, nil)
	if err == nil && int64(len(msg)) == size {
		err = d.Decode(&h)
	}
	if err != nil {
		a.log.Warn("rpc: bad hello", "from", src, "err", err)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if src < 0 || src >= len(a.mu.hellos) || a.mu.hellos[src] != nil {
		return
	}
	a.mu.hellos[src] = &h
	for _, x := range a.mu.hellos {
		if x == nil {
			return
		}
	}
	close(a.mu.helloIn)
}

// onPeerDown fails every call waiting on a worker that is gone.
func (a *Agent) onPeerDown(perr *transport.PeerError) {
	r := perr.Rank
	werr := &WorkerDownError{Worker: a.name(r), Rank: r, Err: perr}
	a.mu.Lock()
	a.mu.down[r] = werr
	var failed []*call
	for id, c := range a.mu.pending {
		if c.dst == r {
			failed = append(failed, c)
			delete(a.mu.pending, id)
		}
	}
	a.mu.Unlock()
	for _, c := range failed {
		c.complete(nil, werr)
	}
	a.rrefs.peerDown(r, werr)
	a.shutdownPeerDown(r, werr)
}

// loopback delivers a message to this agent itself, as the transport
// would (a worker may call itself).
func (a *Agent) loopback(src int, k transport.Key, fp uint64, first []byte, rest [][]byte) error {
	n := len(first)
	for _, p := range rest {
		n += len(p)
	}
	w := make([]uint64, (n+7)/8)
	buf := unsafeBytes(w, n)
	off := copy(buf, first)
	for _, p := range rest {
		off += copy(buf[off:], p)
	}
	a.onMessage(src, k, fp, buf, int64(n))
	return nil
}

func (a *Agent) downErr(r int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.down[r]
}

func (a *Agent) replyTimeout() time.Duration {
	if a.timeout > 0 {
		return a.timeout
	}
	return DefaultTimeout
}

// detach stops the agent's use of the endpoint. Requests that still come
// are answered with ErrShutdown.
func (a *Agent) detach() {
	a.ep.SetMessageHandler(messageHeadLimit, a.onMessageClosed)
	if a.stopWatch != nil {
		a.stopWatch()
	}
	a.stopServe()
	select {
	case <-a.stopSweep:
	default:
		close(a.stopSweep)
	}
}
