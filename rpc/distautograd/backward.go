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
type gradMsg struct {
	Ctx  int64
	Msg  uint64
	Grad *tensor.Tensor
}

// joinMsg starts a worker's pass; the reply lists the workers it
// exchanged Vars with in the context.
type joinMsg struct {
	Ctx  int64
	Root int
}

type funcs struct {
	grad  rpc.Fn[gradMsg, struct{}]
	join  rpc.Fn[joinMsg, []int]
	wait  rpc.Fn[int64, struct{}]
	watch rpc.Fn[int64, struct{}]
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
	w.fns.grad, e = rpc.Register(w.a, prefix+"grad", func(_ context.Context, m gradMsg) (struct{}, error) {
		c := w.lookup(ContextID(m.Ctx))
		if c == nil {
			return struct{}{}, fmt.Errorf("distautograd: %s holds no context %v (released)", w.a.Self().Name, ContextID(m.Ctx))
		}
		return struct{}{}, c.deliver(m.Msg, m.Grad)
	})
	keep(e)
	w.fns.join, e = rpc.Register(w.a, prefix+"join", func(_ context.Context, m joinMsg) ([]int, error) {
		c := w.lookup(ContextID(m.Ctx))
		if c == nil {
			return nil, fmt.Errorf("distautograd: %s holds no context %v (released)", w.a.Self().Name, ContextID(m.Ctx))
		}
		// The pass runs on its own: the reply (the peers, for the root's
		// discovery) does not wait for this worker's backward.
		go c.start(nil)
		return c.peerList(), nil
	})
	keep(e)
	w.fns.wait, e = rpc.RegisterAsync(w.a, prefix+"wait", func(_ context.Context, id int64) *rpc.Future[struct{}] {
		f := rpc.NewFuture[struct{}]()
		c := w.lookup(ContextID(id))
		if c == nil {
			f.Set(struct{}{}, fmt.Errorf("distautograd: %s holds no context %v (released)", w.a.Self().Name, ContextID(id)))
			return f
		}
		go func() {
			<-c.mu.passDone
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

// start begins this worker's pass if it has not begun: roots (with
// gradients of ones) on the worker that called Backward, none elsewhere.
func (c *dctx) start(roots []*autograd.Var) error {
	out, leaves, err := c.begin(roots)
	c.deliverLeaves(leaves)
	c.send(out)
	return err
}

// begin is start's part under the lock (let go by a defer, as in
// accept): it returns the gradients to send, the leaves' gradients to
// deliver and the pass's error.
func (c *dctx) begin(roots []*autograd.Var) ([]gradOut, []leafGrad, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.startLocked(roots); err != nil {
		return nil, nil, err
	}
	out, leaves := c.progressLocked()
	return out, leaves, c.mu.err
}

func (c *dctx) startLocked(roots []*autograd.Var) error {
	if c.mu.released {
		return fmt.Errorf("distautograd: context %v was released", c.id)
	}
	if c.mu.pass != nil {
		if roots != nil {
			return fmt.Errorf("distautograd: a second backward pass in context %v (one pass per context)", c.id)
		}
		return nil
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
	c.mu.pass = p
	return nil
}

// deliver feeds a gradient from a receiver into the pass (starting it).
func (c *dctx) deliver(msg uint64, g *tensor.Tensor) error {
	out, leaves, err := c.accept(msg, g)
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
func (c *dctx) accept(msg uint64, g *tensor.Tensor) ([]gradOut, []leafGrad, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.startLocked(nil); err != nil {
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
		c.w.fns.grad.Go(c.passCtx, c.w.a, peer.Name, gradMsg{Ctx: int64(c.id), Msg: o.msg, Grad: o.grad}).Then(func(_ struct{}, err error) {
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
		p.free()
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

// Backward runs a backward pass from roots (scalars; gradient one each)
// across every worker of the context, which must have been created on
// this worker (the agent is ctx's, as NewContext made it or a handler's).
// It returns when every worker's pass is over; the gradients are then in
// each worker's GetGradients. On failure (a worker died, a Fallible
// failed, ctx ended) it returns an error naming the worker and releases
// the context on every worker.
func Backward(ctx context.Context, id ContextID, roots ...*autograd.Var) error {
	a, err := agentOf(ctx)
	if err != nil {
		return err
	}
	w, err := workerOf(a)
	if err != nil {
		return err
	}
	self := a.Self()
	if id.Creator() != self.ID {
		return fmt.Errorf("distautograd: Backward of context %v on %s; call it on the worker that created it (rank %d)", id, self.Name, id.Creator())
	}
	c := w.lookup(id)
	if c == nil {
		return fmt.Errorf("distautograd: %s holds no context %v (released?)", self.Name, id)
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
	if err := c.start(roots); err != nil {
		return fail(err)
	}
	// Learn every worker of the context, starting their passes.
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
			futs[i] = w.fns.join.Go(ctx, a, wi.Name, joinMsg{Ctx: int64(id), Root: self.ID})
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
		w.fns.wait.Go(ctx, a, wi.Name, int64(id)).Then(func(_ struct{}, err error) { errs <- err })
	}
	go func() {
		select {
		case <-c.mu.passDone:
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
