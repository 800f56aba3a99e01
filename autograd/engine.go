package autograd

import (
	"container/heap"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/godist/godist/tensor"
)

// Function is a differentiable operation that code outside this package can
// implement (distributed autograd's send and receive, SyncBatchNorm).
//
// Forward computes the output from the input values; it may keep what
// Backward needs in the receiver, so a Function value is used for one call
// only. Backward receives the gradient of the output and returns one
// gradient per input, in order; a nil entry means no gradient (zero) for
// that input. Backward must not modify grad; it may return it (or a view of
// it) as an input's gradient. Any other tensor it returns must be its own to
// give away: the engine may add the input's other gradients into it in
// place, make it a leaf's gradient, which later passes update in place, or
// recycle its storage once the pass is over (see the package
// documentation). The gradient it is given, and the values of its inputs
// and output, are never recycled: a Function may keep them.
type Function interface {
	Forward(inputs []*tensor.Tensor) *tensor.Tensor
	Backward(grad *tensor.Tensor) []*tensor.Tensor
}

// Fallible is a differentiable operation whose forward or backward can
// fail for a reason outside the program: a collective inside it (as in
// SyncBatchNorm) meeting a dead peer or a timeout. ApplyFallible runs it;
// the rest of Function's contract holds.
//
// When TryForward fails it must still return an output of the right shape
// and dtype (its values unspecified), so that the rest of the forward pass
// runs as written; the error rides on the result and on every Var computed
// from it (Var.Err), and Backward from any of them returns it without
// running. When TryBackward fails, the backward pass stops there and
// Backward returns the error; gradients accumulated before that point are
// left as they are.
type Fallible interface {
	TryForward(inputs []*tensor.Tensor) (*tensor.Tensor, error)
	TryBackward(grad *tensor.Tensor) ([]*tensor.Tensor, error)
}

// Owned is a Function that keeps nothing it is given past the call that
// gave it: after Forward, it holds the inputs' values and its output only
// for its own Backward; after Backward, it holds neither them nor the
// gradient Backward was given. What it saved of its own for Backward, it
// gives back in Release, which the engine calls once the graph is freed
// (a pass without RetainGraph, or one that failed), or at once when Apply
// recorded nothing (no input requires gradients, or recording is off);
// Backward does not run after it.
//
// Apply treats an Owned Function as one of the package's operations: the
// backward pass that frees the graph may recycle the gradient given to it
// and the values around it (MarkTransient still decides for values).
type Owned interface {
	Function
	Release()
}

// Apply runs f on the inputs' values and, when recording is on and some
// input requires gradients, records it in the graph.
//
// f's code is outside the package, so unless f is Owned the engine
// assumes it may keep what it is given: the inputs' values and the
// gradient of its output are never recycled (see MarkTransient), nor is
// its output.
func Apply(f Function, inputs ...*Var) *Var {
	v := record(fmt.Sprintf("%T", f), f.Forward(values(inputs)), f.Backward, inputs...)
	if o, ok := f.(Owned); ok {
		if v.node != nil {
			v.node.release = o.Release
		} else {
			o.Release() // nothing recorded: no backward will run
		}
		return v
	}
	return foreign(v, inputs)
}

// foreign marks v as made by an outside Function from inputs.
func foreign(v *Var, inputs []*Var) *Var {
	for _, in := range inputs {
		if in != nil {
			in.untrack()
		}
	}
	v.untrack()
	if v.node != nil {
		v.node.foreign = true
	}
	return v
}

// ApplyFallible is Apply for an operation that can fail: its forward
// error, if any, is the result's Err.
func ApplyFallible(f Fallible, inputs ...*Var) *Var {
	out, err := f.TryForward(values(inputs))
	v := foreign(record(fmt.Sprintf("%T", f), out, func(g *tensor.Tensor) []*tensor.Tensor {
		ins, err := f.TryBackward(g)
		if err != nil {
			panic(backwardFailure{err})
		}
		return ins
	}, inputs...), inputs)
	if v.err == nil {
		v.err = err
	}
	return v
}

func values(vs []*Var) []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(vs))
	for i, v := range vs {
		out[i] = v.value
	}
	return out
}

