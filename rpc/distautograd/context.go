package distautograd

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/internal/wire"
	"github.com/godist/godist/tensor"
)

// ContextID names a distributed autograd context on every worker: the
// creator's rank in the top 16 bits, a counter below.
type ContextID int64

// Creator returns the rank of the worker that created the context.
func (id ContextID) Creator() int { return int(uint64(id) >> 48) }

func (id ContextID) String() string { return fmt.Sprintf("%d:%d", id.Creator(), uint64(id)&(1<<48-1)) }

// worker is one agent's distributed autograd state.
type worker struct {
	a       *rpc.Agent
	nextCtx atomic.Uint64
	nextMsg atomic.Uint64
	fns     funcs
	mu      struct {
		sync.Mutex
		ctxs map[ContextID]*dctx
	}
}

var workers sync.Map // *rpc.Agent → *worker

var regMu sync.Mutex

// workerOf returns a's state, registering this package's functions on a
// the first time: before a's worker sends or receives its first Var, so
// before any peer can call them.
func workerOf(a *rpc.Agent) (*worker, error) {
	if w, ok := workers.Load(a); ok {
		return w.(*worker), nil
	}
	regMu.Lock()
	defer regMu.Unlock()
	if w, ok := workers.Load(a); ok {
		return w.(*worker), nil
	}
	w := &worker{a: a}
	w.mu.ctxs = map[ContextID]*dctx{}
	if err := w.register(); err != nil {
		return nil, err
	}
	workers.Store(a, w)
	return w, nil
}

// dctx is one context on one worker.
type dctx struct {
	id ContextID
	w  *worker
	// ended is closed when the context is released here.
	ended chan struct{}
	// cancel stops the calls of this worker's pass.
	passCtx context.Context
	cancel  context.CancelFunc
	// peers are the workers this one exchanged Vars with in the context;
	// apart from mu, which a running pass holds.
	peers struct {
		sync.Mutex
		set map[int]bool
	}
	// grads are this worker's leaves' gradients in the context (it is
	// their autograd.GradStore); apart from mu, for the leaves' hooks run
	// while a pass goes on.
	grads struct {
		sync.Mutex
		m map[*autograd.Var]*tensor.Tensor
	}
	mu struct {
		sync.Mutex
		sends      map[uint64]autograd.Node
		recvs      map[autograd.Node]recvEdge
		pass       *pass         // the current pass (the last begun)
		passNo     int           // its number: 1 for the first
		retain     bool          // it keeps the graph for another
		inflight   int           // gradients sent, not yet acknowledged
		delivering int           // leaves' gradients taken from the pass, not yet in grads
		err        error         // the pass's failure
		passDone   chan struct{} // closed when the current pass is over here, or failed
		released   bool
		// leases are the other workers' watch calls, answered on release
		// (on the creator only).
		leases   []*rpc.Future[struct{}]
		leaseErr error
	}
}

func (w *worker) newDctx(id ContextID) *dctx {
	c := &dctx{id: id, w: w, ended: make(chan struct{})}
	c.passCtx, c.cancel = context.WithCancel(context.Background())
	c.mu.sends = map[uint64]autograd.Node{}
	c.mu.recvs = map[autograd.Node]recvEdge{}
	c.peers.set = map[int]bool{}
	c.grads.m = map[*autograd.Var]*tensor.Tensor{}
	c.mu.passDone = make(chan struct{})
	return c
}

// lookup returns the context id names here, or nil.
func (w *worker) lookup(id ContextID) *dctx {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.ctxs[id]
}

// join returns the context id names, creating it (and taking a lease
// from its creator) when it is new here.
func (w *worker) join(id ContextID) *dctx {
	w.mu.Lock()
	c, ok := w.mu.ctxs[id]
	if !ok {
		c = w.newDctx(id)
		w.mu.ctxs[id] = c
	}
	w.mu.Unlock()
	if !ok && id.Creator() != w.a.Self().ID {
		go w.lease(c)
	}
	return c
}

