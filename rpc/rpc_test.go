package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

type addArgs struct {
	A, B int
}

type scaleArgs struct {
	T      *tensor.Tensor
	Factor float32
}

// funcs registers the functions the tests call, the same on every worker.
type funcs struct {
	add     rpc.Fn[addArgs, int]
	scale   rpc.Fn[scaleArgs, *tensor.Tensor]
	fail    rpc.Fn[string, int]
	boom    rpc.Fn[int, int]
	sleep   rpc.Fn[time.Duration, string]
	whoami  rpc.Fn[struct{}, string]
	echo    rpc.Fn[[]byte, []byte]
	echoT   rpc.Fn[*tensor.Tensor, *tensor.Tensor]
	slowAdd rpc.Fn[addArgs, int] // async: completes on another goroutine
}

func register(t testing.TB, reg *rpc.Registry, self *string) funcs {
	t.Helper()
	var f funcs
	var err error
	must := func(e error) {
		if e != nil && err == nil {
			err = e
		}
	}
	f.add, err = rpc.Register(reg, "add", func(_ context.Context, a addArgs) (int, error) { return a.A + a.B, nil })
	var e error
	f.scale, e = rpc.Register(reg, "scale", func(_ context.Context, a scaleArgs) (*tensor.Tensor, error) {
		return tensor.New(tensor.Float32, a.T.Shape()...).MulScalar(a.T, float64(a.Factor)), nil
	})
	must(e)
	f.fail, e = rpc.Register(reg, "fail", func(_ context.Context, s string) (int, error) { return 0, errors.New(s) })
	must(e)
	f.boom, e = rpc.Register(reg, "boom", func(_ context.Context, i int) (int, error) {
		var m map[int]int
		m[i] = i // nil map: panics
		return i, nil
	})
	must(e)
	f.sleep, e = rpc.Register(reg, "sleep", func(ctx context.Context, d time.Duration) (string, error) {
		select {
		case <-time.After(d):
			return "slept", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	must(e)
	f.whoami, e = rpc.Register(reg, "whoami", func(ctx context.Context, _ struct{}) (string, error) {
		a, ok := rpc.AgentFrom(ctx)
		if !ok || a.Self().Name != *self {
			return "", fmt.Errorf("AgentFrom: %v %v, want %s", a, ok, *self)
		}
		return a.Self().Name, nil
	})
	must(e)
	f.echo, e = rpc.Register(reg, "echo", func(_ context.Context, b []byte) ([]byte, error) { return b, nil })
	must(e)
	f.echoT, e = rpc.Register(reg, "echoT", func(_ context.Context, t *tensor.Tensor) (*tensor.Tensor, error) { return t, nil })
	must(e)
	f.slowAdd, e = rpc.RegisterAsync(reg, "slowAdd", func(_ context.Context, a addArgs) *rpc.Future[int] {
		fut := rpc.NewFuture[int]()
		time.AfterFunc(time.Millisecond, func() { fut.Set(a.A+a.B, nil) })
		return fut
	})
	must(e)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

type cluster struct {
	mesh   *transport.Mesh
	agents []*rpc.Agent
	f      funcs
}

// start runs n agents over an in-process mesh, ranks as goroutines.
func start(t *testing.T, n int, faults transport.Faults, opt rpc.Options) *cluster {
	t.Helper()
	return startWith(t, n, faults, opt, nil)
}

// startWith is start with more functions registered on each worker.
func startWith(t *testing.T, n int, faults transport.Faults, opt rpc.Options, more func(r int, reg *rpc.Registry)) *cluster {
	t.Helper()
	m := transport.NewInProc(n, faults)
	c := &cluster{mesh: m, agents: make([]*rpc.Agent, n)}
	names := make([]string, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		reg := rpc.NewRegistry()
		names[r] = fmt.Sprintf("worker%d", r)
		f := register(t, reg, &names[r])
		if r == 0 {
			c.f = f
		}
		if more != nil {
			more(r, reg)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opt
			o.Group = dist.FromEndpoint(m.Endpoints[r], nil, "inproc", 10*time.Second)
			o.Functions = reg
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c.agents[r], errs[r] = rpc.Init(ctx, "", o)
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
			a.Shutdown(context.Background(), false)
		}
		m.Close()
	})
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestCalls(t *testing.T) {
	for _, faults := range []transport.Faults{{}, {Seed: 7, Dup: 0.1, Loss: 0.05, MaxDelay: time.Millisecond}} {
		t.Run(fmt.Sprintf("faults=%v", faults.Seed != 0), func(t *testing.T) {
			c := start(t, 3, faults, rpc.Options{})
			ctx := ctx(t)
			a := c.agents[0]
			for to := range 3 {
				name := fmt.Sprintf("worker%d", to)
				got, err := c.f.add.Call(ctx, a, name, addArgs{2, 40})
				if err != nil || got != 42 {
					t.Fatalf("add on %s: %d, %v", name, got, err)
				}
				who, err := c.f.whoami.Call(ctx, a, name, struct{}{})
				if err != nil || who != name {
					t.Fatalf("whoami on %s: %q, %v", name, who, err)
				}
			}
			// Many calls in flight from every worker to every other.
			var futs []*rpc.Future[int]
			var want []int
			for i := range 200 {
				from := c.agents[i%3]
				to := fmt.Sprintf("worker%d", (i+1)%3)
				futs = append(futs, c.f.add.Go(ctx, from, to, addArgs{i, i}), c.f.slowAdd.Go(ctx, from, to, addArgs{i, 1}))
				want = append(want, 2*i, i+1)
			}
			got, err := rpc.WaitAll(ctx, futs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("call %d: %d, want %d", i, got[i], want[i])
				}
			}
			// A tensor there and back.
			x := tensor.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)
			y, err := c.f.scale.Call(ctx, a, "worker2", scaleArgs{x, 0.5})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(y.Shape()) != "[2 2]" || fmt.Sprint(y.Float32s()) != "[0.5 1 1.5 2]" {
				t.Fatalf("scale: %v %v", y.Shape(), y.Float32s())
			}
		})
	}
}

func TestErrors(t *testing.T) {
	c := start(t, 2, transport.Faults{}, rpc.Options{MaxMessage: 1 << 16})
	ctx := ctx(t)
	a := c.agents[0]

	_, err := c.f.fail.Call(ctx, a, "worker1", "disk full")
	var re *rpc.RemoteError
	var ce *rpc.CallError
	if !errors.As(err, &re) || re.Worker != "worker1" || re.Function != "fail" || re.Message != "disk full" || re.Panic || !errors.As(err, &ce) {
		t.Fatalf("a returned error: %v", err)
	}

	_, err = c.f.boom.Call(ctx, a, "worker1", 1)
	if !errors.As(err, &re) || !re.Panic || !strings.Contains(re.Message, "nil map") {
		t.Fatalf("a panic: %v", err)
	}
	// The worker that panicked still serves.
	if got, err := c.f.add.Call(ctx, a, "worker1", addArgs{1, 1}); err != nil || got != 2 {
		t.Fatalf("after the panic: %d %v", got, err)
	}

	_, err = rpc.Func[int, int]("nope").Call(ctx, a, "worker1", 1)
	if !errors.Is(err, rpc.ErrUnknownFunction) || !strings.Contains(err.Error(), "worker1") || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown function: %v", err)
	}
	_, err = rpc.Func[string, int]("add").Call(ctx, a, "worker1", "x")
	if !errors.Is(err, rpc.ErrTypeMismatch) || !strings.Contains(err.Error(), "add") {
		t.Fatalf("argument type mismatch: %v", err)
	}
	_, err = rpc.Func[addArgs, string]("add").Call(ctx, a, "worker1", addArgs{})
	if !errors.Is(err, rpc.ErrTypeMismatch) {
		t.Fatalf("result type mismatch: %v", err)
	}
	_, err = c.f.add.Call(ctx, a, "worker9", addArgs{})
	if !errors.Is(err, rpc.ErrUnknownWorker) {
		t.Fatalf("unknown worker: %v", err)
	}
	_, err = c.f.echo.Call(ctx, a, "worker1", make([]byte, 1<<17))
	if !errors.Is(err, rpc.ErrTooLarge) || !strings.Contains(err.Error(), "worker1") {
		t.Fatalf("oversized request: %v", err)
	}
	// A call that outlives its deadline fails with it, and the callee's
	// context ends too.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = c.f.sleep.Call(short, a, "worker1", time.Hour)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout: %v", err)
	}
}

