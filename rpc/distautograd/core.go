package distautograd

import (
	"container/heap"
	"fmt"
	"math"
	"sort"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// This file is the pure core: one worker's part of one backward pass over
// the graph recorded in a context. It computes the dependencies (FAST
// mode), runs nodes as their gradients complete, and says what to send;
// the caller moves the messages. No network, no goroutines, no clock.

// sendFn is the node recorded where a Var that needs gradients leaves
// this worker: its input is the Var sent, and its gradient arrives from
// the receiver in backward.
type sendFn struct{}

func (sendFn) Forward(in []*tensor.Tensor) *tensor.Tensor { return in[0] }
func (sendFn) Backward(g *tensor.Tensor) []*tensor.Tensor { return []*tensor.Tensor{g} }

// recvFn is the node of a Var that arrived: in backward its gradient goes
// back to the sender's sendFn. Its one input is an anchor leaf, there only
// because the local engine records nodes that have an input needing
// gradients; no gradient ever flows to it.
type recvFn struct{ t *tensor.Tensor }

func (r *recvFn) Forward([]*tensor.Tensor) *tensor.Tensor  { return r.t }
func (r *recvFn) Backward(*tensor.Tensor) []*tensor.Tensor { return []*tensor.Tensor{nil} }

// recordSend records that v leaves this worker and returns the send node.
func recordSend(v *autograd.Var) autograd.Node {
	return autograd.Apply(sendFn{}, v).GradFn()
}

// recordRecv makes the Var of a tensor that arrived with gradients.
func recordRecv(t *tensor.Tensor) *autograd.Var {
	return autograd.Apply(&recvFn{t}, autograd.Param(tensor.Scalar(0)))
}

// recvEdge is where a receive node's gradient goes: the worker that sent
// the Var and the id it gave the message.
type recvEdge struct {
	peer int
	msg  uint64
}

// gradOut is a gradient (nil: none) to deliver to msg's send node on peer.
type gradOut struct {
	peer int
	msg  uint64
	grad *tensor.Tensor
	// The pass it belongs to, stamped by the context (not the core).
	pass   int
	retain bool
}

// pass is one worker's part of one distributed backward pass.
//
// FAST mode: the graph to run is everything reachable from the roots
// given to Backward (on the worker that called it) and from every send
// node of the context, receive nodes being where it stops. Each node's
// dependency count is the number of edges into it from that graph; a
// send node's gradient comes from its receiver. A node runs when its
// count reaches zero, newest first, as in local backward. Receive nodes
// the graph does not reach get no gradient: the pass says so to their
// senders at once (a nil gradient), so that every send node hears exactly
// once and every worker's counts reach zero; the pass is over when every
// node has run.
type pass struct {
	deps     map[autograd.Node]int
	leafDeps map[*autograd.Var]int
	grads    map[autograd.Node][]contrib
	leafGrad map[*autograd.Var][]contrib
	ready    nodeHeap
	recvs    map[autograd.Node]recvEdge
	sends    map[uint64]autograd.Node
	waiting  map[uint64]bool // send nodes whose gradient has not arrived
	left     int             // nodes not yet run
	out      []gradOut
	done     []leafGrad // leaves complete since takeLeaves, in the order they completed
}

// newPass computes the dependencies of a pass over the graph reachable
// from roots (with gradients rootGrads) and the send nodes. The maps are
// read, not kept beyond the pass. It fails if part of the graph was freed
// by an earlier pass.
func newPass(roots []*autograd.Var, rootGrads []*tensor.Tensor, sends map[uint64]autograd.Node, recvs map[autograd.Node]recvEdge) (*pass, error) {
	p := &pass{
		deps: map[autograd.Node]int{}, leafDeps: map[*autograd.Var]int{},
		grads: map[autograd.Node][]contrib{}, leafGrad: map[*autograd.Var][]contrib{},
		recvs: recvs, sends: sends, waiting: map[uint64]bool{},
	}
	var stack []autograd.Node
	visit := func(n autograd.Node) {
		if _, seen := p.deps[n]; !seen {
			p.deps[n] = 0
			stack = append(stack, n)
		}
	}
	var leafRoots []int
	for i, r := range roots {
		if n := r.GradFn(); !n.IsZero() {
			visit(n)
		} else {
			leafRoots = append(leafRoots, i)
		}
	}
	for msg, n := range sends {
		visit(n)
		p.waiting[msg] = true
	}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n.Freed() {
			return nil, fmt.Errorf("distautograd: backward through %s a second time (one backward pass per context)", n.Name())
		}
		if _, isRecv := recvs[n]; isRecv {
			continue // the graph continues on the sender
		}
		for _, in := range n.Inputs() {
			if in == nil || !in.RequiresGrad() {
				continue
			}
			if m := in.GradFn(); !m.IsZero() {
				visit(m)
				p.deps[m]++
			} else {
				p.leafDeps[in]++
			}
		}
	}
	p.left = len(p.deps)
	for n, e := range recvs {
		if _, reached := p.deps[n]; !reached {
			p.out = append(p.out, gradOut{peer: e.peer, msg: e.msg})
		}
	}
	for i, r := range roots {
		if n := r.GradFn(); !n.IsZero() {
			p.grads[n] = append(p.grads[n], contrib{rootSeq, rootGrads[i]})
		}
	}
	for _, i := range leafRoots {
		r := roots[i]
		if r.RequiresGrad() {
			p.leafDeps[r]++
		}
	}
	for _, i := range leafRoots {
		if roots[i].RequiresGrad() {
			p.flowLeaf(roots[i], rootSeq, rootGrads[i])
		}
	}
	seen := map[autograd.Node]bool{}
	for _, r := range roots {
		if n := r.GradFn(); !n.IsZero() && !seen[n] && p.deps[n] == 0 {
			seen[n] = true
			heap.Push(&p.ready, n)
		}
	}
	return p, nil
}