// lease holds a watch call open on the creator until it answers (the
// context was released there) or fails (the creator died); then the
// context ends here.
func (w *worker) lease(c *dctx) {
	creator, _ := w.a.WorkerByRank(c.id.Creator())
	for {
		ctx, cancel := context.WithTimeout(c.passCtx, 10*time.Minute)
		_, err := w.fns.watch.Call(ctx, w.a, creator.Name, int64(c.id))
		cancel()
		if err != nil && ctx.Err() == context.DeadlineExceeded && c.passCtx.Err() == nil {
			continue // renew
		}
		if err == nil {
			err = fmt.Errorf("distautograd: context %v was released by its creator %s", c.id, creator.Name)
		} else {
			err = fmt.Errorf("distautograd: context %v ended: its creator %s: %w", c.id, creator.Name, err)
		}
		w.release(c, err)
		return
	}
}

// release ends c here: a pass still running fails with err, and the
// context is forgotten. On the creator, the other workers' leases are
// answered, with err when it is not nil.
func (w *worker) release(c *dctx, err error) {
	w.mu.Lock()
	if w.mu.ctxs[c.id] == c {
		delete(w.mu.ctxs, c.id)
	}
	w.mu.Unlock()
	c.mu.Lock()
	if c.mu.released {
		c.mu.Unlock()
		return
	}
	c.mu.released = true
	if err == nil {
		err = fmt.Errorf("distautograd: context %v was released", c.id)
	}
	c.failLocked(err)
	leases := c.mu.leases
	c.mu.leases = nil
	c.mu.leaseErr = err
	if c.mu.pass != nil {
		c.mu.pass.free()
	}
	for _, n := range c.mu.sends {
		if !n.Freed() {
			n.Free()
		}
	}
	c.mu.sends, c.mu.recvs = nil, nil
	c.mu.Unlock()
	c.cancel()
	close(c.ended)
	for _, l := range leases {
		l.Set(struct{}{}, nil)
	}
}

// Var is an autograd Var that can travel in the arguments and results of
// RPCs, recording send and receive nodes in the current context (see the
// package doc). The zero Var (nil inner Var) cannot be sent.
type Var struct{ *autograd.Var }

// Wrap returns v ready to be sent.
func Wrap(v *autograd.Var) *Var { return &Var{v} }

var _ wire.Extension = (*Var)(nil)

type ctxKey struct{}

type ctxVal struct {
	a  *rpc.Agent
	id ContextID
}

// contextOf returns the context a call made with ctx records in: the one
// NewContext put there, or the one the arguments of the call a handler
// serves arrived in.
func contextOf(ctx context.Context) (ContextID, bool) {
	if ctx == nil {
		return 0, false
	}
	if v, ok := ctx.Value(ctxKey{}).(ctxVal); ok {
		return v.id, true
	}
	if x, ok := rpc.ExchangeFrom(ctx); ok {
		if id, ok := x.Value(ctxKey{}).(ContextID); ok {
			return id, true
		}
	}
	return 0, false
}

// CurrentContext returns the context calls made with ctx record in.
func CurrentContext(ctx context.Context) (ContextID, bool) { return contextOf(ctx) }

// EncodeWire writes the Var, recording a send node when it needs
// gradients and travels inside a context.
func (v *Var) EncodeWire(e *wire.Encoder) error {
	if v.Var == nil {
		return fmt.Errorf("distautograd: a Var with no autograd.Var inside")
	}
	x, ok := rpc.ExchangeOf(e.Ctx)
	if !ok {
		return fmt.Errorf("distautograd: a Var outside an RPC")
	}
	id, inCtx := contextOf(x.Context)
	if !inCtx {
		id, inCtx = x.Value(ctxKey{}).(ContextID)
	}
	if !v.RequiresGrad() || !autograd.GradEnabled() || !inCtx {
		if inCtx {
			// No gradient flows back through this Var, but the callee
			// joins the context, so that what it computes from its own
			// parameters (an embedding lookup of these indices) is
			// recorded in it.
			if err := joinPeer(x, id); err != nil {
				return err
			}
			e.Byte(2)
			e.Uvarint(uint64(id))
		} else {
			e.Byte(0)
		}
		if v.RequiresGrad() {
			e.Byte(1)
		} else {
			e.Byte(0)
		}
		return e.Encode(v.Value())
	}
	w, err := workerOf(x.Agent)
	if err != nil {
		return err
	}
	c := w.lookup(id)
	if c == nil {
		return fmt.Errorf("distautograd: sending a Var in context %v, which %s does not hold (released?)", id, x.Agent.Self().Name)
	}
	msg := w.nextMsg.Add(1)
	n := recordSend(v.Var)
	c.mu.Lock()
	if c.mu.released {
		c.mu.Unlock()
		return fmt.Errorf("distautograd: sending a Var in context %v, which was released", id)
	}
	c.mu.sends[msg] = n
	c.mu.Unlock()
	c.addPeer(x.Peer)
	x.SetValue(ctxKey{}, id)
	e.Byte(1)
	e.Uvarint(uint64(id))
	e.Uvarint(msg)
	return e.Encode(v.Value())
}

