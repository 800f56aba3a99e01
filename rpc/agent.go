package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
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

// call is an outgoing call waiting for its reply.
type call struct {
	dst      int
	fn       string
	deadline time.Time // zero: none
	// complete receives the reply's body (nil on failure) or the error,
	// exactly once.
	complete func(body []byte, err error)
	// unsent, when set, runs when the request is known never to have
	// left (the RRefs forked into it are unforked).
	unsent func()
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

// sweep fails calls past their deadline.
func (a *Agent) sweep() {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-a.stopSweep:
			return
		case now := <-t.C:
			a.mu.Lock()
			var late []*call
			for id, c := range a.mu.pending {
				if !c.deadline.IsZero() && now.After(c.deadline) {
					late = append(late, c)
					delete(a.mu.pending, id)
				}
			}
			a.mu.Unlock()
			for _, c := range late {
				c.complete(nil, fmt.Errorf("no reply within the call's timeout: %w", context.DeadlineExceeded))
			}
		}
	}
}

// send sends one request to dst and registers c to hear its reply.
func (a *Agent) send(ctx context.Context, dst int, h *head, argFP uint64, body [][]byte, c *call) {
	if deadline, ok := ctx.Deadline(); ok {
		c.deadline = deadline
	} else if a.timeout > 0 {
		c.deadline = time.Now().Add(a.timeout)
	}
	if !c.deadline.IsZero() {
		h.timeout = time.Until(c.deadline)
	}
	hb := h.encode()
	size := int64(len(hb))
	for _, p := range body {
		size += int64(len(p))
	}
	unsent := func(err error) {
		if c.unsent != nil {
			c.unsent()
		}
		c.complete(nil, err)
	}
	if dst >= 0 && dst < len(a.limits) && size > a.limits[dst] {
		unsent(fmt.Errorf("%w: a request of %d bytes, %s accepts at most %d (its Options.MaxMessage)", ErrTooLarge, size, a.name(dst), a.limits[dst]))
		return
	}
	id := a.nextID.Add(1)
	a.mu.Lock()
	if a.mu.closed {
		a.mu.Unlock()
		unsent(ErrShutdown)
		return
	}
	if err := a.mu.down[dst]; err != nil {
		a.mu.Unlock()
		c.complete(nil, err) // the RRef table forgot the dead worker already
		return
	}
	a.mu.pending[id] = c
	a.mu.Unlock()
	a.sent.Add(1)
	var err error
	if dst == a.self.ID {
		err = a.loopback(dst, key(tagRequest, id), argFP, hb, body)
	} else {
		// ctx only ends a send blocked on a full socket; the call's
		// deadline is the sweeper's, and a dead peer fails the send.
		err = a.ep.SendMessage(ctx, dst, key(tagRequest, id), argFP, append([][]byte{hb}, body...)...)
	}
	if err != nil {
		a.sent.Add(-1)
		if a.take(id) != nil {
			var perr *transport.PeerError
			if errors.As(err, &perr) || a.downErr(dst) != nil {
				// Cut short or never sent to a peer now down: the RRef
				// table hears of it from PeerDown.
				if werr := a.downErr(dst); werr != nil {
					err = werr
				}
				c.complete(nil, err)
				return
			}
			unsent(err) // the context ended before any byte left
		}
	}
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

// take removes and returns the pending call id, or nil when it is no
// longer pending (answered, failed or timed out).
func (a *Agent) take(id uint64) *call {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.mu.pending[id]
	delete(a.mu.pending, id)
	return c
}

func (a *Agent) onReply(src int, id uint64, msg []byte, size int64) {
	c := a.take(id)
	if c == nil {
		return // timed out or failed already
	}
	if c.dst != src {
		a.log.Warn("rpc: reply from the wrong worker dropped", "from", src, "call", id)
		a.mu.Lock()
		a.mu.pending[id] = c
		a.mu.Unlock()
		return
	}
	if int64(len(msg)) < size {
		c.complete(nil, fmt.Errorf("%w: a reply of %d bytes, this worker accepts at most %d (Options.MaxMessage)", ErrTooLarge, size, a.limit))
		return
	}
	if len(msg) < 8 {
		c.complete(nil, fmt.Errorf("%w: reply of %d bytes", ErrMalformed, len(msg)))
		return
	}
	body := msg[8:]
	if msg[0] == replyError {
		var we wireError
		d, err := wire.NewDecoder(body, nil)
		if err == nil {
			err = d.Decode(&we)
		}
		if err != nil {
			c.complete(nil, fmt.Errorf("%w: error reply: %v", ErrMalformed, err))
			return
		}
		c.complete(nil, we.err())
		return
	}
	c.complete(body, nil)
}

// serve runs one request on its own goroutine.
func (a *Agent) serve(src int, id uint64, fp uint64, msg []byte, size int64) {
	<-a.ready
	if !a.isReady.Load() {
		a.serving.Add(-1)
		return // Init failed
	}
	replied := false
	x := &Exchange{Agent: a, Peer: src}
	reply := func(res any, resFP uint64, err error) {
		if replied {
			return
		}
		replied = true
		a.reply(src, id, resFP, res, err, x)
		a.serving.Add(-1)
	}
	h, body, err := decodeHead(msg)
	if err != nil {
		reply(nil, 0, &wireError{Kind: errBadArgs, Worker: a.self.Name, Message: err.Error()})
		return
	}
	if int64(len(msg)) < size {
		reply(nil, 0, &wireError{Kind: errTooLarge, Worker: a.self.Name, Function: h.name,
			Message: fmt.Sprintf("a request for %s of %d bytes, %s accepts at most %d (its Options.MaxMessage); nothing ran", h.name, size, a.self.Name, a.limit)})
		return
	}
	if h.op == opToHere {
		a.rrefs.serveOwnerOp(src, &h, reply)
		return
	}
	if h.op == opRRefPing {
		reply(nil, 0, nil)
		return
	}
	fn, verr := a.check(fp, &h)
	isRemote := h.op == opRemote || h.op == opMRemote
	if verr != nil && !isRemote {
		reply(nil, 0, verr)
		return
	}
	var d *wire.Decoder
	if verr == nil {
		if d, err = wire.NewDecoder(body, &decodeCtx{agent: a, src: src, x: x}); err != nil {
			verr = &wireError{Kind: errBadArgs, Worker: a.self.Name, Function: h.name, Message: err.Error()}
			if !isRemote {
				reply(nil, 0, verr)
				return
			}
		}
	}
	ctx := context.WithValue(a.serveCtx, exchangeKey{}, x)
	var cancel context.CancelFunc = func() {}
	if h.timeout > 0 && !isRemote {
		dc := withLazyDeadline(ctx, h.timeout)
		ctx, cancel = dc, dc.stop
	}
	x.Context = ctx
	// run calls the function (on the target's value for a method) and
	// hands its result, with errors put in their wire form, to done.
	run := func(done func(any, error)) {
		finish := func(res any, err error) {
			cancel()
			done(res, a.wireErr(ctx, h.name, err))
		}
		if h.op == opMethod || h.op == opMRemote {
			a.rrefs.withValue(fromID(h.target), func(v any, err error) {
				if err != nil {
					finish(nil, err)
					return
				}
				a.invoke(ctx, fn, v, d, finish)
			})
			return
		}
		a.invoke(ctx, fn, nil, d, finish)
	}
	if isRemote {
		var resFP uint64
		if fn != nil {
			resFP = fn.resFP
		}
		var verrErr error
		if verr != nil {
			verrErr = verr
		}
		a.rrefs.serveRemote(src, &h, resFP, verrErr, run, reply)
		return
	}
	run(func(res any, err error) { reply(res, fn.resFP, err) })
}

// check finds the function a request names and checks that the caller
// agrees on its types and kind.
func (a *Agent) check(fp uint64, h *head) (*handler, *wireError) {
	fn := a.reg.lookup(h.name)
	if fn == nil {
		return nil, &wireError{Kind: errUnknown, Worker: a.self.Name, Function: h.name,
			Message: fmt.Sprintf("%s has no function %q registered; nothing ran (register it on every worker that serves it, before Init)", a.self.Name, h.name)}
	}
	if fp != fn.argFP || h.resultFP != fn.resFP {
		return nil, &wireError{Kind: errMismatch, Worker: a.self.Name, Function: h.name,
			Message: fmt.Sprintf("%s on %s takes arguments of fingerprint %#x and returns %#x; the caller sent %#x and expects %#x (are both built from the same types?)", h.name, a.self.Name, fn.argFP, fn.resFP, fp, h.resultFP)}
	}
	isMethod := h.op == opMethod || h.op == opMRemote
	if (fn.recv != nil) != isMethod {
		return nil, &wireError{Kind: errMismatch, Worker: a.self.Name, Function: h.name,
			Message: fmt.Sprintf("%s on %s is a %s, called as a %s", h.name, a.self.Name, kindOf(fn.recv != nil), kindOf(isMethod))}
	}
	return fn, nil
}

// wireErr turns a function's error into its wire form.
func (a *Agent) wireErr(ctx context.Context, fn string, err error) error {
	if err == nil {
		return nil
	}
	var de decodeErr
	if errors.As(err, &de) {
		switch {
		case errors.Is(de.err, ErrTypeMismatch):
			return &wireError{Kind: errMismatch, Worker: a.self.Name, Function: fn, Message: de.Error()}
		case isRefusal(de.err):
			return &wireError{Kind: errRefused, Worker: a.self.Name, Function: fn, Message: a.self.Name + " would not take the arguments: " + de.Error()}
		}
		return &wireError{Kind: errBadArgs, Worker: a.self.Name, Function: fn, Message: de.Error()}
	}
	if _, ok := err.(*wireError); ok {
		return err
	}
	kind := uint8(errRemote)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		kind = errDeadline
	}
	return &wireError{Kind: kind, Worker: a.self.Name, Function: fn, Message: err.Error()}
}