// backwardFailure carries a Fallible's backward error up to the engine's
// run, which recovers it: the only panic that crosses the engine, and it
// never leaves this package.
type backwardFailure struct{ err error }

// node is a recorded operation.
type node struct {
	name     string
	seq      uint64 // creation order; backward runs the newest ready node first
	backward func(g *tensor.Tensor) []*tensor.Tensor
	inputs   []*Var
	// maskable says backward computes only the gradients of the inputs
	// that want() them (see BackwardSplit).
	maskable bool
	// foreign says an outside Function (Apply) runs backward: it may keep
	// the gradient it is given.
	foreign bool
	out     *Var
	// release, if set, frees what backward kept once the graph is freed.
	release func()
	// view, if set, says that out is a slice of the one input's value: the
	// engine then adds the output's gradient into that slice of the
	// input's gradient buffer instead of calling backward (which stays as
	// the stand-alone form: a zero tensor with the slice filled).
	view *sliceView
}

// sliceView is a view of a tensor along one dimension: elements
// [start, start+length) of dim, or with squeezed (Select) the single index
// start with dim removed.
type sliceView struct {
	dim, start, length int
	squeezed           bool
}

// of returns the view of t.
func (s *sliceView) of(t *tensor.Tensor) *tensor.Tensor {
	if s.squeezed {
		return t.Select(s.dim, s.start)
	}
	return t.Narrow(s.dim, s.start, s.length)
}

var nodeSeq atomic.Uint64

// record wraps an operation's output. If recording is off or no input
// requires gradients the result is a constant.
func record(name string, out *tensor.Tensor, backward func(*tensor.Tensor) []*tensor.Tensor, inputs ...*Var) *Var {
	v := &Var{value: out}
	for _, in := range inputs {
		if in != nil && in.err != nil {
			v.err = in.err // a failed forward poisons what is computed from it
			break
		}
	}
	if GradEnabled() {
		for _, in := range inputs {
			if in != nil && in.requiresGrad {
				v.requiresGrad = true
				break
			}
		}
	}
	if v.requiresGrad {
		v.node = &node{name: name, seq: nodeSeq.Add(1), backward: backward, inputs: inputs, out: v}
	}
	v.track(inputs) // a view joins its input's storage group, with or without a graph
	return v
}

// BackwardOptions tune a backward pass.
type BackwardOptions struct {
	// RetainGraph keeps the recorded operations so that backward can run
	// through them again.
	RetainGraph bool
}

// Backward computes the gradient of v with respect to every leaf that
// requires gradients and accumulates it into the leaves' Grad. v must hold
// one element unless grad (the gradient of v, v's shape) is given.
//
// It returns an error only when an operation that can fail (a Fallible
// Function, such as SyncBatchNorm's collectives) failed: in the forward
// pass that computed v (v.Err(); backward does not run) or in this
// backward pass (it stops there). A graph of ordinary operations never
// fails.
func (v *Var) Backward(grad *tensor.Tensor) error { return v.BackwardWith(grad, BackwardOptions{}) }

// BackwardWith is Backward with options.
//
// Order: the engine runs a node once all the gradients flowing into it have
// arrived (dependency counting), choosing among ready nodes the one created
// last, so the order is the same on every run and every rank. A leaf's
// gradient is accumulated, and its grad-ready hooks fire, as soon as its
// last use has been processed.
func (v *Var) BackwardWith(grad *tensor.Tensor, opt BackwardOptions) error {
	if v.err != nil {
		return v.err
	}
	if !v.requiresGrad {
		panic("autograd: Backward of a Var that does not require gradients")
	}
	if grad == nil {
		if v.value.Numel() != 1 {
			panic(fmt.Sprintf("autograd: Backward of a non-scalar (shape %v) needs a gradient", v.value.Shape()))
		}
		grad = tensor.Full(v.value.DType(), 1, v.value.Shape()...)
	}
	if v.node == nil {
		v.accumulate(grad, func(*tensor.Tensor) bool { return false })
		return nil
	}
	e := newEngine(v.node)
	defer e.done()
	e.kept = append(e.kept, grad) // the caller's tensor is never stolen
	e.recycling = !opt.RetainGraph
	err := e.run(v.node, grad)
	if !opt.RetainGraph || err != nil {
		if err == nil {
			e.recycleGraph()
		}
		for n := range e.deps {
			n.backward, n.inputs = nil, nil
			if n.release != nil {
				n.release()
				n.release = nil
			}
		}
	}
	return err
}

