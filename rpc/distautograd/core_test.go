package distautograd

import (
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// simWorker is one worker's records, for driving passes without a network.
type simWorker struct {
	sends map[uint64]autograd.Node
	recvs map[autograd.Node]recvEdge
	next  uint64
}

func newSim(n int) []*simWorker {
	ws := make([]*simWorker, n)
	for i := range ws {
		ws[i] = &simWorker{sends: map[uint64]autograd.Node{}, recvs: map[autograd.Node]recvEdge{}}
	}
	return ws
}

// send moves v from worker from to worker to, as an RPC would.
func (s *simWorker) sendTo(from int, to *simWorker, v *autograd.Var) *autograd.Var {
	s.next++
	s.sends[s.next] = recordSend(v)
	r := recordRecv(v.Value())
	to.recvs[r.GradFn()] = recvEdge{peer: from, msg: s.next}
	return r
}

// runSim runs a pass on every worker (roots on worker 0) and moves the
// gradients between them until nothing moves.
func runSim(t *testing.T, ws []*simWorker, roots ...*autograd.Var) []map[*autograd.Var]*tensor.Tensor {
	t.Helper()
	ps := make([]*pass, len(ws))
	for i, w := range ws {
		var rs []*autograd.Var
		var gs []*tensor.Tensor
		if i == 0 {
			rs = roots
			for _, r := range roots {
				gs = append(gs, tensor.Full(r.DType(), 1, r.Shape()...))
			}
		}
		p, err := newPass(rs, gs, w.sends, w.recvs)
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	out := make([]map[*autograd.Var]*tensor.Tensor, len(ws))
	for i := range out {
		out[i] = map[*autograd.Var]*tensor.Tensor{}
	}
	for moved := true; moved; {
		moved = false
		for i, p := range ps {
			if err := p.run(); err != nil {
				t.Fatal(err)
			}
			for _, l := range p.takeLeaves() {
				v, g := l.v, l.g
				out[i][v] = g
			}
			for _, m := range p.takeOut() {
				moved = true
				if err := ps[m.peer].deliver(m.msg, m.grad); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for i, p := range ps {
		if !p.finished() {
			t.Fatalf("worker %d: pass not finished: %d nodes left, waiting for %v", i, p.left, p.waiting)
		}
		p.free()
	}
	return out
}

func TestPassChainAndUnusedSend(t *testing.T) {
	rng := tensor.NewRNG(1)
	x := autograd.Param(tensor.Randn(rng, 3, 4))
	wb := autograd.Param(tensor.Randn(rng, 4, 4))
	wc := autograd.Param(tensor.Randn(rng, 4, 4))

	// Local composite.
	lz := autograd.Tanh(autograd.MatMul(x, wb))
	lloss := autograd.SumAll(autograd.Square(lz))
	if err := lloss.Backward(nil); err != nil {
		t.Fatal(err)
	}
	want := map[*autograd.Var]*tensor.Tensor{x: x.Grad(), wb: wb.Grad()}

	// Worker 0 holds x, worker 1 wb, worker 2 wc; worker 2's result is
	// never used.
	ws := newSim(3)
	xr := ws[0].sendTo(0, ws[1], x)
	z := autograd.Tanh(autograd.MatMul(xr, wb))
	zr := ws[1].sendTo(1, ws[0], z)
	xr2 := ws[0].sendTo(0, ws[2], x)
	u := autograd.MatMul(xr2, wc)
	ws[2].sendTo(2, ws[0], u) // arrives, unused
	loss := autograd.SumAll(autograd.Square(zr))
	got := runSim(t, ws, loss)
	if !tensor.Equal(got[0][x], want[x]) || !tensor.Equal(got[1][wb], want[wb]) {
		t.Fatalf("gradients differ from local autograd")
	}
	if g, ok := got[2][wc]; ok {
		t.Fatalf("wc got a gradient %v, want none", g)
	}
	if x.Grad() != want[x] {
		t.Fatal("distributed backward wrote into Grad")
	}
}

func TestPassFreedGraph(t *testing.T) {
	x := autograd.Param(tensor.Scalar(2))
	ws := newSim(2)
	xr := ws[0].sendTo(0, ws[1], x)
	y := ws[1].sendTo(1, ws[0], autograd.Square(xr))
	runSim(t, ws, y)
	if _, err := newPass([]*autograd.Var{y}, []*tensor.Tensor{tensor.Scalar(1)}, ws[0].sends, ws[0].recvs); err == nil {
		t.Fatal("a second pass over a freed graph did not fail")
	}
}

// TestPassRefusesMismatchedGradient: a send node's gradient must have its
// Var's dtype and shape; one that does not is refused without being
// counted, so the right one is still taken.
func TestPassRefusesMismatchedGradient(t *testing.T) {
	v := autograd.Param(tensor.FromFloat32([]float32{1, 2, 3, 4}, 2, 2))
	p, err := newPass(nil, nil, map[uint64]autograd.Node{7: recordSend(v)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []*tensor.Tensor{tensor.Full(tensor.Float64, 1, 2, 2), tensor.Full(tensor.Float32, 1, 4)} {
		if err := p.deliver(7, g); err == nil || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("a %v%v gradient for a float32[2 2] Var: %v", g.DType(), g.Shape(), err)
		}
	}
	if err := p.deliver(7, tensor.Full(tensor.Float32, 1, 2, 2)); err != nil {
		t.Fatal(err)
	}
	if err := p.run(); err != nil {
		t.Fatal(err)
	}
	if g := leafOf(p.takeLeaves(), v); g == nil || g.DType() != tensor.Float32 || !p.finished() {
		t.Fatalf("the leaf's gradient %v, finished %v", g, p.finished())
	}
}

func leafOf(ls []leafGrad, v *autograd.Var) *tensor.Tensor {
	for _, l := range ls {
		if l.v == v {
			return l.g
		}
	}
	return nil
}
