package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/internal/wire"
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

// TestCallTimeout: a call that outlives its ctx's deadline, or the
// agent's Options.Timeout, fails with a *CallError naming the worker and
// the function that wraps context.DeadlineExceeded; so does a method's
// call, and ToHere; a canceled ctx's call wraps context.Canceled.
func TestCallTimeout(t *testing.T) {
	c := start(t, 2, transport.Faults{}, rpc.Options{Timeout: 50 * time.Millisecond})
	a := c.agents[0]
	check := func(what, fn string, err, cause error) {
		t.Helper()
		var ce *rpc.CallError
		if !errors.As(err, &ce) || ce.Worker != "worker1" || ce.Function != fn || !errors.Is(err, cause) {
			t.Errorf("%s: %v (%T), want a *CallError of %s on worker1 wrapping %v", what, err, err, fn, cause)
		}
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.f.sleep.Call(short, a, "worker1", time.Second)
	check("ctx's deadline", "sleep", err, context.DeadlineExceeded)
	_, err = c.f.sleep.Call(context.Background(), a, "worker1", time.Second)
	check("Options.Timeout", "sleep", err, context.DeadlineExceeded)
	// A deadline far off, so that the agent's 50 ms do not bound the call
	// and only the cancel ends it, however late the caller runs.
	canceled, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	time.AfterFunc(20*time.Millisecond, cancel2)
	_, err = c.f.sleep.Call(canceled, a, "worker1", time.Minute)
	check("a canceled ctx", "sleep", err, context.Canceled)

	slowGet := func(ctx context.Context, v int, d time.Duration) (int, error) {
		select {
		case <-time.After(d):
			return v, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	slow, err := rpc.RegisterMethod(c.agents[1], "slowGet", slowGet)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := c.f.add.Remote(context.Background(), a, "worker1", addArgs{1, 0})
	if err != nil {
		t.Fatal(err)
	}
	short2, cancel3 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel3()
	_, err = slow.Call(short2, a, ref, time.Second)
	check("a method's call", "slowGet", err, context.DeadlineExceeded)
	ref.Release()

	late, err := c.f.sleep.Remote(context.Background(), a, "worker1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	short3, cancel4 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel4()
	_, err = late.ToHere(short3)
	check("ToHere", "ToHere", err, context.DeadlineExceeded)
	late.Release()
}

// picky is an argument that refuses odd values as it arrives: a policy
// of the receiver's, as distautograd's refusal of a Var outside its
// context is.
type picky struct{ N uint64 }

func (p *picky) EncodeWire(e *wire.Encoder) error { e.Uvarint(p.N); return nil }

func (p *picky) DecodeWire(d *wire.Decoder) error {
	n, err := d.Uvarint()
	if err != nil {
		return err
	}
	if n%2 == 1 {
		return fmt.Errorf("picky: %d is odd; send even numbers", n)
	}
	p.N = n
	return nil
}

// brittle is an argument whose bytes never decode.
type brittle struct{}

func (brittle) MarshalBinary() ([]byte, error) { return []byte{1}, nil }
func (*brittle) UnmarshalBinary([]byte) error  { return errors.New("brittle: bad bytes") }

// TestRefusedVersusMalformed: an argument or a result that decodes but
// that its receiver refuses fails with ErrRefused, and one whose bytes do
// not decode with ErrMalformed; neither runs the function.
func TestRefusedVersusMalformed(t *testing.T) {
	var ran atomic.Int64
	var takePicky rpc.Fn[*picky, int]
	var givePicky rpc.Fn[uint64, *picky]
	var takeBrittle rpc.Fn[brittle, int]
	c := startWith(t, 2, transport.Faults{}, rpc.Options{}, func(_ int, reg *rpc.Registry) {
		takePicky, _ = rpc.Register(reg, "takePicky", func(_ context.Context, p *picky) (int, error) { ran.Add(1); return int(p.N), nil })
		givePicky, _ = rpc.Register(reg, "givePicky", func(_ context.Context, n uint64) (*picky, error) { return &picky{n}, nil })
		takeBrittle, _ = rpc.Register(reg, "takeBrittle", func(context.Context, brittle) (int, error) { ran.Add(1); return 0, nil })
	})
	ctx := ctx(t)
	a := c.agents[0]
	if n, err := takePicky.Call(ctx, a, "worker1", &picky{4}); err != nil || n != 4 {
		t.Fatalf("an even argument: %d %v", n, err)
	}
	ran.Store(0)
	refused := func(what string, err error, who string) {
		t.Helper()
		var ce *rpc.CallError
		if !errors.Is(err, rpc.ErrRefused) || errors.Is(err, rpc.ErrMalformed) || !errors.As(err, &ce) ||
			!strings.Contains(err.Error(), "odd; send even") || !strings.Contains(err.Error(), who+" would not take") {
			t.Errorf("%s: %v, want ErrRefused by %s", what, err, who)
		}
	}
	_, err := takePicky.Call(ctx, a, "worker1", &picky{3})
	refused("an odd argument", err, "worker1")
	_, err = givePicky.Call(ctx, a, "worker1", 5)
	refused("an odd result", err, "worker0")
	_, err = takeBrittle.Call(ctx, a, "worker1", brittle{})
	if !errors.Is(err, rpc.ErrMalformed) || errors.Is(err, rpc.ErrRefused) {
		t.Errorf("an argument that does not decode: %v, want ErrMalformed", err)
	}
	if ran.Load() != 0 {
		t.Errorf("refused and malformed arguments ran the function %d times", ran.Load())
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
				// Still working while the others are already in Shutdown:
				// for 100 ms, and ten calls however slow the machine (a
				// count of calls in 100 ms fell to 3 under load).
				end := time.Now().Add(100 * time.Millisecond)
				for calls < 10 || time.Now().Before(end) {
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

// shutdownEach runs a graceful Shutdown with ctx on each of agents at
// once and returns their errors, failing t if any has not returned
// within limit.
func shutdownEach(t *testing.T, ctx context.Context, limit time.Duration, agents ...*rpc.Agent) []error {
	t.Helper()
	errs := make([]error, len(agents))
	done := make(chan int, len(agents))
	for i, a := range agents {
		go func() { errs[i] = a.Shutdown(ctx, true); done <- i }()
	}
	timeout := time.After(limit)
	for range agents {
		select {
		case <-done:
		case <-timeout:
			t.Fatalf("a graceful Shutdown has not returned %v after it began", limit)
		}
	}
	return errs
}

// wantShutdownError checks that err is a *ShutdownError of self naming
// worker rank as the one that kept the job from agreeing.
func wantShutdownError(t *testing.T, err error, self string, rank int) *rpc.ShutdownError {
	t.Helper()
	var se *rpc.ShutdownError
	if !errors.As(err, &se) || se.Self != self || se.Rank != rank || se.Worker != fmt.Sprintf("worker%d", rank) {
		t.Fatalf("%s: graceful shutdown: %v, want a *rpc.ShutdownError naming worker%d", self, err, rank)
	}
	if msg := err.Error(); !strings.Contains(msg, "graceful shutdown of "+self) || !strings.Contains(msg, fmt.Sprintf("worker%d (rank %d)", rank, rank)) {
		t.Fatalf("%s: the error does not name the operation and the worker: %v", self, err)
	}
	return se
}

// TestShutdownWorkerDeadBefore is issue 27's first case: a worker died
// before the others called Shutdown with a ctx that never ends. Every
// living worker's Shutdown fails at once, naming it, with a
// *WorkerDownError inside.
func TestShutdownWorkerDeadBefore(t *testing.T) {
	c := start(t, 3, transport.Faults{}, rpc.Options{})
	c.mesh.Kill(2)
	time.Sleep(20 * time.Millisecond)
	errs := shutdownEach(t, context.Background(), 5*time.Second, c.agents[0], c.agents[1])
	for r, err := range errs {
		wantShutdownError(t, err, fmt.Sprintf("worker%d", r), 2)
		var wd *rpc.WorkerDownError
		if !errors.As(err, &wd) || wd.Worker != "worker2" || wd.Rank != 2 {
			t.Fatalf("worker%d: %v, want a *WorkerDownError for worker2 inside", r, err)
		}
		if !strings.Contains(err.Error(), "restart the job") {
			t.Fatalf("worker%d: the error names no remedy: %v", r, err)
		}
	}
}

// TestShutdownLateWorkerNamesTheDead: a worker that reaches Shutdown only
// after the leader gave up on a dead worker and left names the dead one,
// not the leader (seen under load in TestMultiProcessShutdownPeerGone:
// both were down by then, and the lowest rank was named).
func TestShutdownLateWorkerNamesTheDead(t *testing.T) {
	c := start(t, 3, transport.Faults{}, rpc.Options{})
	c.mesh.Kill(2)
	time.Sleep(20 * time.Millisecond)
	wantShutdownError(t, shutdownEach(t, context.Background(), 5*time.Second, c.agents[0])[0], "worker0", 2)
	c.mesh.Endpoints[0].Close()        // the leader leaves, as its own group would on Destroy
	time.Sleep(100 * time.Millisecond) // worker1 sees it go
	err := shutdownEach(t, context.Background(), 5*time.Second, c.agents[1])[0]
	wantShutdownError(t, err, "worker1", 2)
}

// TestShutdownWorkerStopped is issue 27's second case: a worker is
// stopped (as by SIGSTOP: its connections stay up, it says nothing).
// The leader's Shutdown, with a ctx that never ends, fails once the
// worker has answered nothing for Options.Timeout, naming it; the other
// worker, waiting for a verdict from a leader that is alive, learns it
// from the leader and fails naming the same worker.
func TestShutdownWorkerStopped(t *testing.T) {
	const timeout = 500 * time.Millisecond
	c := start(t, 3, transport.Faults{}, rpc.Options{Timeout: timeout})
	c.mesh.Partition(2, 0)
	c.mesh.Partition(2, 1)
	begin := time.Now()
	errs := shutdownEach(t, context.Background(), 10*time.Second, c.agents[0], c.agents[1])
	took := time.Since(begin)
	for r, err := range errs {
		wantShutdownError(t, err, fmt.Sprintf("worker%d", r), 2)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Options.Timeout") {
			t.Fatalf("worker%d: %v, want the Options.Timeout's deadline", r, err)
		}
	}
	if !strings.Contains(errs[1].Error(), "worker0 found that worker2") {
		t.Fatalf("worker1: %v, want it to say that the leader found it", errs[1])
	}
	if took < timeout {
		t.Fatalf("the shutdowns failed after %v, before the worker had been silent for Options.Timeout (%v)", took, timeout)
	}
	t.Logf("%v after it began: %v", took, errs[0])
}

// TestShutdownLeaderStopped: the leader is stopped; every other worker's
// Shutdown fails once it has answered nothing for Options.Timeout, naming
// it.
func TestShutdownLeaderStopped(t *testing.T) {
	c := start(t, 3, transport.Faults{}, rpc.Options{Timeout: 200 * time.Millisecond})
	c.mesh.Partition(0, 1)
	c.mesh.Partition(0, 2)
	errs := shutdownEach(t, context.Background(), 10*time.Second, c.agents[1], c.agents[2])
	for i, err := range errs {
		wantShutdownError(t, err, fmt.Sprintf("worker%d", i+1), 0)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("worker%d: %v", i+1, err)
		}
	}
}

// TestShutdownWaitsForSlowWorker: a worker that reaches Shutdown long
// after the others (several times Options.Timeout), but is alive all
// along, is waited for: the watch on the others fails only the silent.
func TestShutdownWaitsForSlowWorker(t *testing.T) {
	c := start(t, 3, transport.Faults{}, rpc.Options{Timeout: 400 * time.Millisecond})
	errc := make(chan error, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond) // still working
		errc <- c.agents[2].Shutdown(context.Background(), true)
	}()
	for r, err := range shutdownEach(t, context.Background(), 10*time.Second, c.agents[0], c.agents[1]) {
		if err != nil {
			t.Errorf("worker%d: %v", r, err)
		}
	}
	if err := <-errc; err != nil {
		t.Errorf("worker2: %v", err)
	}
}

// TestShutdownAfterNotGraceful: a worker that stopped at once
// (Shutdown(ctx, false)) fails the others' graceful Shutdown naming it,
// without waiting for Options.Timeout.
func TestShutdownAfterNotGraceful(t *testing.T) {
	c := start(t, 3, transport.Faults{}, rpc.Options{Timeout: time.Hour})
	if err := c.agents[2].Shutdown(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	errs := shutdownEach(t, context.Background(), 10*time.Second, c.agents[0], c.agents[1])
	for r, err := range errs {
		wantShutdownError(t, err, fmt.Sprintf("worker%d", r), 2)
	}
}