type engine struct {
	deps     map[*node]int // uses of each node's output not yet processed
	leafDeps map[*Var]int  // uses of each leaf not yet processed
	grads    map[*node]gradBuf
	leafGrad map[*Var]gradBuf
	// kept are tensors that leaves took as their gradient this pass (and
	// the caller's root gradient); no second leaf may take their storage.
	kept []*tensor.Tensor
	// split, in the first part of a split pass, holds the weights whose
	// gradients wait for the second.
	split *WeightPass
	// recycling says the pass frees the graph, and rec gathers what it
	// may then recycle (recycleGraph).
	recycling bool
	rec       tensor.Recycler
	stack     []*node // newEngine's, kept for the next pass
	ready     nodeHeap
}

// engines are engines of finished passes, their maps and slices kept for
// the next: a training step then allocates no bookkeeping.
var engines sync.Pool

// steal reports whether a leaf may keep g as its gradient without copying:
// g must be a whole, contiguous buffer that no leaf took this pass. Other
// gradients flowing through the graph may still read g; they are done with
// it before the next pass writes into it.
func (e *engine) steal(g *tensor.Tensor) bool {
	if !g.IsWholeStorage() {
		return false
	}
	for _, k := range e.kept {
		if tensor.SharesStorage(k, g) {
			return false
		}
	}
	e.kept = append(e.kept, g)
	return true
}

// newEngine counts, for every node and leaf reachable from root, how many
// edges of the graph lead into it.
func newEngine(root *node) *engine {
	e, _ := engines.Get().(*engine)
	if e == nil {
		e = &engine{
			deps:     map[*node]int{},
			leafDeps: map[*Var]int{},
			grads:    map[*node]gradBuf{},
			leafGrad: map[*Var]gradBuf{},
		}
	}
	e.deps[root] = 0
	stack := append(e.stack[:0], root)
	defer func() { e.stack = stack[:0] }()
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n.backward == nil {
			panic(fmt.Sprintf("autograd: backward through %s a second time; pass RetainGraph the first time", n.name))
		}
		for _, in := range n.inputs {
			if in == nil || !in.requiresGrad {
				continue
			}
			if in.node == nil {
				e.leafDeps[in]++
				continue
			}
			if _, seen := e.deps[in.node]; !seen {
				stack = append(stack, in.node)
			}
			e.deps[in.node]++
		}
	}
	return e
}

// done gives e, its pass over, back for reuse. An engine whose pass is
// split (the WeightPass holds it) is never done.
func (e *engine) done() {
	clear(e.deps)
	clear(e.leafDeps)
	clear(e.grads)
	clear(e.leafGrad)
	clear(e.kept)
	e.kept = e.kept[:0]
	clear(e.ready)
	e.ready = e.ready[:0]
	e.split, e.recycling = nil, false
	e.rec.Reset()
	engines.Put(e)
}

// drop and keep tell the pass's Recycler about a gradient that is dead
// once the pass is over, or one that outlives it.
func (e *engine) drop(t *tensor.Tensor) {
	if e.recycling {
		e.rec.Drop(t)
	}
}

func (e *engine) keep(t *tensor.Tensor) {
	if e.recycling {
		e.rec.Keep(t)
	}
}

// recycleGraph runs after a pass that completed and freed the graph: it
// recycles the storage that nothing can read any more. That is the values
// of transient Vars (MarkTransient: every Var viewing the storage is
// transient, and none was read out), and the gradients that flowed
// through the graph, except those that became a leaf's gradient (kept),
// were retained or given to tensor hooks or outside Functions (kept as
// they passed). The graph's other values and its leaves' are kept, so
// that a gradient sharing their storage is not recycled either.
func (e *engine) recycleGraph() {
	for n := range e.deps {
		out := n.out
		if s := out.stor; s != nil && !out.holdsGrad() && s.recyclable() {
			e.rec.Drop(out.value)
		} else {
			e.rec.Keep(out.value)
		}
		for _, in := range n.inputs {
			if in != nil && in.node == nil {
				e.rec.Keep(in.value)
			}
		}
	}
	for _, t := range e.kept {
		e.rec.Keep(t)
	}
	e.rec.Recycle()
}

