package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/rpc"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// counter is an object that lives on its owner: it holds a mutex and a
// channel, so it cannot travel; it is used only through methods.
type counter struct {
	mu    sync.Mutex
	n     int
	Owner string
	Ch    chan int
}

type rrefFuncs struct {
	newCounter rpc.Fn[string, *counter]
	add        rpc.Method[*counter, int, int]
	get        rpc.Method[*counter, struct{}, int]
	makeT      rpc.Fn[int, *tensor.Tensor]
	sumRef     rpc.Fn[*rpc.RRef[*tensor.Tensor], float32] // fetches the tensor from its owner
	pass       rpc.Fn[passArgs, float32]                  // forks the RRef on to another worker
	holdRef    rpc.Fn[*rpc.RRef[*counter], string]        // keeps the RRef (a fork) until dropped
	dropHeld   rpc.Fn[struct{}, int]
}

type passArgs struct {
	Ref *rpc.RRef[*tensor.Tensor]
	To  string
}

func registerRRefs(t testing.TB, reg *rpc.Registry, agent **rpc.Agent) rrefFuncs {
	var f rrefFuncs
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	f.newCounter, err = rpc.Register(reg, "newCounter", func(_ context.Context, owner string) (*counter, error) {
		return &counter{Owner: owner, Ch: make(chan int)}, nil
	})
	add(err)
	f.add, err = rpc.RegisterMethod(reg, "counter.add", func(_ context.Context, c *counter, d int) (int, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.n += d
		return c.n, nil
	})
	add(err)
	f.get, err = rpc.RegisterMethod(reg, "counter.get", func(_ context.Context, c *counter, _ struct{}) (int, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.n, nil
	})
	add(err)
	f.makeT, err = rpc.Register(reg, "makeT", func(_ context.Context, n int) (*tensor.Tensor, error) {
		if n < 0 {
			return nil, fmt.Errorf("negative size %d", n)
		}
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i)
		}
		return tensor.FromFloat32(x, n), nil
	})
	add(err)
	f.sumRef, err = rpc.Register(reg, "sumRef", func(ctx context.Context, r *rpc.RRef[*tensor.Tensor]) (float32, error) {
		defer r.Release()
		x, err := r.ToHere(ctx)
		if err != nil {
			return 0, err
		}
		var s float32
		for _, v := range x.Float32s() {
			s += v
		}
		return s, nil
	})
	add(err)
	f.pass, err = rpc.Register(reg, "pass", func(ctx context.Context, p passArgs) (float32, error) {
		defer p.Ref.Release()
		return rpc.Func[*rpc.RRef[*tensor.Tensor], float32]("sumRef").Call(ctx, *agent, p.To, p.Ref)
	})
	add(err)
	var held []*rpc.RRef[*counter]
	var heldMu sync.Mutex
	f.holdRef, err = rpc.Register(reg, "holdRef", func(_ context.Context, r *rpc.RRef[*counter]) (string, error) {
		heldMu.Lock()
		held = append(held, r)
		heldMu.Unlock()
		return r.Owner().Name, nil
	})
	add(err)
	f.dropHeld, err = rpc.Register(reg, "dropHeld", func(context.Context, struct{}) (int, error) {
		heldMu.Lock()
		defer heldMu.Unlock()
		n := len(held)
		for _, r := range held {
			r.Release()
		}
		held = nil
		return n, nil
	})
	add(err)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return f
}

func startRRefs(t *testing.T, n int, faults transport.Faults) (*cluster, rrefFuncs) {
	var f rrefFuncs
	agents := make([]*rpc.Agent, n)
	c := startWith(t, n, faults, rpc.Options{}, func(r int, reg *rpc.Registry) {
		fr := registerRRefs(t, reg, &agents[r])
		if r == 0 {
			f = fr
		}
	})
	copy(agents, c.agents)
	return c, f
}

// quiet waits until every agent's RRef state is empty.
func quiet(t *testing.T, c *cluster) {
	t.Helper()
	end := time.Now().Add(5 * time.Second)
	for {
		all, why := true, ""
		for _, a := range c.agents {
			if ok, s := a.RRefsEmpty(); !ok {
				all, why = false, a.Self().Name+": "+s
			}
		}
		if all {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("RRef state left after every handle was released: %s", why)
		}
		runtime.GC()
		time.Sleep(2 * time.Millisecond)
	}
}

