package distautograd

import (
	"context"
	"fmt"
	"sort"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/tensor"
)

// The messages of backward, as registered functions of every worker that
// takes part in a context.

// gradMsg carries the gradient (nil: none) of the send node msg of the
// context to the worker that sent the Var.
// It belongs to pass Pass (which it begins on the worker, when no join
// came first).
type gradMsg struct {
	Ctx    int64
	Pass   int
	Retain bool
	Msg    uint64
	Grad   *tensor.Tensor
}

// joinMsg begins pass Pass of a context on a worker; the reply lists the
// workers it exchanged Vars with in the context.
type joinMsg struct {
	Ctx    int64
	Root   int
	Pass   int
	Retain bool // the pass keeps the graph for another (Options.RetainGraph)
}

// waitMsg asks a worker for the end of its part of pass Pass.
type waitMsg struct {
	Ctx  int64
	Pass int
}

// rrefBackwardMsg asks an RRef's owner to run a backward pass from its
// value (BackwardRRef).
type rrefBackwardMsg struct {
	Ctx    int64
	Retain bool
	Root   *rpc.RRef[*Var]
}

type funcs struct {
	grad         rpc.Fn[gradMsg, struct{}]
	join         rpc.Fn[joinMsg, []int]
	wait         rpc.Fn[waitMsg, struct{}]
	watch        rpc.Fn[int64, struct{}]
	rrefBackward rpc.Fn[rrefBackwardMsg, struct{}]
}

const prefix = "distautograd."

func (w *worker) register() error {
	var err error
	keep := func(e error) {
		if err == nil {
			err = e
		}
	}
	var e error
	w.fns.rrefBackward, e = rpc.Register(w.a, prefix+"rrefBackward", func(ctx context.Context, m rrefBackwardMsg) (struct{}, error) {
		return struct{}{}, BackwardRRef(ctx, ContextID(m.Ctx), m.Root, Options{RetainGraph: m.Retain})
	})
	keep(e)
	w.fns.grad, e = rpc.Register(w.a, prefix+"grad", func(_ context.Context, m gradMsg) (struct{}, error) {
		c := w.lookup(ContextID(m.Ctx))
		if c == nil {
			return struct{}{}, fmt.Errorf("distautograd: %s holds no context %v (released)", w.a.Self().Name, ContextID(m.Ctx))
		}
		return struct{}{}, c.deliver(m.Pass, m.Retain, m.Msg, m.Grad)
	})
	keep(e)
	w.fns.join, e = rpc.Register(w.a, prefix+"join", func(_ context.Context, m joinMsg) ([]int, error) {
		c := w.lookup(ContextID(m.Ctx))
		if c == nil {
			return nil, fmt.Errorf("distautograd: %s holds no context %v (released)", w.a.Self().Name, ContextID(m.Ctx))
		}
		// The pass begins now, so that the wait that follows finds it,
		// and runs on its own: the reply (the peers, for the root's
		// discovery) does not wait for this worker's backward.
		if err := c.open(m.Pass, m.Retain, nil); err != nil {
			return nil, err
		}
		go c.progress()
		return c.peerList(), nil
	})
	keep(e)
	w.fns.wait, e = rpc.RegisterAsync(w.a, prefix+"wait", func(_ context.Context, m waitMsg) *rpc.Future[struct{}] {
		f := rpc.NewFuture[struct{}]()
		c := w.lookup(ContextID(m.Ctx))
		if c == nil {
			f.Set(struct{}{}, fmt.Errorf("distautograd: %s holds no context %v (released)", w.a.Self().Name, ContextID(m.Ctx)))
			return f
		}
		done, err := c.passEnd(m.Pass)
		if err != nil {
			f.Set(struct{}{}, err)
			return f
		}
		go func() {
			<-done
			c.mu.Lock()
			err := c.mu.err
			c.mu.Unlock()
			f.Set(struct{}{}, err)
		}()
		return f
	})
	keep(e)
	w.fns.watch, e = rpc.RegisterAsync(w.a, prefix+"watch", func(_ context.Context, id int64) *rpc.Future[struct{}] {
		f := rpc.NewFuture[struct{}]()
		c := w.lookup(ContextID(id))
		if c == nil {
			f.Set(struct{}{}, nil) // released already
			return f
		}
		c.mu.Lock()
		if c.mu.released {
			c.mu.Unlock()
			f.Set(struct{}{}, nil)
			return f
		}
		c.mu.leases = append(c.mu.leases, f)
		c.mu.Unlock()
		return f
	})
	keep(e)
	return err
}

