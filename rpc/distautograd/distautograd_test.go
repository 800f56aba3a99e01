package distautograd_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// cluster is n agents over an in-process mesh, ranks as goroutines.
type cluster struct {
	mesh   *transport.Mesh
	agents []*rpc.Agent
}

func startCluster(t *testing.T, n int, reg func(r int, reg *rpc.Registry)) *cluster {
	t.Helper()
	m := transport.NewInProc(n, transport.Faults{})
	c := &cluster{mesh: m, agents: make([]*rpc.Agent, n)}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		rg := rpc.NewRegistry()
		reg(r, rg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c.agents[r], errs[r] = rpc.Init(ctx, "", rpc.Options{
				Group: dist.FromEndpoint(m.Endpoints[r], nil, "inproc", 10*time.Second), Functions: rg})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, a := range c.agents {
			if a != nil {
				a.Shutdown(context.Background(), false)
			}
		}
		m.Close()
	})
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// model is a composite model whose parts live on three workers.
type model struct {
	x1, x2, x3, x4 *autograd.Var // on worker 0
	w1             *autograd.Var // on worker 1
	w2, w3         *autograd.Var // on worker 2
}

func newModel() *model {
	rng := tensor.NewRNG(42)
	p := func(r, c int) *autograd.Var { return autograd.Param(tensor.Randn(rng, r, c)) }
	return &model{x1: p(3, 4), x2: p(3, 4), x3: p(3, 4), x4: p(3, 4), w1: p(4, 4), w2: p(4, 4), w3: p(4, 4)}
}

// The parts, written once for the local and the distributed runs.
func (m *model) layer2(h *autograd.Var) *autograd.Var { return autograd.MatMul(h, m.w2) }
func (m *model) layer1(x *autograd.Var, next func(*autograd.Var) *autograd.Var) *autograd.Var {
	return next(autograd.Tanh(autograd.MatMul(x, m.w1)))
}
func (m *model) twice(a, b *autograd.Var) *autograd.Var {
	return autograd.Mul(autograd.MatMul(a, m.w1), b)
}
func (m *model) side(x *autograd.Var) *autograd.Var { return autograd.MatMul(x, m.w3) }

// loss combines the parts' results on worker 0: a chain (x1 through
// worker 1 to worker 2 and back), the same tensor sent twice (x2), a
// fan-out and fan-in (x3 to workers 1 and 2), and a part whose result is
// not used (x4 on worker 2).
func (m *model) loss(z, t, s1, s2, u *autograd.Var) *autograd.Var {
	_ = u
	return autograd.Add(autograd.SumAll(autograd.Mul(z, t)), autograd.SumAll(autograd.Mul(s1, s2)))
}

type twoVars struct{ A, B *distautograd.Var }

type fns struct {
	layer1, layer2, side, tanh1 rpc.Fn[*distautograd.Var, *distautograd.Var]
	twice                       rpc.Fn[twoVars, *distautograd.Var]
}

func registerModel(m *model) (func(r int, reg *rpc.Registry), *fns) {
	f := &fns{}
	return func(r int, reg *rpc.Registry) {
		must := func(err error) {
			if err != nil {
				panic(err)
			}
		}
		var err error
		f.layer2, err = rpc.Register(reg, "layer2", func(ctx context.Context, h *distautograd.Var) (*distautograd.Var, error) {
			return distautograd.Wrap(m.layer2(h.Var)), nil
		})
		must(err)
		f.layer1, err = rpc.Register(reg, "layer1", func(ctx context.Context, x *distautograd.Var) (*distautograd.Var, error) {
			a, _ := rpc.AgentFrom(ctx)
			var callErr error
			out := m.layer1(x.Var, func(h *autograd.Var) *autograd.Var {
				z, err := f.layer2.Call(ctx, a, "worker2", distautograd.Wrap(h))
				if err != nil {
					callErr = err
					return h
				}
				return z.Var
			})
			return distautograd.Wrap(out), callErr
		})
		must(err)
		f.twice, err = rpc.Register(reg, "twice", func(ctx context.Context, v twoVars) (*distautograd.Var, error) {
			return distautograd.Wrap(m.twice(v.A.Var, v.B.Var)), nil
		})
		must(err)
		f.side, err = rpc.Register(reg, "side", func(ctx context.Context, x *distautograd.Var) (*distautograd.Var, error) {
			return distautograd.Wrap(m.side(x.Var)), nil
		})
		must(err)
		f.tanh1, err = rpc.Register(reg, "tanh1", func(ctx context.Context, x *distautograd.Var) (*distautograd.Var, error) {
			return distautograd.Wrap(autograd.Tanh(autograd.MatMul(x.Var, m.w1))), nil
		})
		must(err)
	}, f
}