// invoke runs a registered function, turning a panic into an error.
func (a *Agent) invoke(ctx context.Context, fn *handler, self any, d *wire.Decoder, done func(any, error)) {
	once := sync.Once{}
	finish := func(res any, err error) { once.Do(func() { done(res, err) }) }
	defer func() {
		if p := recover(); p != nil {
			a.log.Error("rpc: handler panicked", "function", fn.name, "panic", p)
			finish(nil, &wireError{Kind: errPanic, Worker: a.self.Name, Function: fn.name,
				Message: fmt.Sprintf("%v\n%s", p, debug.Stack())})
		}
	}()
	fn.run(ctx, self, d, finish)
}

func kindOf(method bool) string {
	if method {
		return "method of an RRef's value"
	}
	return "function"
}

// reply sends a request's result (or error) back to src.
// x is the call's exchange (nil for replies that are not a function's).
func (a *Agent) reply(src int, id uint64, resFP uint64, res any, err error, x *Exchange) {
	var e wire.Encoder
	status := byte(replyOK)
	if err == nil && res != nil {
		e.Ctx = &encodeCtx{agent: a, dst: src, x: x}
		if encErr := e.Encode(res); encErr != nil {
			err = &wireError{Kind: errRemote, Worker: a.self.Name, Message: "encoding the result: " + encErr.Error()}
			e = wire.Encoder{}
		}
	}
	if err != nil {
		status = replyError
		we, ok := err.(*wireError)
		if !ok {
			we = &wireError{Kind: errRemote, Worker: a.self.Name, Message: err.Error()}
		}
		e = wire.Encoder{}
		e.Encode(*we)
	} else if res == nil {
		e.Reset()
	}
	parts := e.Parts()
	var n int64 = 8
	for _, p := range parts {
		n += int64(len(p))
	}
	if src >= 0 && src < len(a.limits) && n > a.limits[src] && status == replyOK {
		e = wire.Encoder{}
		e.Encode(wireError{Kind: errTooLarge, Worker: a.self.Name,
			Message: fmt.Sprintf("the reply of %d bytes is larger than %s accepts (%d, its Options.MaxMessage)", n, a.name(src), a.limits[src])})
		status = replyError
		parts = e.Parts()
	}
	hdr := []byte{status, 0, 0, 0, 0, 0, 0, 0}
	a.sent.Add(1)
	k := key(tagReply, id)
	if src == a.self.ID {
		a.loopback(src, k, resFP, hdr, parts)
		return
	}
	if err := a.ep.SendMessage(a.serveCtx, src, k, resFP, append([][]byte{hdr}, parts...)...); err != nil {
		a.sent.Add(-1)
		a.log.Warn("rpc: reply not sent", "to", src, "call", id, "err", err)
	}
}