// backward runs n's backward function on g, with the leaves whose only
// contribution comes from n armed to take their gradient destination
// (disarmed again even if it panics).
func (e *engine) backward(n *node, g *tensor.Tensor) []*tensor.Tensor {
	var armed []*Var
	for _, in := range n.inputs {
		if in != nil && in.requiresGrad && in.node == nil && e.leafDeps[in] == 1 && e.leafGrad[in].t == nil {
			in.arm()
			armed = append(armed, in)
		}
	}
	defer func() {
		for _, in := range armed {
			in.disarm()
		}
	}()
	return n.backward(g)
}

// run runs the backward pass from root. It returns a Fallible's backward
// error; any other panic goes on up.
func (e *engine) run(root *node, grad *tensor.Tensor) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(backwardFailure)
			if !ok {
				panic(r)
			}
			err = f.err
		}
	}()
	ready := &e.ready
	e.grads[root] = gradBuf{t: grad}
	heap.Push(ready, root)
	for ready.Len() > 0 {
		n := heap.Pop(ready).(*node)
		g := e.grads[n].t
		delete(e.grads, n)
		if g != nil {
			// Hooks, a retained gradient and an outside Function's
			// backward may keep g; otherwise it is dead after this node.
			held := e.recycling && (n.foreign || n.out.holdsGrad())
			if held {
				e.keep(g)
			}
			g = n.out.runHooks(g)
			n.out.mu.Lock()
			if n.out.mu.retainGrad {
				n.out.mu.grad = g
			}
			n.out.mu.Unlock()
			if held {
				e.keep(g)
			} else {
				e.drop(g)
			}
		}
		if n.view != nil && sliceAccumulation {
			// A slice of its input: g goes into that slice of the
			// input's buffer, with no tensor of the input's shape made.
			if in := n.inputs[0]; in.requiresGrad {
				if e.split != nil && e.split.weights[in] {
					e.split.stash = append(e.split.stash, stashed{n: n, g: g, view: n.view})
					continue
				}
				e.deliver(in, g, false, n.view, ready)
			}
			continue
		}
		var ins []*tensor.Tensor
		var hasWeights bool
		switch {
		case e.split != nil:
			ins, hasWeights = e.splitBackward(n, g)
		case g != nil:
			ins = e.backward(n, g)
		}
		if ins != nil && len(ins) != len(n.inputs) {
			panic(fmt.Sprintf("autograd: %s returned %d gradients for %d inputs", n.name, len(ins), len(n.inputs)))
		}
		for i, in := range n.inputs {
			if in == nil || !in.requiresGrad || hasWeights && e.split.weights[in] {
				continue
			}
			var gi *tensor.Tensor
			if ins != nil {
				gi = ins[i]
			}
			if gi != nil && !tensor.SameShape(gi, in.value) {
				panic(fmt.Sprintf("autograd: %s returned a gradient of shape %v for input %d of shape %v", n.name, gi.Shape(), i, in.value.Shape()))
			}
			e.drop(gi) // kept if it becomes a leaf's gradient
			e.deliver(in, gi, gi != nil && fresh(gi, i, ins, g), nil, ready)
		}
	}
	return nil
}

// sliceAccumulation is off only in tests, which check that adding view
// gradients into slices gives, bit for bit, what the views' stand-alone
// backward functions (a zero tensor of the base's shape each) give.
var sliceAccumulation = true

// deliver adds one contribution g (nil: zero) to the gradient of in: the
// whole gradient, or with view the slice of it that view names. own says
// the engine may keep g and add later contributions into it in place.
// When the last expected contribution has arrived, a leaf accumulates its
// gradient and a node becomes ready.
func (e *engine) deliver(in *Var, g *tensor.Tensor, own bool, view *sliceView, ready *nodeHeap) {
	if in.node == nil {
		e.leafGrad[in] = e.leafGrad[in].add(in.value, g, own, view)
		if e.leafDeps[in]--; e.leafDeps[in] == 0 {
			g := e.leafGrad[in].t
			if e.recycling && in.holdsGrad() {
				e.keep(g) // the leaf's tensor hooks see it
			}
			e.drop(g)
			in.accumulate(g, e.steal)
			e.keep(in.Grad())
			delete(e.leafGrad, in)
		}
		return
	}
	e.grads[in.node] = e.grads[in.node].add(in.value, g, own, view)
	if e.deps[in.node]--; e.deps[in.node] == 0 {
		heap.Push(ready, in.node)
	}
}