func TestExactness(t *testing.T) {
	m := newModel()
	// Local autograd on the composite model.
	z := m.layer1(m.x1, m.layer2)
	tw := m.twice(m.x2, m.x2)
	s1 := autograd.Tanh(autograd.MatMul(m.x3, m.w1))
	s2 := m.layer2(m.x3)
	u := m.side(m.x4)
	if err := m.loss(z, tw, s1, s2, u).Backward(nil); err != nil {
		t.Fatal(err)
	}
	params := map[string]*autograd.Var{"x1": m.x1, "x2": m.x2, "x3": m.x3, "x4": m.x4, "w1": m.w1, "w2": m.w2, "w3": m.w3}
	owner := map[string]int{"x1": 0, "x2": 0, "x3": 0, "x4": 0, "w1": 1, "w2": 2, "w3": 2}
	want := map[string]*tensor.Tensor{}
	for n, p := range params {
		want[n] = p.Grad()
	}
	if want["x4"] != nil || want["w3"] != nil {
		t.Fatal("the unused part got gradients locally")
	}

	reg, f := registerModel(m)
	c := startCluster(t, 3, reg)
	a := c.agents[0]
	ctx, id, err := distautograd.NewContext(testCtx(t), a)
	if err != nil {
		t.Fatal(err)
	}
	zd, err := f.layer1.Call(ctx, a, "worker1", distautograd.Wrap(m.x1))
	if err != nil {
		t.Fatal(err)
	}
	twd, err := f.twice.Call(ctx, a, "worker1", twoVars{distautograd.Wrap(m.x2), distautograd.Wrap(m.x2)})
	if err != nil {
		t.Fatal(err)
	}
	s1f := f.tanh1.Go(ctx, a, "worker1", distautograd.Wrap(m.x3))
	s2f := f.layer2.Go(ctx, a, "worker2", distautograd.Wrap(m.x3))
	s1d, err1 := s1f.Wait(ctx)
	s2d, err2 := s2f.Wait(ctx)
	ud, err3 := f.side.Call(ctx, a, "worker2", distautograd.Wrap(m.x4))
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatal(err1, err2, err3)
	}
	loss := m.loss(zd.Var, twd.Var, s1d.Var, s2d.Var, ud.Var)
	if err := distautograd.Backward(ctx, id, loss); err != nil {
		t.Fatal(err)
	}
	got := make([]map[*autograd.Var]*tensor.Tensor, 3)
	for r := range 3 {
		wctx := rpcCtx(ctx, c.agents[r])
		if got[r], err = distautograd.GetGradients(wctx, id); err != nil {
			t.Fatalf("worker%d: %v", r, err)
		}
	}
	for n, p := range params {
		g := got[owner[n]][p]
		if (g == nil) != (want[n] == nil) {
			t.Fatalf("%s: distributed gradient %v, local %v", n, g, want[n])
		}
		if g != nil && !tensor.Equal(g, want[n]) {
			t.Errorf("%s: distributed gradient differs from local:\n%v\n%v", n, g, want[n])
		}
		if p.Grad() != want[n] {
			t.Errorf("%s: distributed backward changed Grad", n)
		}
	}
	for r := range 3 {
		if len(got[r]) != map[int]int{0: 3, 1: 1, 2: 1}[r] {
			t.Errorf("worker%d: %d gradients: %v", r, len(got[r]), got[r])
		}
	}
	if err := distautograd.Release(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitNoContexts(t, c)
}

// rpcCtx is a context whose agent is a (as a handler's would be).
func rpcCtx(ctx context.Context, a *rpc.Agent) context.Context {
	return distautograd.WithAgent(ctx, a)
}

func waitNoContexts(t *testing.T, c *cluster, skip ...int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for r, a := range c.agents {
		if contains(skip, r) {
			continue
		}
		for distautograd.NumContexts(a) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("worker%d still holds %d contexts", r, distautograd.NumContexts(a))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

var _ = fmt.Sprint