// deliver hands the pass the gradient (nil: none) of the send node of
// msg, which its receiver computed.
func (p *pass) deliver(msg uint64, g *tensor.Tensor) error {
	n, ok := p.sends[msg]
	if !ok {
		return fmt.Errorf("distautograd: a gradient for message %d, which this worker never sent", msg)
	}
	if !p.waiting[msg] {
		return fmt.Errorf("distautograd: a second gradient for message %d", msg)
	}
	if v := n.Inputs()[0]; g != nil && (!tensor.SameShape(g, v.Value()) || g.DType() != v.DType()) {
		return fmt.Errorf("distautograd: a gradient of dtype %v and shape %v for message %d, whose Var has dtype %v and shape %v; refused (the peer that sent it computed its backward in another dtype or shape)", g.DType(), g.Shape(), msg, v.DType(), v.Shape())
	}
	delete(p.waiting, msg)
	p.grads[n] = []contrib{{rootSeq, g}}
	heap.Push(&p.ready, n)
	return nil
}

// run runs every node that is ready, and those that become ready. It
// returns a Fallible's backward error.
func (p *pass) run() error {
	for p.ready.Len() > 0 {
		n := heap.Pop(&p.ready).(autograd.Node)
		g := total(p.grads[n])
		delete(p.grads, n)
		p.left--
		if e, ok := p.recvs[n]; ok {
			p.out = append(p.out, gradOut{peer: e.peer, msg: e.msg, grad: g})
			continue
		}
		var ins []*tensor.Tensor
		if g != nil {
			var err error
			if ins, err = n.RunBackward(g); err != nil {
				return err
			}
		}
		for i, in := range n.Inputs() {
			if in == nil || !in.RequiresGrad() {
				continue
			}
			var gi *tensor.Tensor
			if ins != nil {
				gi = ins[i]
			}
			if m := in.GradFn(); !m.IsZero() {
				p.grads[m] = append(p.grads[m], contrib{n.Seq(), gi})
				if p.deps[m]--; p.deps[m] == 0 {
					heap.Push(&p.ready, m)
				}
				continue
			}
			p.flowLeaf(in, n.Seq(), gi)
		}
	}
	return nil
}

func (p *pass) flowLeaf(v *autograd.Var, seq uint64, g *tensor.Tensor) {
	p.leafGrad[v] = append(p.leafGrad[v], contrib{seq, g})
	if p.leafDeps[v]--; p.leafDeps[v] == 0 {
		if lg := total(p.leafGrad[v]); lg != nil {
			p.done = append(p.done, leafGrad{v, lg})
		}
		delete(p.leafGrad, v)
	}
}

// contrib is one contribution to a node's or leaf's gradient, from the
// node of sequence number seq.
type contrib struct {
	seq uint64
	g   *tensor.Tensor
}

// rootSeq ranks the roots' gradients, and a send node's one gradient,
// before every node's.
const rootSeq = math.MaxUint64

// total adds the contributions in the order local backward would have
// made them (their producers run newest first; one producer's in the
// order of its inputs), whatever order they arrived in: gradients that
// come over the network in varying order still sum to the same bits.
func total(cs []contrib) *tensor.Tensor {
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].seq > cs[j].seq })
	var g *tensor.Tensor
	for _, c := range cs {
		g = sum(g, c.g)
	}
	return g
}

// takeOut returns the gradients to send since the last call.
func (p *pass) takeOut() []gradOut {
	out := p.out
	p.out = nil
	return out
}

// leafGrad is a leaf's gradient for a pass, complete.
type leafGrad struct {
	v *autograd.Var
	g *tensor.Tensor
}

// takeLeaves returns the leaves whose gradient for this pass became
// complete since the last call, with that gradient, in the order they
// completed (the caller must copy a gradient before changing it).
func (p *pass) takeLeaves() []leafGrad {
	d := p.done
	p.done = nil
	return d
}

// finished reports whether every node of the pass has run.
func (p *pass) finished() bool { return p.left == 0 }

// free drops what the pass's nodes keep for backward.
func (p *pass) free() {
	for n := range p.deps {
		n.Free()
	}
}

// sum adds two gradient contributions (nil: zero) into a fresh tensor, as
// local backward does.
func sum(a, b *tensor.Tensor) *tensor.Tensor {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return new(tensor.Tensor).Add(a, b)
}

type nodeHeap []autograd.Node

func (h nodeHeap) Len() int           { return len(h) }
func (h nodeHeap) Less(i, j int) bool { return h[i].Seq() > h[j].Seq() }
func (h nodeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *nodeHeap) Push(x any)        { *h = append(*h, x.(autograd.Node)) }
func (h *nodeHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	*h = old[:len(old)-1]
	return n
}
