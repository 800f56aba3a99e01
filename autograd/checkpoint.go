package autograd

import (
	"container/heap"
	"errors"
	"fmt"
	"slices"

	"github.com/godist/godist/tensor"
)

// Activation checkpointing (PyTorch's torch.utils.checkpoint, the
// non-reentrant kind) trades compute for memory: Checkpoint runs a
// function and keeps only its inputs and its output, dropping the values
// its operations computed in between; when backward reaches the output it
// runs the function again, with recording on, and backpropagates through
// that recomputation.
//
// To the rest of the graph the checkpointed call is one operation whose
// inputs are the uses, inside it, of everything gradients flow to from
// inside it: its explicit inputs, the leaves (parameters) and the Vars
// computed before the call that the function reached by closure. A Var
// used three times inside is three inputs, in the order an ordinary
// backward pass would deliver those uses' gradients, and the call's
// backward returns one gradient per use. So the engine counts every
// parameter's uses as it would without checkpointing, sums a parameter's
// contributions in the same order, accumulates its gradient once per pass
// and fires its grad-ready hooks then (DDP's buckets and FSDP's reductions
// hang on them), in the order an ordinary pass would.
//
// Gradients are those of the function run without checkpointing, bit for
// bit, as long as the recomputation computes the same values: the random
// generators it draws from (dropout) are named in CheckpointOptions.RNGs
// and replayed. (One order can differ: where an ordinary pass would run an
// operation from outside the call between two of the call's operations,
// it now runs before or after all of them; a Var used both by that
// operation and inside the call then sums its contributions in another
// order. A model of blocks in sequence has no such operation.)

// CheckpointOptions tune CheckpointWith.
type CheckpointOptions struct {
	// RNGs are the generators the function draws from (dropout masks).
	// Their states are saved before the function runs and set back for
	// the recomputation, which then draws the same numbers; afterwards
	// each is where it was before the recomputation (PyTorch's
	// preserve_rng_state). nn.Checkpointed fills them in from the
	// wrapped layer's modules.
	RNGs []*tensor.RNG
}

// ErrCheckpointRecompute is the error (wrapped, with what differed) of a
// backward pass through a checkpointed call whose recomputation did not
// match its first run: another output shape, or gradients flowing to a Var
// the first run did not reach. The function must compute the same thing
// given the same inputs and random state.
var ErrCheckpointRecompute = errors.New("autograd: the recomputation of a checkpointed function differs from its forward pass")

// Checkpoint is CheckpointWith without options: for a function that draws
// no random numbers.
func Checkpoint(fn func(inputs ...*Var) *Var, inputs ...*Var) *Var {
	return CheckpointWith(CheckpointOptions{}, fn, inputs...)
}

// CheckpointWith runs fn on the inputs without keeping the values its
// operations compute: the result holds only fn's output, and backward
// through it runs fn again and backpropagates through the recomputation.
// To the rest of the graph the call is one operation, named Checkpoint,
// whose inputs are the uses inside it of the Vars from outside it (the
// inputs, parameters, Vars reached by closure), so each parameter's
// gradient is summed, accumulated and announced to its grad-ready hooks
// as in the plain graph.
//
// fn must compute the same values from the same inputs and random state
// (opt.RNGs) every time it is called, and must not keep its intermediate
// Vars past the call. Parameters it reaches by closure get their gradients
// as without checkpointing. With recording off (NoGrad), or when nothing
// fn computes requires gradients, it just runs fn.
//
// A backward pass through the result frees it like any operation: a second
// pass panics, as Backward does, unless the first passed RetainGraph; each
// pass recomputes. A failure of the recomputation's forward or of its
// backward (a Fallible inside fn), or an ErrCheckpointRecompute, is
// returned by Backward.
func CheckpointWith(opt CheckpointOptions, fn func(inputs ...*Var) *Var, inputs ...*Var) *Var {
	if !GradEnabled() {
		return fn(inputs...)
	}
	c := &checkpoint{fn: fn, inputs: inputs, rngs: slices.Clone(opt.RNGs)}
	c.states = make([]tensor.RNGState, len(c.rngs))
	for i, g := range c.rngs {
		c.states[i] = g.State()
	}
	start := nodeSeq.Load() // every operation fn records is numbered after it
	proxies := c.proxies()
	out := fn(proxies...)
	if out == nil {
		panic("autograd: a checkpointed function returned nil")
	}
	if out.node == nil || out.node.seq <= start {
		// fn recorded nothing that leads to its output: it returned one of
		// its inputs, a leaf or a Var computed before it.
		if i := slices.Index(proxies, out); i >= 0 {
			return inputs[i]
		}
		return out
	}
	sub := scan(out.node, start)
	c.uses = make([]*Var, len(sub.uses))
	for k, b := range sub.uses {
		c.uses[k] = c.original(proxies, b)
	}
	c.dtype, c.shape = out.value.DType(), out.value.Shape()
	holds := sub.holds()
	sub.free(out, c.uses)

	v := record("Checkpoint", out.value, c.backward, c.uses...)
	if v.err == nil {
		v.err = out.err
	}
	if v.node != nil && holds {
		// An outside Function or a hook inside fn may keep the gradient
		// the recomputation starts from: the engine must not recycle it.
		v.node.foreign = true
	}
	return v
}