func TestRRefs(t *testing.T) {
	for _, faults := range []transport.Faults{{}, {Seed: 11, Dup: 0.2, Loss: 0.05, MaxDelay: 2 * time.Millisecond}} {
		t.Run(fmt.Sprintf("faults=%v", faults.Seed != 0), func(t *testing.T) {
			c, f := startRRefs(t, 3, faults)
			ctx := ctx(t)
			a0, a1 := c.agents[0], c.agents[1]

			// remote() and ToHere, from a user and on the owner.
			x, err := f.makeT.Remote(ctx, a0, "worker1", 4)
			if err != nil {
				t.Fatal(err)
			}
			if x.IsOwner() || x.Owner().Name != "worker1" {
				t.Fatalf("owner: %v", x.Owner())
			}
			got, err := x.ToHere(ctx)
			if err != nil || fmt.Sprint(got.Float32s()) != "[0 1 2 3]" {
				t.Fatalf("ToHere: %v %v", got, err)
			}
			if !x.ConfirmedByOwner() {
				t.Fatal("not confirmed after ToHere returned")
			}
			self, err := f.makeT.Remote(ctx, a0, "worker0", 2)
			if err != nil {
				t.Fatal(err)
			}
			if v, err := self.LocalValue(ctx); err != nil || v.Numel() != 2 || !self.IsOwner() {
				t.Fatalf("remote to self: %v %v", v, err)
			}
			if _, err := x.LocalValue(ctx); err == nil {
				t.Fatal("LocalValue on a user worked")
			}

			// A user passes its RRef to a third worker, which fetches the
			// value from the owner; and a chain user → user → user.
			if s, err := f.sumRef.Call(ctx, a0, "worker2", x); err != nil || s != 6 {
				t.Fatalf("sum via worker2: %v %v", s, err)
			}
			if s, err := f.pass.Call(ctx, a0, "worker2", passArgs{x, "worker0"}); err != nil || s != 6 {
				t.Fatalf("sum via worker2 then worker0: %v %v", s, err)
			}
			// The owner's own RRef sent out and back.
			local := rpc.NewRRef(a1, tensor.FromFloat32([]float32{5, 5}, 2))
			if s, err := f.pass.Call(ctx, a1, "worker2", passArgs{local, "worker1"}); err != nil || s != 10 {
				t.Fatalf("owner's RRef via worker2 back to the owner: %v %v", s, err)
			}

			// An object that cannot travel, created and used remotely.
			ctr, err := f.newCounter.Remote(ctx, a0, "worker2", "w2")
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 5; i++ {
				if n, err := f.add.Call(ctx, a0, ctr, i); err != nil || n != i*(i+1)/2 {
					t.Fatalf("method call %d: %d %v", i, n, err)
				}
			}
			// A method whose result stays on the owner.
			nref, err := f.get.Remote(ctx, a0, ctr, struct{}{})
			if err != nil {
				t.Fatal(err)
			}
			if n, err := nref.ToHere(ctx); err != nil || n != 15 {
				t.Fatalf("method remote: %d %v", n, err)
			}
			if _, err := ctr.ToHere(ctx); err == nil {
				t.Fatal("ToHere of a value that cannot travel worked")
			}
			// Another worker holds a fork after the creator released its
			// own handle: the value stays.
			if owner, err := f.holdRef.Call(ctx, a0, "worker1", ctr); err != nil || owner != "worker2" {
				t.Fatalf("holdRef: %q %v", owner, err)
			}
			ctr.Release()
			time.Sleep(5 * time.Millisecond)
			// worker1 (holding the fork) can still use it.
			if n, err := f.dropHeld.Call(ctx, a0, "worker1", struct{}{}); err != nil || n != 1 {
				t.Fatalf("dropHeld: %d %v", n, err)
			}

			// Errors of the function come out of ToHere.
			bad, err := f.makeT.Remote(ctx, a0, "worker1", -1)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bad.ToHere(ctx); err == nil || !strings.Contains(err.Error(), "negative size") {
				t.Fatalf("error of a remote function: %v", err)
			}
			nope, err := rpc.Func[int, int]("nope").Remote(ctx, a0, "worker1", 1)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := nope.ToHere(ctx); !errors.Is(err, rpc.ErrUnknownFunction) {
				t.Fatalf("remote of an unknown function: %v", err)
			}
			for _, r := range []interface{ Release() }{x, self, local, nref, bad, nope} {
				r.Release()
			}
			if _, err := x.ToHere(ctx); err == nil {
				t.Fatal("ToHere after Release worked")
			}
			quiet(t, c)
		})
	}
}

// TestRRefCleanup: handles dropped without Release are released when the
// garbage collector finds them, and the owner frees the values.
func TestRRefCleanup(t *testing.T) {
	c, f := startRRefs(t, 2, transport.Faults{})
	ctx := ctx(t)
	for i := range 20 {
		x, err := f.makeT.Remote(ctx, c.agents[0], "worker1", i)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := x.ToHere(ctx); err != nil {
			t.Fatal(err)
		}
	}
	quiet(t, c)
}