// fresh reports whether the gradient ins[i], returned by a backward that
// was given g, is a tensor nobody else holds: a whole buffer that shares
// storage neither with g (a pass-through or a view of it, which other
// inputs or a retained gradient may also hold) nor with another gradient
// of the same call. The Function contract makes every other returned
// tensor the engine's to keep.
func fresh(gi *tensor.Tensor, i int, ins []*tensor.Tensor, g *tensor.Tensor) bool {
	if !gi.IsWholeStorage() || tensor.SharesStorage(gi, g) {
		return false
	}
	for j, o := range ins {
		if j != i && o != nil && tensor.SharesStorage(gi, o) {
			return false
		}
	}
	return true
}

// gradBuf is the gradient of one node's output or one leaf being summed
// over its uses in a pass. Contributions are added in the order they
// arrive, which the engine's node order fixes, so the sum is the same bit
// for bit on every run.
type gradBuf struct {
	t *tensor.Tensor // nil until the first contribution
	// owned says t is the engine's alone (allocated here, or a fresh
	// tensor a backward gave away), so later contributions are added into
	// it in place; otherwise the first of them makes a new one.
	owned bool
}

// add returns b with contribution g added: the whole of g, or with view g
// added into that slice of a gradient shaped like value.
func (b gradBuf) add(value, g *tensor.Tensor, own bool, view *sliceView) gradBuf {
	switch {
	case g == nil:
		return b
	case view != nil && b.t == nil:
		// The first contribution is a slice: one zero buffer for all of
		// them, the slice copied in.
		t := tensor.New(g.DType(), value.Shape()...)
		view.of(t).Copy(g)
		return gradBuf{t: t, owned: true}
	case b.t == nil:
		return gradBuf{t: g, owned: own}
	case view != nil:
		if !b.owned {
			b = gradBuf{t: b.t.Clone(), owned: true}
		}
		dst := view.of(b.t)
		dst.Add(dst, g)
		return b
	case b.owned:
		b.t.Add(b.t, g)
		return b
	}
	return gradBuf{t: new(tensor.Tensor).Add(b.t, g), owned: true}
}

type nodeHeap []*node

func (h nodeHeap) Len() int           { return len(h) }
func (h nodeHeap) Less(i, j int) bool { return h[i].seq > h[j].seq }
func (h nodeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *nodeHeap) Push(x any)        { *h = append(*h, x.(*node)) }
func (h *nodeHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	*h = old[:len(old)-1]
	return n
}

// Leaves returns the leaves that require gradients and that a backward
// pass from v would reach. DDP's find-unused-parameters mode uses it to
// learn, right after the forward pass, which parameters will get no
// gradient.
func Leaves(v *Var) map[*Var]bool {
	out := map[*Var]bool{}
	if v == nil || !v.requiresGrad {
		return out
	}
	if v.node == nil {
		out[v] = true
		return out
	}
	seen := map[*node]bool{v.node: true}
	stack := []*node{v.node}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, in := range n.inputs {
			if in == nil || !in.requiresGrad {
				continue
			}
			if in.node == nil {
				out[in] = true
			} else if !seen[in.node] {
				seen[in.node] = true
				stack = append(stack, in.node)
			}
		}
	}
	return out
}

// GraphBytes returns the bytes of the values that the recorded operations
// leading to v computed (v's own included): what the graph holds until a
// backward pass frees it, counted once per operation. Pipeline schedules
// report their activation memory with it.
func GraphBytes(v *Var) int64 {
	if v == nil || v.node == nil {
		return 0
	}
	var n int64
	seen := map[*node]bool{v.node: true}
	stack := []*node{v.node}
	for len(stack) > 0 {
		nd := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n += int64(nd.out.value.Numel() * nd.out.value.DType().Size())
		for _, in := range nd.inputs {
			if in != nil && in.node != nil && !seen[in.node] {
				seen[in.node] = true
				stack = append(stack, in.node)
			}
		}
	}
	return n
}