// checkpoint is one checkpointed call: what its recomputation needs.
type checkpoint struct {
	fn     func(...*Var) *Var
	inputs []*Var
	// uses are the node's inputs: the uses inside the call of the Vars
	// from outside it that gradients flow to, in delivery order.
	uses   []*Var
	rngs   []*tensor.RNG
	states []tensor.RNGState // the rngs' states when fn first ran
	dtype  tensor.DType
	shape  []int
}

// proxies returns new leaves holding the inputs' values, so that what fn
// records stops at them instead of running on into the graph before it.
func (c *checkpoint) proxies() []*Var {
	out := make([]*Var, len(c.inputs))
	for i, in := range c.inputs {
		if in != nil {
			out[i] = &Var{value: in.value, requiresGrad: in.requiresGrad, err: in.err}
		}
	}
	return out
}

// original returns the Var from outside the call that v stands for: the
// input of which v is the proxy, or v itself.
func (c *checkpoint) original(proxies []*Var, v *Var) *Var {
	if i := slices.Index(proxies, v); i >= 0 {
		return c.inputs[i]
	}
	return v
}

// backward is the checkpointed call's backward: it recomputes fn with the
// random state of the first run and backpropagates g through the
// recomputation, returning the gradients of the node's inputs.
func (c *checkpoint) backward(g *tensor.Tensor) []*tensor.Tensor {
	proxies := c.proxies()
	start := nodeSeq.Load()
	out := c.recompute(proxies)
	fail := func(format string, args ...any) {
		panic(backwardFailure{fmt.Errorf("%w: "+format, append([]any{ErrCheckpointRecompute}, args...)...)})
	}
	switch {
	case out == nil:
		fail("it returned nil")
	case out.err != nil:
		panic(backwardFailure{fmt.Errorf("autograd: recomputing a checkpointed function: %w", out.err)})
	case out.value.DType() != c.dtype || !slices.Equal(out.value.Shape(), c.shape):
		fail("output %v%v, first %v%v", out.value.DType(), out.value.Shape(), c.dtype, c.shape)
	case out.node == nil || out.node.seq <= start:
		fail("it recorded no operation leading to its output")
	}
	sub := scan(out.node, start)
	defer sub.free(out, c.uses) // on failure too
	if len(sub.uses) != len(c.uses) {
		fail("%d uses of Vars from outside it, first %d", len(sub.uses), len(c.uses))
	}
	for k, b := range sub.uses {
		if c.original(proxies, b) != c.uses[k] {
			fail("use %d of a Var from outside it is of another Var (shape %v) than the first time", k, b.value.Shape())
		}
	}
	p := &replay{deps: make(map[*node]int, len(sub.nodes)), grads: map[*node]gradBuf{}, ins: make([]*tensor.Tensor, len(c.uses))}
	for n, k := range sub.nodes {
		p.deps[n] = k
	}
	return p.run(out.node, g)
}

// recompute runs fn again on proxies with the random state of the first
// run, and then sets the generators back to where they were.
func (c *checkpoint) recompute(proxies []*Var) *Var {
	now := make([]tensor.RNGState, len(c.rngs))
	for i, r := range c.rngs {
		now[i] = r.State()
	}
	defer func() {
		for i, r := range c.rngs {
			r.SetState(now[i])
		}
	}()
	for i, r := range c.rngs {
		r.SetState(c.states[i])
	}
	return c.fn(proxies...)
}

// subgraph is what one run of a checkpointed function recorded: its
// operations (those numbered after the run began) and the Vars from
// outside it that gradients flow to.
type subgraph struct {
	nodes map[*node]int // each operation's output: uses inside the run
	// uses are the uses, by the run's operations, of the Vars from outside
	// it (leaves, the proxies of its inputs, Vars computed before it) that
	// gradients flow to, in the order an ordinary backward pass delivers
	// their gradients.
	uses []*Var
}

// outsideRun reports whether v was not computed by the run that began at
// start: a leaf, or a Var recorded before it.
func outsideRun(v *Var, start uint64) bool { return v.node == nil || v.node.seq <= start }

// scan finds the subgraph that the run begun at start recorded from root,
// and orders the uses of Vars from outside it by running the engine's
// order (dependency counting, newest ready operation first) without
// computing anything.
func scan(root *node, start uint64) subgraph {
	s := subgraph{nodes: map[*node]int{root: 0}}
	stack := []*node{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, in := range n.inputs {
			if in == nil || !in.requiresGrad {
				continue
			}
			if outsideRun(in, start) {
				continue
			}
			if _, seen := s.nodes[in.node]; !seen {
				stack = append(stack, in.node)
			}
			s.nodes[in.node]++
		}
	}
	deps := make(map[*node]int, len(s.nodes))
	for n, k := range s.nodes {
		deps[n] = k
	}
	ready := nodeHeap{root}
	for ready.Len() > 0 {
		n := heap.Pop(&ready).(*node)
		for _, in := range n.inputs {
			if in == nil || !in.requiresGrad {
				continue
			}
			if outsideRun(in, start) {
				s.uses = append(s.uses, in)
				continue
			}
			if deps[in.node]--; deps[in.node] == 0 {
				heap.Push(&ready, in.node)
			}
		}
	}
	return s
}