// joinPeer notes, on the sender of a Var in context id, that the call's
// peer takes part in the context.
func joinPeer(x *rpc.Exchange, id ContextID) error {
	w, err := workerOf(x.Agent)
	if err != nil {
		return err
	}
	c := w.lookup(id)
	if c == nil {
		return fmt.Errorf("distautograd: sending a Var in context %v, which %s does not hold (released?)", id, x.Agent.Self().Name)
	}
	c.addPeer(x.Peer)
	x.SetValue(ctxKey{}, id)
	return nil
}

// DecodeWire makes the received Var: in a context, one whose node is a
// receive node.
func (v *Var) DecodeWire(d *wire.Decoder) error {
	x, ok := rpc.ExchangeOf(d.Ctx)
	if !ok {
		return fmt.Errorf("distautograd: a Var outside an RPC")
	}
	flag, err := d.Byte()
	if err != nil {
		return err
	}
	switch flag {
	case 0, 2:
		if flag == 2 {
			// In a context, with no gradient to carry back: join it.
			id, err := d.Uvarint()
			if err != nil {
				return err
			}
			w, err := workerOf(x.Agent)
			if err != nil {
				return err
			}
			w.join(ContextID(id)).addPeer(x.Peer)
			x.SetValue(ctxKey{}, ContextID(id))
		}
		rg, err := d.Byte()
		if err != nil {
			return err
		}
		var t *tensor.Tensor
		if err := d.Decode(&t); err != nil {
			return err
		}
		if t == nil {
			return fmt.Errorf("%w: a Var without a tensor", wire.ErrMalformed)
		}
		if flag == 0 && rg == 1 && x.Context != nil {
			if id, in := CurrentContext(x.Context); in {
				// The other side computed it outside the context this
				// call was made in: its gradient would be lost silently.
				return &OutsideContextError{Worker: x.Peer, Context: id}
			}
		}
		v.Var = autograd.NewVar(t, rg == 1)
		return nil
	case 1:
	default:
		return fmt.Errorf("%w: Var flag %d", wire.ErrMalformed, flag)
	}
	id, err := d.Uvarint()
	if err != nil {
		return err
	}
	msg, err := d.Uvarint()
	if err != nil {
		return err
	}
	var t *tensor.Tensor
	if err := d.Decode(&t); err != nil {
		return err
	}
	if t == nil {
		return fmt.Errorf("%w: a Var without a tensor", wire.ErrMalformed)
	}
	w, err := workerOf(x.Agent)
	if err != nil {
		return err
	}
	c := w.join(ContextID(id))
	out := recordRecv(t)
	c.mu.Lock()
	if !c.mu.released {
		c.mu.recvs[out.GradFn()] = recvEdge{peer: x.Peer, msg: msg}
	}
	c.mu.Unlock()
	c.addPeer(x.Peer)
	x.SetValue(ctxKey{}, ContextID(id))
	v.Var = out
	return nil
}

// OutsideContextError refuses a Var that needs gradients but arrived,
// in the reply to a call made in a context, from outside it: its
// gradient could not flow back. It wraps rpc.ErrRefused.
type OutsideContextError struct {
	Worker  int       // the worker that sent the Var
	Context ContextID // the context the call was made in
}

