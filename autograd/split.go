package autograd

import (
	"fmt"

	"github.com/godist/godist/tensor"
)

// A split backward pass computes the gradients of a graph in two parts:
// first everything except the gradients of some leaves (the weights),
// then those. Zero-bubble pipeline schedules run the first part, whose
// result (the gradient of a stage's input) the previous stage is waiting
// for, at once, and the second later, in what would otherwise be idle
// time.
//
// Operations that honour the split (Linear, MatMul, Conv2d, Embedding, Mul
// and Div, marked maskable) skip the weights' share of their backward in
// the first part and are run again in the second with only that share.
// Any other operation computes all its gradients in the first part; the
// weights' ones are kept and delivered in the second. Either way each
// weight receives its contributions in the order an ordinary backward
// pass would give them, so the gradients are the same bit for bit.

// maskable marks v's operation as one whose backward computes only the
// gradients of the inputs that want() them.
func maskable(v *Var) *Var {
	if v.node != nil {
		v.node.maskable = true
	}
	return v
}

// wants reports whether an operation's backward should compute v's
// gradient now: v requires one and the engine has not masked it for this
// part of a split pass.
func (v *Var) wants() bool { return v.requiresGrad && !v.masked }

// WeightPass is the second part of a split backward pass: the weights'
// gradients, computed by Run.
type WeightPass struct {
	e       *engine
	weights map[*Var]bool
	stash   []stashed
	done    bool
}

// stashed is a node whose weight gradients the first part left: either
// the gradient of its output, to run its backward again (recall), or the
// weight gradients it already computed (vals, one per input; nil where
// the input is not a weight).
type stashed struct {
	n      *node
	recall bool
	g      *tensor.Tensor
	vals   []*tensor.Tensor
	own    []bool
	view   *sliceView // a view node's gradient g, added into its slice
}

// BackwardSplit runs the first part of a split backward pass from v (see
// Backward for grad): it computes every gradient except those of the
// leaves in weights, accumulating into the other leaves' Grad as Backward
// does. The returned WeightPass computes the weights' gradients; it must
// be run once, before the graph's tensors are changed, and until then
// the graph is kept.
func (v *Var) BackwardSplit(grad *tensor.Tensor, weights []*Var) (*WeightPass, error) {
	if v.err != nil {
		return nil, v.err
	}
	if !v.requiresGrad {
		panic("autograd: BackwardSplit of a Var that does not require gradients")
	}
	if grad == nil {
		if v.value.Numel() != 1 {
			panic(fmt.Sprintf("autograd: BackwardSplit of a non-scalar (shape %v) needs a gradient", v.value.Shape()))
		}
		grad = tensor.Full(v.value.DType(), 1, v.value.Shape()...)
	}
	w := &WeightPass{weights: map[*Var]bool{}}
	for _, p := range weights {
		if p.node != nil {
			panic("autograd: BackwardSplit: a weight that is not a leaf")
		}
		w.weights[p] = true
	}
	if v.node == nil {
		if w.weights[v] {
			w.stash = append(w.stash, stashed{n: &node{inputs: []*Var{v}}, vals: []*tensor.Tensor{grad}, own: []bool{false}})
			w.e = &engine{leafDeps: map[*Var]int{v: 1}, leafGrad: map[*Var]gradBuf{}, kept: []*tensor.Tensor{grad}}
		} else {
			v.accumulate(grad, func(*tensor.Tensor) bool { return false })
			w.done = true
		}
		return w, nil
	}
	e := newEngine(v.node)
	e.split = w
	e.kept = append(e.kept, grad)
	w.e = e
	err := e.run(v.node, grad)
	stashed := map[*node]bool{}
	for _, s := range w.stash {
		stashed[s.n] = true
	}
	for n := range e.deps {
		if err == nil && stashed[n] {
			continue // the weight pass still needs it
		}
		freeNode(n)
	}
	if err != nil {
		w.done = true
		return nil, err
	}
	return w, nil
}

func freeNode(n *node) {
	n.backward, n.inputs = nil, nil
	if n.release != nil {
		n.release()
		n.release = nil
	}
}

// Run computes and accumulates the weights' gradients, firing their
// grad-ready hooks as an ordinary pass would. A second call does nothing.
func (w *WeightPass) Run() error {
	if w == nil || w.done {
		return nil
	}
	w.done = true
	e := w.e
	for _, s := range w.stash {
		if s.view != nil {
			e.deliver(s.n.inputs[0], s.g, false, s.view, nil)
			continue
		}
		vals, own := s.vals, s.own
		if s.recall {
			vals, own = w.recall(s)
		}
		for i, in := range s.n.inputs {
			if in != nil && w.weights[in] && in.requiresGrad {
				e.deliver(in, vals[i], own[i], nil, nil)
			}
		}
		if s.n.backward != nil {
			freeNode(s.n)
		}
	}
	w.stash = nil
	return nil
}

// recall runs a maskable node's backward again with only its weights
// unmasked.
func (w *WeightPass) recall(s stashed) ([]*tensor.Tensor, []bool) {
	n := s.n
	var masked []*Var
	for _, in := range n.inputs {
		if in != nil && in.requiresGrad && !w.weights[in] {
			in.masked = true
			masked = append(masked, in)
		}
	}
	defer func() {
		for _, in := range masked {
			in.masked = false
		}
	}()
	ins := w.e.backward(n, s.g)
	own := make([]bool, len(ins))
	for i, gi := range ins {
		own[i] = gi != nil && fresh(gi, i, ins, s.g)
	}
	return ins, own
}

// splitBackward is the engine's call of a node's backward in the first
// part of a split pass: the weights among its inputs are masked (for a
// maskable node) or their gradients kept for later. It returns the
// gradients (nil when g is nil) and whether the node has weights among its
// inputs, which the caller then must not deliver to.
func (e *engine) splitBackward(n *node, g *tensor.Tensor) ([]*tensor.Tensor, bool) {
	w := e.split
	var weights []*Var
	for _, in := range n.inputs {
		if in != nil && in.requiresGrad && w.weights[in] {
			weights = append(weights, in)
		}
	}
	if len(weights) == 0 {
		if g == nil {
			return nil, false
		}
		return e.backward(n, g), false
	}
	if g == nil {
		// No gradient reached n: its weights get nil contributions, in
		// their turn.
		w.stash = append(w.stash, stashed{n: n, vals: make([]*tensor.Tensor, len(n.inputs)), own: make([]bool, len(n.inputs))})
		return nil, true
	}
	if n.maskable {
		for _, in := range weights {
			in.masked = true
		}
		ins := func() []*tensor.Tensor {
			defer func() {
				for _, in := range weights {
					in.masked = false
				}
			}()
			return e.backward(n, g)
		}()
		w.stash = append(w.stash, stashed{n: n, recall: true, g: g})
		return ins, true
	}
	ins := e.backward(n, g)
	s := stashed{n: n, vals: make([]*tensor.Tensor, len(ins)), own: make([]bool, len(ins))}
	for i, in := range n.inputs {
		if in != nil && in.requiresGrad && w.weights[in] && i < len(ins) {
			s.vals[i], s.own[i] = ins[i], ins[i] != nil && fresh(ins[i], i, ins, g)
		}
	}
	w.stash = append(w.stash, s)
	return ins, true
}