func TestWorkerDeath(t *testing.T) {
	c := start(t, 3, transport.Faults{}, rpc.Options{})
	ctx := ctx(t)
	a := c.agents[0]
	var futs []*rpc.Future[string]
	for range 10 {
		futs = append(futs, c.f.sleep.Go(ctx, a, "worker2", time.Hour))
	}
	time.Sleep(10 * time.Millisecond)
	begin := time.Now()
	c.mesh.Kill(2)
	for _, f := range futs {
		_, err := f.Wait(ctx)
		var wd *rpc.WorkerDownError
		if !errors.As(err, &wd) || wd.Worker != "worker2" || wd.Rank != 2 {
			t.Fatalf("pending call to a dead worker: %v", err)
		}
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Fatalf("failing the pending calls took %v", d)
	}
	// Later calls fail at once; calls to the living still work.
	if _, err := c.f.add.Call(ctx, a, "worker2", addArgs{}); !errors.As(err, new(*rpc.WorkerDownError)) {
		t.Fatalf("call to a dead worker: %v", err)
	}
	if got, err := c.f.add.Call(ctx, a, "worker1", addArgs{3, 4}); err != nil || got != 7 {
		t.Fatalf("call to a living worker: %d %v", got, err)
	}
}

// TestGracefulShutdown: workers that call Shutdown early keep serving
// until the last worker's calls are done; then all stop together.
func TestGracefulShutdown(t *testing.T) {
	c := start(t, 3, transport.Faults{Seed: 3, MaxDelay: 500 * time.Microsecond}, rpc.Options{})
	ctx := ctx(t)
	errs := make([]error, 3)
	calls := 0
	var wg sync.WaitGroup
	for r, a := range c.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r == 1 {
				// Still working while the others are already in Shutdown.
				end := time.Now().Add(100 * time.Millisecond)
				for time.Now().Before(end) {
					if got, err := c.f.slowAdd.Call(ctx, a, "worker2", addArgs{calls, 1}); err != nil || got != calls+1 {
						errs[r] = fmt.Errorf("call %d during the others' shutdown: %d, %v", calls, got, err)
						return
					}
					calls++
				}
			}
			errs[r] = a.Shutdown(ctx, true)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", r, err)
		}
	}
	if calls < 5 {
		t.Errorf("only %d calls made during the others' shutdown", calls)
	}
	// After shutdown, calls fail with ErrShutdown.
	if _, err := c.f.add.Call(ctx, c.agents[1], "worker2", addArgs{}); !errors.Is(err, rpc.ErrShutdown) {
		t.Fatalf("call after shutdown: %v", err)
	}
}