// peers lists the workers c exchanged Vars with.
func (c *dctx) peerList() []int {
	c.peers.Lock()
	defer c.peers.Unlock()
	out := make([]int, 0, len(c.peers.set))
	for p := range c.peers.set {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// passEnd returns the channel closed when this worker's part of pass n
// is over (or the context failed).
func (c *dctx) passEnd(n int) (<-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.mu.err != nil:
		return nil, c.mu.err
	case n < c.mu.passNo:
		done := make(chan struct{})
		close(done)
		return done, nil // long over
	case n > c.mu.passNo:
		return nil, fmt.Errorf("distautograd: %s asked for the end of backward pass %d of context %v, which has not begun here", c.w.a.Self().Name, n, c.id)
	}
	return c.mu.passDone, nil
}

// open begins pass n on this worker if it has not begun: from roots
// (with gradients of ones) on the worker that called Backward, none
// elsewhere. The pass before it must be over here; its graph must have
// been kept (retain) for this one to run through it again.
func (c *dctx) open(n int, retain bool, roots []*autograd.Var) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.openLocked(n, retain, roots)
}

func (c *dctx) openLocked(n int, retain bool, roots []*autograd.Var) error {
	switch {
	case c.mu.released:
		return fmt.Errorf("distautograd: context %v was released", c.id)
	case c.mu.err != nil:
		return c.mu.err
	case n == c.mu.passNo:
		return nil // begun already (a gradient came before the join)
	case n < c.mu.passNo:
		return fmt.Errorf("distautograd: a message of backward pass %d of context %v on %s, which is at pass %d", n, c.id, c.w.a.Self().Name, c.mu.passNo)
	}
	if c.mu.pass != nil {
		select {
		case <-c.mu.passDone:
		default:
			return fmt.Errorf("distautograd: backward pass %d of context %v began on %s while pass %d still runs there (one Backward at a time per context)", n, c.id, c.w.a.Self().Name, c.mu.passNo)
		}
		if !c.mu.retain {
			return fmt.Errorf("distautograd: a second backward pass through context %v; pass Options{RetainGraph: true} to the first (BackwardWith)", c.id)
		}
		c.mu.passDone = make(chan struct{})
	}
	grads := make([]*tensor.Tensor, len(roots))
	for i, r := range roots {
		grads[i] = tensor.Full(r.DType(), 1, r.Shape()...)
	}
	p, err := newPass(roots, grads, c.mu.sends, c.mu.recvs)
	if err != nil {
		c.failLocked(err)
		return err
	}
	c.mu.pass, c.mu.passNo, c.mu.retain = p, n, retain
	c.mu.inflight, c.mu.delivering = 0, 0
	return nil
}

// progress runs what is ready of the current pass, then delivers and
// sends what that produced.
func (c *dctx) progress() {
	out, leaves := c.progressUnderLock()
	c.deliverLeaves(leaves)
	c.send(out)
}

func (c *dctx) progressUnderLock() ([]gradOut, []leafGrad) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.progressLocked()
}

// deliver feeds a gradient from a receiver into pass n (beginning it).
func (c *dctx) deliver(n int, retain bool, msg uint64, g *tensor.Tensor) error {
	out, leaves, err := c.accept(n, retain, msg, g)
	if err != nil {
		return err
	}
	c.deliverLeaves(leaves)
	c.send(out)
	return nil
}

// accept is deliver's part under the lock: it returns the gradients to
// send. The lock is let go by a defer, so that a panic in a node's
// backward (the agent recovers it) cannot leave the context locked.
func (c *dctx) accept(n int, retain bool, msg uint64, g *tensor.Tensor) ([]gradOut, []leafGrad, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.openLocked(n, retain, nil); err != nil {
		return nil, nil, err
	}
	if c.mu.err != nil {
		return nil, nil, c.mu.err
	}
	if err := c.mu.pass.deliver(msg, g); err != nil {
		return nil, nil, err
	}
	out, leaves := c.progressLocked()
	return out, leaves, nil
}