// TestRRefOwnerDies: ToHere on an RRef whose owner died fails naming it.
func TestRRefOwnerDies(t *testing.T) {
	c, f := startRRefs(t, 3, transport.Faults{})
	ctx := ctx(t)
	x, err := f.makeT.Remote(ctx, c.agents[0], "worker2", 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.ToHere(ctx); err != nil {
		t.Fatal(err)
	}
	c.mesh.Kill(2)
	_, err = x.ToHere(ctx)
	var wd *rpc.WorkerDownError
	if !errors.As(err, &wd) || wd.Worker != "worker2" {
		t.Fatalf("ToHere after the owner died: %v", err)
	}
	x.Release()
}

// TestRemoteToDeadWorker: Remote to a worker that is down, a method's
// Remote on a value it owned, and a call carrying an RRef to it fail with
// a *CallError naming the call that wraps the *WorkerDownError, as every
// other call to a dead worker does (not the RRef table's "peer is down").
func TestRemoteToDeadWorker(t *testing.T) {
	c, f := startRRefs(t, 3, transport.Faults{})
	ctx := ctx(t)
	a := c.agents[0]
	ctr, err := f.newCounter.Remote(ctx, a, "worker2", "w2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.add.Call(ctx, a, ctr, 1); err != nil {
		t.Fatal(err)
	}
	x := rpc.NewRRef(a, tensor.FromFloat32([]float32{1, 2}, 2))
	c.mesh.Kill(2)
	check := func(what, fn string, err error) {
		t.Helper()
		var wd *rpc.WorkerDownError
		var ce *rpc.CallError
		if !errors.As(err, &wd) || wd.Worker != "worker2" || wd.Rank != 2 || !errors.As(err, &ce) || ce.Worker != "worker2" || ce.Function != fn {
			t.Errorf("%s: %v, want a *CallError of %s on worker2 wrapping a *WorkerDownError", what, err, fn)
		}
	}
	_, err = f.makeT.Remote(ctx, a, "worker2", 3)
	check("Remote to a dead worker", "makeT", err)
	_, err = f.add.Remote(ctx, a, ctr, 1)
	check("a method's Remote on a dead owner's value", "counter.add", err)
	_, err = f.sumRef.Call(ctx, a, "worker2", x)
	check("a call with an RRef argument to a dead worker", "sumRef", err)
	x.Release()
	ctr.Release()
}

// TestShutdownReleasesRRefs: a graceful shutdown with handles still held
// releases them, and every table ends empty.
func TestShutdownReleasesRRefs(t *testing.T) {
	c, f := startRRefs(t, 3, transport.Faults{Seed: 5, MaxDelay: time.Millisecond})
	ctx := ctx(t)
	var keep []*rpc.RRef[*tensor.Tensor]
	for i := range 6 {
		x, err := f.makeT.Remote(ctx, c.agents[i%3], fmt.Sprintf("worker%d", (i+1)%3), i)
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, x)
		if _, err := f.sumRef.Call(ctx, c.agents[i%3], fmt.Sprintf("worker%d", (i+2)%3), x); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for r, a := range c.agents {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = a.Shutdown(ctx, true) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, a := range c.agents {
		if ok, s := a.RRefsEmpty(); !ok {
			t.Errorf("%s after a graceful shutdown: %s", a.Self().Name, s)
		}
	}
	runtime.KeepAlive(keep)
}

// TestUnsentRequestUnforks: a request with an RRef among its arguments
// that never leaves (too large for its callee) undoes the RRef's fork
// for the callee, from Remote as from Go, so that no table keeps it and
// the owner frees the value once its handles are released; a Remote's
// own RRef, never sent, is dropped too, as it is when the arguments do
// not encode.
func TestUnsentRequestUnforks(t *testing.T) {
	var f rrefFuncs
	agents := make([]*rpc.Agent, 2)
	c := startWith(t, 2, transport.Faults{}, rpc.Options{MaxMessage: 1 << 16}, func(r int, reg *rpc.Registry) {
		if fr := registerRRefs(t, reg, &agents[r]); r == 0 {
			f = fr
		}
	})
	copy(agents, c.agents)
	ctx := ctx(t)
	a := c.agents[0]
	x := rpc.NewRRef(a, tensor.FromFloat32([]float32{1, 2}, 2))
	_, before := a.RRefsEmpty()
	tooLarge := passArgs{Ref: x, To: strings.Repeat("w", 1<<17)}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, rpc.ErrTooLarge) {
			t.Errorf("%s: %v, want ErrTooLarge", what, err)
		}
		if _, after := a.RRefsEmpty(); after != before {
			t.Errorf("%s: the table was\n%s\nand is\n%s", what, before, after)
		}
	}
	_, err := f.pass.Go(ctx, a, "worker1", tooLarge).Wait(ctx)
	check("Go", err)
	y, err := f.pass.Remote(ctx, a, "worker1", tooLarge)
	if err == nil {
		_, err = y.ToHere(ctx)
		y.Release()
	}
	check("Remote", err)
	released := rpc.NewRRef(a, tensor.FromFloat32([]float32{3}, 1))
	released.Release()
	_, before = a.RRefsEmpty()
	if _, err := f.pass.Remote(ctx, a, "worker1", passArgs{Ref: released}); err == nil {
		t.Error("Remote with a released RRef among its arguments: no error")
	}
	if _, after := a.RRefsEmpty(); after != before {
		t.Errorf("Remote whose arguments do not encode: the table was\n%s\nand is\n%s", before, after)
	}
	x.Release()
	quiet(t, c)
}
