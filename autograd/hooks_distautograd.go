package autograd

import (
	"fmt"

	"github.com/godist/godist/tensor"
)

// This file opens the recorded graph to an engine outside the package:
// distributed autograd (rpc/distautograd) runs backward across workers
// itself, from several roots at once (the loss and the send functions
// whose gradients arrive from other workers), and keeps the gradients of
// leaves in its context instead of Grad. It needs to walk the graph and
// to run one node's backward; nothing else.

// Node is the recorded operation that computed a Var (PyTorch's
// grad_fn). The zero Node is none. Nodes are comparable, so they can be
// map keys.
type Node struct{ n *node }

// GradFn returns the operation that computed v; the zero Node for a leaf
// or a constant.
func (v *Var) GradFn() Node { return Node{v.node} }

// IsZero reports whether n is no node.
func (n Node) IsZero() bool { return n.n == nil }

// Name names the operation (its Function's type).
func (n Node) Name() string { return n.n.name }

// Seq is the node's creation order: local backward runs the newest ready
// node first, and an outside engine that does the same keeps the order.
func (n Node) Seq() uint64 { return n.n.seq }

// Inputs returns the node's inputs, in order (nil entries are inputs that
// take no gradient). The slice is the node's: do not modify it. It is nil
// once the graph has been freed (Free).
func (n Node) Inputs() []*Var { return n.n.inputs }

// Freed reports whether the node's graph was freed (a backward pass ran
// through it without keeping the graph).
func (n Node) Freed() bool { return n.n.backward == nil }

// RunBackward runs the node's backward on the gradient of its output,
// after its output's tensor hooks, and returns one gradient per input (nil
// entries: none). A Fallible's backward error is returned; a programming
// error (a wrong number or shape of gradients) panics, as in Backward.
func (n Node) RunBackward(grad *tensor.Tensor) (ins []*tensor.Tensor, err error) {
	if n.n.backward == nil {
		panic(fmt.Sprintf("autograd: backward through %s a second time; pass RetainGraph the first time", n.n.name))
	}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(backwardFailure)
			if !ok {
				panic(r)
			}
			ins, err = nil, f.err
		}
	}()
	grad = n.n.out.runHooks(grad)
	ins = n.n.backward(grad)
	if len(ins) != len(n.n.inputs) {
		panic(fmt.Sprintf("autograd: %s returned %d gradients for %d inputs", n.n.name, len(ins), len(n.n.inputs)))
	}
	for i, g := range ins {
		if in := n.n.inputs[i]; g != nil && in != nil && !tensor.SameShape(g, in.value) {
			panic(fmt.Sprintf("autograd: %s returned a gradient of shape %v for input %d of shape %v", n.n.name, g.Shape(), i, in.value.Shape()))
		}
	}
	return ins, nil
}

// Free drops what the node keeps for backward, as a backward pass without
// RetainGraph does.
func (n Node) Free() {
	n.n.backward, n.n.inputs = nil, nil
	if n.n.release != nil {
		n.n.release()
		n.n.release = nil
	}
}