// holds reports whether code outside the engine may keep a gradient
// flowing through the subgraph: an outside Function (Apply) or a tensor
// hook or retained gradient on one of its Vars.
func (s subgraph) holds() bool {
	for n := range s.nodes {
		if n.foreign || n.out.holdsGrad() {
			return true
		}
	}
	return false
}

// free drops the subgraph's operations, as a backward pass that frees its
// graph does, and recycles the values nothing reads any more: those of its
// transient Vars (MarkTransient), but never out's, nor any of keep's.
func (s subgraph) free(out *Var, keep []*Var) {
	var rec tensor.Recycler
	for n := range s.nodes {
		v := n.out
		if st := v.stor; v != out && st != nil && !v.holdsGrad() && st.recyclable() {
			rec.Drop(v.value)
		} else {
			rec.Keep(v.value)
		}
		freeNode(n)
	}
	rec.Keep(out.value)
	for _, v := range keep {
		if v != nil {
			rec.Keep(v.value)
		}
	}
	rec.Recycle()
}

// replay is the backward pass through a recomputation: the engine's pass
// (engine.run) confined to the subgraph. The gradients of the uses of Vars
// from outside it are returned, one per use, instead of delivered: the
// engine running the checkpointed call's node delivers them.
type replay struct {
	deps  map[*node]int // uses of each operation's output not yet processed
	grads map[*node]gradBuf
	ins   []*tensor.Tensor // the node's inputs' gradients
	next  int              // the next of them to come
	ready nodeHeap
	// rec recycles the gradients that die inside the pass; held are
	// those given to outside Functions and hooks, which may keep them.
	rec  tensor.Recycler
	held []*tensor.Tensor
}

func (p *replay) run(root *node, g *tensor.Tensor) []*tensor.Tensor {
	p.rec.Keep(g) // the caller's, and the engine's
	p.grads[root] = gradBuf{t: g}
	heap.Push(&p.ready, root)
	for p.ready.Len() > 0 {
		n := heap.Pop(&p.ready).(*node)
		gn := p.grads[n].t
		delete(p.grads, n)
		if gn != nil {
			held := n.foreign || n.out.holdsGrad()
			if held {
				p.hold(gn)
			}
			gn = n.out.runHooks(gn)
			n.out.mu.Lock()
			if n.out.mu.retainGrad {
				n.out.mu.grad = gn
			}
			n.out.mu.Unlock()
			if held {
				p.hold(gn)
			} else {
				p.rec.Drop(gn)
			}
		}
		if n.view != nil && sliceAccumulation {
			if in := n.inputs[0]; in.requiresGrad {
				p.deliver(in, gn, false, n.view)
			}
			continue
		}
		var ins []*tensor.Tensor
		if gn != nil {
			ins = n.backward(gn)
		}
		if ins != nil && len(ins) != len(n.inputs) {
			panic(fmt.Sprintf("autograd: %s returned %d gradients for %d inputs", n.name, len(ins), len(n.inputs)))
		}
		for i, in := range n.inputs {
			if in == nil || !in.requiresGrad {
				continue
			}
			var gi *tensor.Tensor
			if ins != nil {
				gi = ins[i]
			}
			if gi != nil && !tensor.SameShape(gi, in.value) {
				panic(fmt.Sprintf("autograd: %s returned a gradient of shape %v for input %d of shape %v", n.name, gi.Shape(), i, in.value.Shape()))
			}
			p.rec.Drop(gi)
			p.deliver(in, gi, gi != nil && fresh(gi, i, ins, gn), nil)
		}
	}
	out := make([]*tensor.Tensor, len(p.ins))
	for i, t := range p.ins {
		if t != nil && slices.ContainsFunc(p.held, func(h *tensor.Tensor) bool { return tensor.SharesStorage(h, t) }) {
			t = t.Clone() // the node's engine may add into it or recycle it
		}
		p.rec.Keep(t)
		out[i] = t
	}
	p.rec.Recycle()
	return out
}

func (p *replay) hold(t *tensor.Tensor) {
	p.rec.Keep(t)
	p.held = append(p.held, t)
}

// deliver adds one contribution g (nil: zero) to in's gradient, as the
// engine's deliver does; that of a use of a Var from outside the run is
// kept for the caller, in the order scan found (the same order).
func (p *replay) deliver(in *Var, g *tensor.Tensor, own bool, view *sliceView) {
	if _, inside := p.deps[in.node]; !inside {
		if view != nil && g != nil {
			g = gradBuf{}.add(in.value, g, false, view).t // the slice in a whole gradient
		}
		p.ins[p.next] = g
		p.next++
		return
	}
	p.grads[in.node] = p.grads[in.node].add(in.value, g, own, view)
	if p.deps[in.node]--; p.deps[in.node] == 0 {
		heap.Push(&p.ready, in.node)
	}
}