func TestShutdownFailures(t *testing.T) {
	t.Run("worker-never-comes", func(t *testing.T) {
		c := start(t, 2, transport.Faults{}, rpc.Options{})
		short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		err := c.agents[0].Shutdown(short, true)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not all reach Shutdown") {
			t.Fatalf("graceful shutdown without the other worker: %v", err)
		}
	})
	t.Run("worker-dies", func(t *testing.T) {
		c := start(t, 3, transport.Faults{}, rpc.Options{})
		ctx := ctx(t)
		errc := make(chan error, 1)
		go func() { errc <- c.agents[0].Shutdown(ctx, true) }()
		time.Sleep(20 * time.Millisecond)
		c.mesh.Kill(2)
		select {
		case err := <-errc:
			var wd *rpc.WorkerDownError
			if !errors.As(err, &wd) || wd.Worker != "worker2" {
				t.Fatalf("graceful shutdown when a worker dies: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("graceful shutdown hangs after a worker died")
		}
	})
	t.Run("not-graceful", func(t *testing.T) {
		c := start(t, 2, transport.Faults{}, rpc.Options{})
		ctx := ctx(t)
		f := c.f.sleep.Go(ctx, c.agents[0], "worker1", time.Hour)
		time.Sleep(10 * time.Millisecond)
		if err := c.agents[0].Shutdown(ctx, false); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Wait(ctx); !errors.Is(err, rpc.ErrShutdown) {
			t.Fatalf("pending call at shutdown: %v", err)
		}
		// The other worker's calls to it are refused, not left hanging.
		if _, err := c.f.add.Call(ctx, c.agents[1], "worker0", addArgs{}); !errors.Is(err, rpc.ErrShutdown) {
			t.Fatalf("call to a shut-down worker: %v", err)
		}
	})
}