func (a *Agent) replyTimeout() time.Duration {
	if a.timeout > 0 {
		return a.timeout
	}
	return DefaultTimeout
}

// Error implements error for the agent's own wire errors so that they
// pass through done unchanged.
func (w *wireError) Error() string { return w.Message }

// pendingCalls lists the calls in flight, for error messages.
func (a *Agent) pendingCalls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, c := range a.mu.pending {
		out = append(out, fmt.Sprintf("%s on %s", c.fn, a.name(c.dst)))
	}
	sort.Strings(out)
	return out
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

// messageHeadLimit is how much of a message a shut-down agent reads: a
// request's head, to answer it.
const messageHeadLimit = headSize + maxName

// onMessageClosed answers requests after shutdown, and graceful
// shutdown's probes with an abort: a worker still waiting on this one
// learns at once that it left.
func (a *Agent) onMessageClosed(src int, k transport.Key, fp uint64, msg []byte, size int64) {
	if k.Group != rpcGroup || src == a.self.ID {
		return
	}
	if k.Tag == tagShutdown {
		a.answerProbeClosed(src, msg)
		return
	}
	if k.Tag != tagRequest {
		return
	}
	h, _, _ := decodeHead(msg)
	var e wire.Encoder
	e.Encode(wireError{Kind: errShutdown, Worker: a.self.Name, Function: h.name, Message: a.self.Name + " has shut its RPC agent down"})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		a.ep.SendMessage(ctx, src, key(tagReply, k.Seq), 0, append([][]byte{{replyError, 0, 0, 0, 0, 0, 0, 0}}, e.Parts()...)...)
	}()
}