// progressLocked runs what is ready and checks whether the pass is over.
// It returns the gradients to send (counted in flight) and the leaves'
// gradients now complete (counted as delivering), which the caller
// delivers (deliverLeaves) and sends (send) once it has let go of the
// lock: a leaf's hooks (DDP's) run then.
func (c *dctx) progressLocked() ([]gradOut, []leafGrad) {
	p := c.mu.pass
	if c.mu.err != nil || p == nil {
		return nil, nil
	}
	if err := p.run(); err != nil {
		c.failLocked(fmt.Errorf("distautograd: backward on %s: %w", c.w.a.Self().Name, err))
		return nil, nil
	}
	leaves := p.takeLeaves()
	c.mu.delivering += len(leaves)
	out := p.takeOut()
	for i := range out {
		out[i].pass, out[i].retain = c.mu.passNo, c.mu.retain
	}
	c.mu.inflight += len(out)
	c.checkDoneLocked()
	return out, leaves
}

// deliverLeaves accumulates the leaves' gradients into the context, as
// ordinary backward accumulates them into Grad: each leaf's tensor hooks
// run on its gradient, then its grad-ready hooks fire, told the context
// (autograd.Var.AccumulateIn). The pass is over only once they are in.
func (c *dctx) deliverLeaves(leaves []leafGrad) {
	if len(leaves) == 0 {
		return
	}
	for _, l := range leaves {
		l.v.AccumulateIn(c, l.g)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.delivering -= len(leaves)
	c.checkDoneLocked()
}

// send sends gradients to their send nodes' workers; each answer (or
// failure) is accounted for under the lock.
func (c *dctx) send(out []gradOut) {
	for _, o := range out {
		peer, _ := c.w.a.WorkerByRank(o.peer)
		c.w.fns.grad.Go(c.passCtx, c.w.a, peer.Name, gradMsg{Ctx: int64(c.id), Pass: o.pass, Retain: o.retain, Msg: o.msg, Grad: o.grad}).Then(func(_ struct{}, err error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.mu.inflight--
			if err != nil {
				c.failLocked(fmt.Errorf("distautograd: %s sending a gradient to %s: %w", c.w.a.Self().Name, peer.Name, err))
				return
			}
			c.checkDoneLocked()
		})
	}
}

func (c *dctx) checkDoneLocked() {
	p := c.mu.pass
	if c.mu.err != nil || p == nil || !p.finished() || c.mu.inflight > 0 || c.mu.delivering > 0 {
		return
	}
	select {
	case <-c.mu.passDone:
	default:
		if !c.mu.retain {
			p.free()
		}
		close(c.mu.passDone)
	}
}

// failLocked ends the pass with err (the first failure wins).
func (c *dctx) failLocked(err error) {
	if c.mu.err != nil {
		return
	}
	select {
	case <-c.mu.passDone:
		return // over already
	default:
	}
	c.mu.err = err
	close(c.mu.passDone)
}

// Options tune a distributed backward pass.
type Options struct {
	// RetainGraph keeps every worker's part of the graph, so that
	// another pass can run through it in the same context; the
	// gradients of the passes add up in the context (PyTorch's
	// retain_graph).
	RetainGraph bool
}

// Backward runs a backward pass from roots (scalars; gradient one each)
// across every worker of the context, which must have been created on
// this worker (the agent is ctx's, as NewContext made it or a handler's).
// It returns when every worker's pass is over; the gradients are then in
// each worker's GetGradients. On failure (a worker died, a Fallible
// failed, ctx ended) it returns an error naming the worker and releases
// the context on every worker.
func Backward(ctx context.Context, id ContextID, roots ...*autograd.Var) error {
	return BackwardWith(ctx, id, Options{}, roots...)
}

// BackwardWith is Backward with options. Passes of one context run one
// at a time; a pass after the first needs the one before it to have
// retained the graph.
//
// Backward may start on any worker of the context, not only its creator
// (BackwardRRef starts it on a root's owner): the pass finds every worker
// from there. A pass that fails releases the context on the worker that
// started it; release it on the creator to end it everywhere.
func BackwardWith(ctx context.Context, id ContextID, opt Options, roots ...*autograd.Var) error {
	a, err := agentOf(ctx)
	if err != nil {
		return err
	}
	w, err := workerOf(a)
	if err != nil {
		return err
	}
	self := a.Self()
	c := w.lookup(id)
	if c == nil {
		return fmt.Errorf("distautograd: %s holds no context %v (released, or it never took part in it)", self.Name, id)
	}
	for i, r := range roots {
		if r == nil || !r.RequiresGrad() {
			return fmt.Errorf("distautograd: root %d does not require gradients", i)
		}
		if r.Err() != nil {
			return r.Err()
		}
		if r.Value().Numel() != 1 {
			return fmt.Errorf("distautograd: root %d has shape %v; roots must be scalars", i, r.Shape())
		}
	}
	fail := func(err error) error {
		err = fmt.Errorf("distautograd: backward of context %v: %w", id, err)
		w.release(c, err)
		return err
	}
	n, done, err := c.openNext(opt.RetainGraph, roots)
	if err != nil {
		return fail(err)
	}
	c.progress()
	// Learn every worker of the context, beginning their passes.
	known := map[int]bool{self.ID: true}
	frontier := c.peerList()
	var all []int
	for len(frontier) > 0 {
		var level []int
		for _, r := range frontier {
			if !known[r] {
				known[r] = true
				level = append(level, r)
			}
		}
		futs := make([]*rpc.Future[[]int], len(level))
		for i, r := range level {
			wi, _ := a.WorkerByRank(r)
			futs[i] = w.fns.join.Go(ctx, a, wi.Name, joinMsg{Ctx: int64(id), Root: self.ID, Pass: n, Retain: opt.RetainGraph})
		}
		res, err := rpc.WaitAll(ctx, futs)
		if err != nil {
			return fail(err)
		}
		all = append(all, level...)
		frontier = nil
		for _, ps := range res {
			frontier = append(frontier, ps...)
		}
	}
	// Wait for every pass, failing at the first error.
	errs := make(chan error, len(all)+1)
	for _, r := range all {
		wi, _ := a.WorkerByRank(r)
		w.fns.wait.Go(ctx, a, wi.Name, waitMsg{Ctx: int64(id), Pass: n}).Then(func(_ struct{}, err error) { errs <- err })
	}
	go func() {
		select {
		case <-done:
		case <-ctx.Done():
		}
		c.mu.Lock()
		err := c.mu.err
		c.mu.Unlock()
		if err == nil {
			err = ctx.Err()
		}
		errs <- err
	}()
	for range len(all) + 1 {
		select {
		case err := <-errs:
			if err != nil {
				return fail(err)
			}
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	return nil
}

// openNext begins the next pass on the worker that runs Backward: its
// number and the channel closed when this worker's part is over.
func (c *dctx) openNext(retain bool, roots []*autograd.Var) (int, <-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.mu.passNo + 1
	if err := c.openLocked(n, retain, roots); err != nil {
		return 0, nil, err
	}
	return n, c.mu.passDone, nil
}

// BackwardRRef runs a backward pass from the value of r, a scalar, on
// r's owner (PyTorch's RRef.backward): with a context (id not 0) a
// distributed pass through it, started there, whose gradients are the
// context's (GetGradients on each worker); with id 0 ordinary backward
// on the owner, into Grad, which must then be this worker. It returns
// when the pass is over.
func BackwardRRef(ctx context.Context, id ContextID, r *rpc.RRef[*Var], opt Options) error {
	if r.IsOwner() {
		v, err := r.LocalValue(ctx)
		if err != nil {
			return err
		}
		if v == nil || v.Var == nil {
			return fmt.Errorf("distautograd: the backward of %v, which holds no Var", r)
		}
		if id == 0 {
			if !v.RequiresGrad() || v.Value().Numel() != 1 {
				return fmt.Errorf("distautograd: the backward of %v, whose value (shape %v, requires grad %v) is not a scalar that requires gradients", r, v.Shape(), v.RequiresGrad())
			}
			return v.BackwardWith(nil, autograd.BackwardOptions{RetainGraph: opt.RetainGraph})
		}
		return BackwardWith(WithAgent(ctx, r.Agent()), id, opt, v.Var)
	}
	if id == 0 {
		return fmt.Errorf("distautograd: the local backward of %v on %s, which does not own it (%s does): pass a context, or call it on the owner", r, r.Agent().Self().Name, r.Owner().Name)
	}
	w, err := workerOf(r.Agent())
	if err != nil {
		return err
	}
	_, err = w.fns.rrefBackward.Call(ctx, r.Agent(), r.Owner().Name, rrefBackwardMsg{Ctx: int64(id), Retain: opt.RetainGraph, Root: r})
	return err
}