func (e *OutsideContextError) Error() string {
	return fmt.Sprintf("distautograd: a Var that needs gradients came from worker %d outside context %v, so its gradient could not flow back: its handler computed it in another context or none (make the handler's calls with the ctx it is given, and link this package on every worker)", e.Worker, e.Context)
}

func (e *OutsideContextError) Unwrap() error { return rpc.ErrRefused }

// agentOf finds the agent of a call made with ctx.
func agentOf(ctx context.Context) (*rpc.Agent, error) {
	if v, ok := ctx.Value(ctxKey{}).(ctxVal); ok {
		return v.a, nil
	}
	if a, ok := rpc.AgentFrom(ctx); ok {
		return a, nil
	}
	return nil, fmt.Errorf("distautograd: no agent in the context (use the ctx NewContext returned, or a handler's)")
}

// NewContext starts a distributed autograd context on a's worker
// (PyTorch's `with dist_autograd.context() as id`). Calls made with the
// returned ctx record in it. End it with Release.
func NewContext(ctx context.Context, a *rpc.Agent) (context.Context, ContextID, error) {
	w, err := workerOf(a)
	if err != nil {
		return ctx, 0, err
	}
	id := ContextID(uint64(a.Self().ID)<<48 | w.nextCtx.Add(1))
	w.join(id)
	return context.WithValue(ctx, ctxKey{}, ctxVal{a, id}), id, nil
}

// Release ends the context on every worker (on the creator, where it must
// be called; elsewhere it only forgets the context here). It does not
// block on other workers.
func Release(ctx context.Context, id ContextID) error {
	a, err := agentOf(ctx)
	if err != nil {
		return err
	}
	w, err := workerOf(a)
	if err != nil {
		return err
	}
	c := w.lookup(id)
	if c == nil {
		return nil
	}
	w.release(c, nil)
	return nil
}

// GetGradients returns a copy of this worker's gradients in the context:
// each leaf that a backward pass reached, with its gradient. It fails if
// this worker's pass failed.
func GetGradients(ctx context.Context, id ContextID) (map[*autograd.Var]*tensor.Tensor, error) {
	a, err := agentOf(ctx)
	if err != nil {
		return nil, err
	}
	w, err := workerOf(a)
	if err != nil {
		return nil, err
	}
	c := w.lookup(id)
	if c == nil {
		return nil, fmt.Errorf("distautograd: %s holds no context %v (released, or never joined)", a.Self().Name, id)
	}
	c.mu.Lock()
	err = c.mu.err
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c.grads.Lock()
	defer c.grads.Unlock()
	out := make(map[*autograd.Var]*tensor.Tensor, len(c.grads.m))
	for v, g := range c.grads.m {
		out[v] = g
	}
	return out, nil
}

// Grad returns v's gradient in the context (autograd.GradStore).
func (c *dctx) Grad(v *autograd.Var) *tensor.Tensor {
	c.grads.Lock()
	defer c.grads.Unlock()
	return c.grads.m[v]
}

// SetGrad replaces v's gradient in the context (autograd.GradStore): DDP
// puts the averaged gradient there.
func (c *dctx) SetGrad(v *autograd.Var, g *tensor.Tensor) {
	c.grads.Lock()
	defer c.grads.Unlock()
	if g == nil {
		delete(c.grads.m, v)
		return
	}
	c.grads.m[v] = g
}

// NumContexts returns how many contexts a's worker holds (for tests and
// leak checks).
func NumContexts(a *rpc.Agent) int {
	w, ok := workers.Load(a)
	if !ok {
		return 0
	}
	ww := w.(*worker)
	ww.mu.Lock()
	defer ww.mu.Unlock()
	return len(ww.mu.ctxs)
}

// WithAgent returns ctx with a as the agent this package's functions use
// (GetGradients on a worker that did not create the context, say).
func WithAgent(ctx context.Context, a *rpc.Agent) context.Context {
	id, _ := contextOf(ctx)
	return context.WithValue(ctx, ctxKey{}, ctxVal{a, id})
}

func (c *dctx) addPeer(r int) {
	c.peers.Lock()
	c.peers.set[r] = true
	c.peers.Unlock()
}