// answerProbeClosed answers a probe that reached this agent after it
// stopped.
func (a *Agent) answerProbeClosed(src int, msg []byte) {
	var m shutdownMsg
	d, err := wire.NewDecoder(msg, nil)
	if err == nil {
		err = d.Decode(&m)
	}
	if err != nil || m.Kind != shutProbe {
		return
	}
	me := int64(a.self.ID)
	ab := shutdownMsg{Kind: shutAbort, Culprit: me, Finder: me, Cause: causeDown,
		Reason: "stopped its RPC agent without agreeing with the others (Shutdown(ctx, false), or its graceful Shutdown failed)", Detail: "its agent stopped"}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		a.sendShutdown(ctx, src, ab)
	}()
}

// request is one request to serve.
type request struct {
	src  int
	id   uint64
	fp   uint64
	msg  []byte
	size int64
}

// maxIdleServers bounds the goroutines kept waiting for requests.
const maxIdleServers = 256

// dispatch serves r on an idle server goroutine, or a new one (a handler
// may block, so there is no fixed pool: a request never waits for one).
func (a *Agent) dispatch(r request) {
	select {
	case a.idle <- r:
	default:
		go a.server(r)
	}
}

// server serves r, then waits a while for more requests before it ends.
func (a *Agent) server(r request) {
	var t *time.Timer // one per server: a timer per request was a tenth of a small call
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		a.serve(r.src, r.id, r.fp, r.msg, r.size)
		r = request{}
		if a.idleServers.Add(1) > maxIdleServers {
			a.idleServers.Add(-1)
			return
		}
		if t == nil {
			t = time.NewTimer(serverIdle)
		} else {
			t.Reset(serverIdle) // Go 1.23 timers: no stale tick to drain
		}
		select {
		case r = <-a.idle:
			a.idleServers.Add(-1)
		case <-t.C:
			a.idleServers.Add(-1)
			return
		case <-a.serveCtx.Done():
			a.idleServers.Add(-1)
			return
		}
	}
}

// serverIdle is how long an idle server goroutine waits for a request.
const serverIdle = time.Second
