package dist_test

// Real multi-process tests: the test binary re-executes itself as worker
// processes (TestMultiProcessHelper with GODIST_TEST_CHILD=1), which meet
// through env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GODIST_TOKEN)
// over loopback TCP.
//
// TestMultiProcessKill runs 5 seeds by default (2 under -race), and
// TestMultiProcessKillThenExit 10 (3); GODIST_KILL_SEEDS=100 go test -run
// 'TestMultiProcessKill$' ./dist/ runs the 100 that the issue asks for.
// Every multi-process test is skipped with -short.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/store"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

const childEnv = "GODIST_TEST_CHILD"

// TestMultiProcessHelper is the worker process; it does nothing in a
// normal test run.
func TestMultiProcessHelper(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		t.Skip("worker of the multi-process tests; runs only when " + childEnv + "=1")
	}
	var err error
	switch mode := os.Getenv("GODIST_TEST_MODE"); mode {
	case "collectives":
		err = childCollectives(dist.Options{Rank: -1, Timeout: 30 * time.Second})
	case "zero-options":
		err = childCollectives(dist.Options{})
	case "kill":
		err = childKill(true)
	case "kill-exit":
		err = childKill(false)
	case "duplicate":
		err = childDuplicate()
	case "loop-until-timeout":
		err = childLoopUntilTimeout()
	case "die-in-init":
		err = childDieInInit()
	case "job":
		err = childJob()
	default:
		err = fmt.Errorf("unknown GODIST_TEST_MODE %q", mode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "WORKER FAILED (rank %s): %v\n", os.Getenv("RANK"), err)
		os.Exit(3)
	}
}

// syncBuffer is a bytes.Buffer that a test may read while a process's
// output is still being written to it (os/exec copies stderr in a
// goroutine of its own until Wait returns).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) WriteString(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.WriteString(s)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// worker is one child process.
type worker struct {
	rank   int
	cmd    *exec.Cmd
	stdout *syncBuffer // every line so far
	stderr syncBuffer
	lines  chan string // stdout lines as they come
	stdin  io.WriteCloser
	done   chan error
}

// startWorkers starts world workers in the given mode.
func startWorkers(t *testing.T, world int, mode string, extra ...string) []*worker {
	t.Helper()
	port := freePort(t)
	tok := make([]byte, 16)
	rand.Read(tok)
	var ws []*worker
	for r := range world {
		env := append(os.Environ(),
			"GODIST_TEST_MODE="+mode,
			"RANK="+strconv.Itoa(r),
			"WORLD_SIZE="+strconv.Itoa(world),
			"LOCAL_RANK="+strconv.Itoa(r),
			"MASTER_ADDR=127.0.0.1",
			"MASTER_PORT="+strconv.Itoa(port),
			"GODIST_TOKEN="+hex.EncodeToString(tok),
			"GODIST_RUN_ID=mp-"+mode,
			"GODIST_HOST=127.0.0.1",
		)
		ws = append(ws, startChild(t, r, append(env, extra...)))
	}
	return ws
}

// startChild starts one worker process with the environment env (and
// childEnv); the test's end kills it.
func startChild(t *testing.T, rank int, env []string) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMultiProcessHelper$", "-test.count=1", "-test.timeout=90s")
	cmd.Env = append(env, childEnv+"=1")
	w := &worker{rank: rank, cmd: cmd, stdout: &syncBuffer{}, lines: make(chan string, 1024), done: make(chan error, 1)}
	cmd.Stderr = &w.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.stdout.WriteString(sc.Text() + "\n")
			select {
			case w.lines <- sc.Text():
			default:
			}
		}
		close(w.lines)
		w.done <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	return w
}

// waitWorkers waits for every worker to exit (bounded) and returns the
// failures, each with the worker's output.
func waitWorkers(ws []*worker, limit time.Duration) []error {
	deadline := time.After(limit)
	var errs []error
	for _, w := range ws {
		select {
		case err := <-w.done:
			if err != nil {
				errs = append(errs, fmt.Errorf("rank %d: %v\nstdout:\n%s\nstderr:\n%s", w.rank, err, w.stdout.String(), w.stderr.String()))
			}
		case <-deadline:
			for _, w := range ws {
				w.cmd.Process.Kill()
			}
			errs = append(errs, fmt.Errorf("rank %d did not exit within %v\nstdout:\n%s\nstderr:\n%s", w.rank, limit, w.stdout.String(), w.stderr.String()))
			deadline = time.After(5 * time.Second)
		}
	}
	return errs
}

// TestMultiProcessCollectives runs every collective across 4 processes,
// connected at Init (GODIST_CONNECT=init) and on first use (the default).
func TestMultiProcessCollectives(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes")
	}
	for _, c := range []struct{ name, env string }{{"eager", "GODIST_CONNECT=init"}, {"ondemand", "GODIST_CONNECT=ondemand"}} {
		t.Run(c.name, func(t *testing.T) {
			ws := startWorkers(t, 4, "collectives", c.env)
			for _, err := range waitWorkers(ws, 60*time.Second) {
				t.Error(err)
			}
		})
	}
}

// TestMultiProcessInitZeroOptions: dist.Init(ctx, dist.Options{}) takes the
// rank and world size from the environment ("Zero fields are filled from
// the environment").
func TestMultiProcessInitZeroOptions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes")
	}
	ws := startWorkers(t, 4, "zero-options", "GODIST_TEST_QUICK=1")
	for _, err := range waitWorkers(ws, 30*time.Second) {
		t.Error(err)
	}
}

// childCollectives is a worker of TestMultiProcessCollectives: it checks
// every collective's result on this rank.
func childCollectives(opt dist.Options) error {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	if os.Getenv("GODIST_TEST_QUICK") == "1" {
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(ctx, 5*time.Second)
		defer c2()
	}
	g, err := dist.Init(ctx, opt)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	defer g.Destroy()
	envRank, _ := strconv.Atoi(os.Getenv("RANK"))
	world := 4
	me := g.Rank()
	if me != envRank || g.Size() != world {
		return fmt.Errorf("Init gave rank %d of %d; RANK=%d WORLD_SIZE=%d", me, g.Size(), envRank, world)
	}
	if os.Getenv("GODIST_TEST_QUICK") == "1" {
		x := tensor.Full(tensor.Int64, float64(me), 10)
		if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
			return err
		}
		if err := expect(x, func(int) float64 { return 6 }, "all_reduce"); err != nil {
			return err
		}
		return g.Barrier(ctx)
	}
	// broadcast, every root, small and chained.
	for root := range world {
		for _, n := range []int{0, 1, 1000, 300000} {
			b := iota32(float32(me*1000), n)
			if err := g.Broadcast(ctx, b, root); err != nil {
				return fmt.Errorf("broadcast root %d n %d: %w", root, n, err)
			}
			if err := sameBytes(fmt.Sprintf("broadcast root %d n %d", root, n), b.Bytes(), iota32(float32(root*1000), n).Bytes()); err != nil {
				return err
			}
		}
	}
	// reduce
	for root := range world {
		x := input(tensor.Float64, dist.Sum, me, 1001)
		if err := g.Reduce(ctx, x, root, dist.Sum); err != nil {
			return err
		}
		want := func(i int) float64 { return reduceRef(dist.Sum, world, i) }
		if me != root {
			want = func(i int) float64 { return value(dist.Sum, me, i) }
		}
		if err := expect(x, want, fmt.Sprintf("reduce root %d", root)); err != nil {
			return err
		}
	}
	// all_reduce with every op, small, medium and ring sizes.
	for _, op := range allOps {
		d := tensor.Int64
		if op == dist.Avg || op == dist.Max {
			d = tensor.Float32
		}
		for _, n := range []int{1, 999, 70000, 1<<19 + 5} {
			if n > 1000 && op != dist.Sum && op != dist.Max && op != dist.BXor {
				continue
			}
			x := input(d, op, me, n)
			if err := g.AllReduce(ctx, x, op); err != nil {
				return fmt.Errorf("all_reduce %v n %d: %w", op, n, err)
			}
			if err := expect(x, func(i int) float64 { return reduceRef(op, world, i) }, fmt.Sprintf("all_reduce %v %v n %d", d, op, n)); err != nil {
				return err
			}
		}
	}
	// all_reduce async, several in flight.
	var works []*dist.Work
	var xs []*tensor.Tensor
	for k := range 4 {
		x := tensor.Full(tensor.Float32, float64(k+me), 50000)
		xs = append(xs, x)
		works = append(works, g.AllReduceAsync(x, dist.Sum))
	}
	for k, w := range works {
		if err := w.Wait(ctx); err != nil {
			return err
		}
		if err := expect(xs[k], func(int) float64 { return float64(4*k + 6) }, "async all_reduce"); err != nil {
			return err
		}
	}
	// gather, scatter
	for root := range world {
		in := input(tensor.Int32, dist.Sum, me, 77)
		var outs []*tensor.Tensor
		if me == root {
			for range world {
				outs = append(outs, tensor.New(tensor.Int32, 77))
			}
		}
		if err := g.Gather(ctx, in, outs, root); err != nil {
			return err
		}
		for r, o := range outs {
			if err := expect(o, func(i int) float64 { return value(dist.Sum, r, i) }, fmt.Sprintf("gather root %d slot %d", root, r)); err != nil {
				return err
			}
		}
		var ins []*tensor.Tensor
		if me == root {
			for r := range world {
				ins = append(ins, input(tensor.Int32, dist.Sum, 50+r, 33))
			}
		}
		out := tensor.New(tensor.Int32, 33)
		if err := g.Scatter(ctx, out, ins, root); err != nil {
			return err
		}
		if err := expect(out, func(i int) float64 { return value(dist.Sum, 50+me, i) }, fmt.Sprintf("scatter root %d", root)); err != nil {
			return err
		}
	}
	// all_gather (list) and all_gather_into_tensor
	for _, n := range []int{3, 40000} {
		outs := make([]*tensor.Tensor, world)
		for i := range outs {
			outs[i] = tensor.New(tensor.Float32, n)
		}
		if err := g.AllGather(ctx, outs, iota32(float32(10*me), n)); err != nil {
			return err
		}
		for r, o := range outs {
			if err := sameBytes(fmt.Sprintf("all_gather slot %d", r), o.Bytes(), iota32(float32(10*r), n).Bytes()); err != nil {
				return err
			}
		}
		all := tensor.New(tensor.Float32, n*world)
		if err := g.AllGatherIntoTensor(ctx, all, iota32(float32(10*me), n)); err != nil {
			return err
		}
		for r := range world {
			if err := sameBytes(fmt.Sprintf("all_gather_into_tensor part %d", r), all.Bytes()[r*n*4:(r+1)*n*4], iota32(float32(10*r), n).Bytes()); err != nil {
				return err
			}
		}
	}
	// reduce_scatter and reduce_scatter_tensor
	for _, n := range []int{5, 30000} {
		in := input(tensor.Float32, dist.Sum, me, n*world)
		out := tensor.New(tensor.Float32, n)
		if err := g.ReduceScatterTensor(ctx, out, in, dist.Sum); err != nil {
			return err
		}
		if err := expect(out, func(i int) float64 { return reduceRef(dist.Sum, world, me*n+i) }, "reduce_scatter_tensor"); err != nil {
			return err
		}
		var ins []*tensor.Tensor
		for c := range world {
			ins = append(ins, in.Narrow(0, c*n, n).Contiguous())
		}
		out2 := tensor.New(tensor.Float32, n)
		if err := g.ReduceScatter(ctx, out2, ins, dist.Max); err != nil {
			return err
		}
		if err := expect(out2, func(i int) float64 { return reduceRef(dist.Max, world, me*n+i) }, "reduce_scatter max"); err != nil {
			return err
		}
	}
	// all_to_all with per-pair sizes, all_to_all_single with uneven splits.
	ins, outs := make([]*tensor.Tensor, world), make([]*tensor.Tensor, world)
	for d := range world {
		ins[d] = tensor.Full(tensor.Int64, float64(100*me+d), d+1+me)
		outs[d] = tensor.New(tensor.Int64, me+1+d)
	}
	if err := g.AllToAll(ctx, outs, ins); err != nil {
		return err
	}
	for s, o := range outs {
		if err := expect(o, func(int) float64 { return float64(100*s + me) }, fmt.Sprintf("all_to_all from %d", s)); err != nil {
			return err
		}
	}
	rows := func(s, d int) int { return (s*3 + d) % 4 } // some zero
	var inSplits, outSplits []int
	var inVals []float32
	for d := range world {
		inSplits = append(inSplits, rows(me, d))
		for range rows(me, d) * 2 {
			inVals = append(inVals, float32(10*me+d))
		}
	}
	total := 0
	for s := range world {
		outSplits = append(outSplits, rows(s, me))
		total += rows(s, me)
	}
	a2aOut := tensor.New(tensor.Float32, total, 2)
	if err := g.AllToAllSingle(ctx, a2aOut, tensor.FromFloat32(inVals, len(inVals)/2, 2), outSplits, inSplits); err != nil {
		return fmt.Errorf("all_to_all_single: %w", err)
	}
	var want []float64
	for s := range world {
		for range rows(s, me) * 2 {
			want = append(want, float64(10*s+me))
		}
	}
	if err := expect(a2aOut, func(i int) float64 { return want[i] }, "all_to_all_single"); err != nil {
		return err
	}
	// barrier, monitored barrier
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := g.MonitoredBarrier(ctx, 10*time.Second, true); err != nil {
		return fmt.Errorf("monitored_barrier: %w", err)
	}
	// send/recv around the ring, and any-source to rank 0.
	next, prev := (me+1)%world, (me+world-1)%world
	sw := g.ISend(iota32(float32(me), 100000), next, 9)
	rx := tensor.New(tensor.Float32, 100000)
	if src, err := g.Recv(ctx, rx, prev, 9); err != nil || src != prev {
		return fmt.Errorf("recv from %d: source %d, %v", prev, src, err)
	}
	if err := sw.Wait(ctx); err != nil {
		return err
	}
	if err := sameBytes("ring send/recv", rx.Bytes(), iota32(float32(prev), 100000).Bytes()); err != nil {
		return err
	}
	if me != 0 {
		if err := g.Send(ctx, tensor.FromInt64([]int64{int64(me)}), 0, 1); err != nil {
			return err
		}
	} else {
		var got []int
		for range world - 1 {
			x := tensor.New(tensor.Int64, 1)
			src, err := g.Recv(ctx, x, dist.AnySource, 1)
			if err != nil {
				return err
			}
			if int64(src) != x.Int64s()[0] {
				return fmt.Errorf("any-source recv: source %d, message %d", src, x.Int64s()[0])
			}
			got = append(got, src)
		}
		slices.Sort(got)
		if !slices.Equal(got, []int{1, 2, 3}) {
			return fmt.Errorf("any-source receives from %v", got)
		}
	}
	// object collectives
	objs, err := dist.AllGatherObject(ctx, g, objFor(me, 1000*me))
	if err != nil {
		return err
	}
	for r, o := range objs {
		if !reflect.DeepEqual(o, objFor(r, 1000*r)) {
			return fmt.Errorf("all_gather_object: object of rank %d differs", r)
		}
	}
	var bo objPayload
	if me == 2 {
		bo = objFor(2, 5)
	}
	if err := dist.BroadcastObject(ctx, g, &bo, 2); err != nil {
		return err
	}
	if !reflect.DeepEqual(bo, objFor(2, 5)) {
		return errors.New("broadcast_object differs")
	}
	// a subgroup, then the last barrier.
	sub, err := g.Split(ctx, me%2, me)
	if err != nil {
		return err
	}
	y := tensor.Full(tensor.Int64, float64(me), 4)
	if err := sub.AllReduce(ctx, y, dist.Sum); err != nil {
		return err
	}
	if err := expect(y, func(int) float64 { return float64(me%2*2 + 2) }, "split all_reduce"); err != nil {
		return err
	}
	return g.Barrier(ctx)
}

// childKill is a worker of TestMultiProcessKill: it all-reduces in a loop
// until the group fails, and reports on stdout:
//
//	READY <rank>
//	ERROR <rank> <dead rank or -1> <unix nanos> <error text quoted>
//
// With linger it then waits for the parent to close its stdin before it
// leaves (so that no survivor's goodbye reaches the others before they
// have seen the death themselves); without, it exits at once, as a
// training script would.
func childKill(linger bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := dist.Init(ctx, dist.Options{Rank: -1, Timeout: 20 * time.Second})
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	defer g.Destroy()
	x := tensor.Full(tensor.Float32, 1, 1<<18) // 1 MiB: the ring
	if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
		return err
	}
	fmt.Printf("READY %d\n", g.Rank())
	for {
		if err = g.AllReduce(ctx, x, dist.Sum); err != nil {
			break
		}
	}
	at := time.Now().UnixNano()
	dead := -1
	var re *dist.RankError
	if errors.As(err, &re) {
		dead = re.Rank
	}
	fmt.Printf("ERROR %d %d %d %q\n", g.Rank(), dead, at, err.Error())
	if linger {
		eof := make(chan struct{})
		go func() { io.Copy(io.Discard, os.Stdin); close(eof) }()
		select {
		case <-eof:
		case <-time.After(15 * time.Second):
		}
	}
	return nil
}

// TestMultiProcessKill SIGKILLs one of 4 worker processes in the middle of
// their all-reduce loop; every survivor must report, within 2s, an error
// naming the dead rank.
func TestMultiProcessKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes per seed")
	}
	seeds := 5
	if raceOn {
		seeds = 2
	}
	multiProcessKill(t, "kill", envInt("GODIST_KILL_SEEDS", seeds), syscall.SIGKILL)
}

// TestMultiProcessKillOnDemand is TestMultiProcessKill with connections
// made on first use and no shared memory (GODIST_SHM=0: the ranks of a
// small host connect at Init only for their shared memory), so that
// some pairs never connect: the dead rank's neighbours see its
// connection end, and the others hear of it from them.
func TestMultiProcessKillOnDemand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes per seed")
	}
	multiProcessKill(t, "kill", envInt("GODIST_KILL_SEEDS", 2), syscall.SIGKILL, "GODIST_CONNECT=ondemand", "GODIST_SHM=0")
}

// TestMultiProcessStop SIGSTOPs one of 4 worker processes in the middle
// of their all-reduce loop (issue 29): a stopped process keeps its
// connections open and sends nothing, no FIN, no RST, as a host cut off
// from the network does. Every survivor must report, within its peer
// timeout (1 s here) and a second, an error naming the stopped rank and
// its silence, not wait for the collective's timeout.
func TestMultiProcessStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes per seed")
	}
	multiProcessKill(t, "kill", envInt("GODIST_KILL_SEEDS", 2), syscall.SIGSTOP)
}

// TestMultiProcessKillThenExit: as TestMultiProcessKill, but each survivor
// exits as soon as it has seen the error. The survivors that are slower to
// notice the death must still blame the dead rank, not a survivor that
// left cleanly a moment later.
func TestMultiProcessKillThenExit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes per seed")
	}
	seeds := 10
	if raceOn {
		seeds = 3
	}
	multiProcessKill(t, "kill-exit", envInt("GODIST_KILL_SEEDS", seeds), syscall.SIGKILL)
}

// multiProcessKill runs seeds rounds of 4 workers in mode, one of them sent
// sig (SIGKILL, or SIGSTOP: then the workers' peer timeout is 1 s) in the
// middle of their loop, and checks that every survivor blames it in time.
func multiProcessKill(t *testing.T, mode string, seeds int, sig syscall.Signal, env ...string) {
	const world = 4
	bound, extra, says := 2*time.Second, env, ""
	if sig == syscall.SIGSTOP {
		// The peer timeout and a second: a survivor kept off its CPU
		// starts its count again after the stall (its own silence is not
		// the peer's), so a loaded machine can add a stall's length.
		bound, extra, says = 3*time.Second, append(env, "GODIST_PEER_TIMEOUT=1s"), "not even a heartbeat"
	}
	var slowest time.Duration
	var example string
	var mu sync.Mutex
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		rng := mrand.New(mrand.NewPCG(seed, 7))
		victim := rng.IntN(world)
		delay := time.Duration(rng.Int64N(int64(30 * time.Millisecond)))
		ws := startWorkers(t, world, mode, extra...)
		// Wait until every worker is in its loop.
		ready := time.After(30 * time.Second)
		for _, w := range ws {
		wait:
			for {
				select {
				case l, ok := <-w.lines:
					if !ok {
						errs := waitWorkers(ws, 5*time.Second)
						t.Fatalf("seed %d: rank %d ended before it was ready: %v", seed, w.rank, errs)
					}
					if strings.HasPrefix(l, "READY") {
						break wait
					}
				case <-ready:
					t.Fatalf("seed %d: workers not ready within 30s", seed)
				}
			}
		}
		time.Sleep(delay)
		if err := ws[victim].cmd.Process.Signal(sig); err != nil {
			t.Fatalf("seed %d: %v to rank %d: %v", seed, sig, victim, err)
		}
		killedAt := time.Now()
		for _, w := range ws {
			if w.rank == victim {
				continue
			}
			var line string
			timeout := time.After(10 * time.Second)
		read:
			for {
				select {
				case l, ok := <-w.lines:
					if !ok {
						break read
					}
					if strings.HasPrefix(l, "ERROR") {
						line = l
						break read
					}
				case <-timeout:
					break read
				}
			}
			if line == "" {
				t.Errorf("seed %d (victim %d, delay %v): rank %d reported no error within 10s of the kill; stderr:\n%s", seed, victim, delay, w.rank, w.stderr.String())
				continue
			}
			var rank, dead int
			var at int64
			var text string
			if _, err := fmt.Sscanf(line, "ERROR %d %d %d %q", &rank, &dead, &at, &text); err != nil {
				t.Errorf("seed %d: rank %d: bad line %q: %v", seed, w.rank, line, err)
				continue
			}
			lat := time.Unix(0, at).Sub(killedAt)
			mu.Lock()
			if lat > slowest {
				slowest, example = lat, text
			}
			mu.Unlock()
			if lat > bound {
				t.Errorf("seed %d (victim %d): rank %d noticed after %v: %s", seed, victim, rank, lat, text)
			}
			if dead != victim || !strings.Contains(text, fmt.Sprintf("rank %d", victim)) || !strings.Contains(text, says) {
				t.Errorf("seed %d (victim %d, delay %v): rank %d reported %q (dead rank %d), want a *dist.RankError naming rank %d", seed, victim, delay, rank, text, dead, victim)
			}
		}
		if sig == syscall.SIGSTOP {
			ws[victim].cmd.Process.Kill()
		}
		for _, w := range ws {
			w.stdin.Close()
		}
		for _, err := range waitWorkers(slices.Delete(slices.Clone(ws), victim, victim+1), 20*time.Second) {
			t.Errorf("seed %d: %v", seed, err)
		}
		if t.Failed() {
			t.Fatalf("seed %d failed (victim %d, delay %v)", seed, victim, delay)
		}
	}
	t.Logf("%d seeds; slowest time from %v to a survivor's error: %v: %s", seeds, sig, slowest, example)
}

// childDuplicate is a worker of TestMultiProcessDuplicateRank: the third
// process takes RANK=1 too. A process whose Init fails because its rank
// is taken prints why; the others run a collective.
func childDuplicate() error {
	if os.Getenv("RANK") == "2" {
		os.Setenv("RANK", "1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	g, err := dist.Init(ctx, dist.Options{Rank: -1, Timeout: 20 * time.Second})
	if err != nil {
		var dup *transport.DuplicateRankError
		if !errors.As(err, &dup) {
			return fmt.Errorf("init: %T %w, want a *transport.DuplicateRankError", err, err)
		}
		fmt.Printf("DUPLICATE ms=%d err=%q\n", time.Since(start).Milliseconds(), err.Error())
		return os.WriteFile(os.Getenv("GODIST_TEST_MARKER"), nil, 0o644)
	}
	defer func() {
		// Rank 0 serves the store: keep it until the duplicate has been
		// refused (it may start after the job is done).
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(os.Getenv("GODIST_TEST_MARKER")); err == nil {
				break
			}
		}
		g.Destroy()
	}()
	x := tensor.Full(tensor.Float32, 1, 4)
	if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
		return err
	}
	if x.At(0) != 2 {
		return fmt.Errorf("all_reduce gave %v, want 2", x.At(0))
	}
	fmt.Println("COLLECTIVE-OK")
	return nil
}

// TestMultiProcessDuplicateRank (issue 19, item 8): three processes of a
// two-rank job, two of them with RANK=1. The one that registers second
// fails at once, naming the rank and the other process's address (it
// hung in its first collective before); the other two run the job.
func TestMultiProcessDuplicateRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ws := startWorkers(t, 3, "duplicate", "WORLD_SIZE=2", "GODIST_TEST_MARKER="+filepath.Join(t.TempDir(), "refused"))
	for _, err := range waitWorkers(ws, 40*time.Second) {
		t.Error(err)
	}
	ok, dup := 0, 0
	for _, w := range ws {
		out := w.stdout.String()
		switch {
		case strings.Contains(out, "COLLECTIVE-OK"):
			ok++
		case strings.Contains(out, "DUPLICATE"):
			dup++
			if !strings.Contains(out, "rank 1 is taken") || !strings.Contains(out, "RANK=1") {
				t.Errorf("the duplicate's error: %s", out)
			}
			i := strings.Index(out, "ms=")
			if ms, _ := strconv.Atoi(strings.Fields(out[i+3:])[0]); ms > 5000 {
				t.Errorf("the duplicate failed after %d ms", ms)
			}
			t.Logf("%s", strings.TrimSpace(out))
		}
	}
	if ok != 2 || dup != 1 {
		t.Errorf("%d processes ran the job and %d were refused as duplicates; want 2 and 1", ok, dup)
	}
}

// childDieInInit is a worker of TestMultiProcessDieInInit. The victim
// (GODIST_TEST_VICTIM) reaches the job's store through a wrapper that
// SIGKILLs the process as soon as its Init has published its address
// (GODIST_TEST_DIE_AT=addr), its first shared-memory segment's name
// (shm), or that it mapped rank 0's segment (shm-mapped): at that point
// and no later, however slow the machine (a goroutine watching the store
// from the side could see the key after Init had finished, and missed the
// point on a busy machine). The library knows nothing of it. Every other
// rank reports how its Init ended:
//
//	INIT-OK ms=<ms>
//	INIT-FAILED ms=<ms> err=<error text quoted>
func childDieInInit() error {
	me, _ := strconv.Atoi(os.Getenv("RANK"))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	opts := dist.Options{Rank: -1, Timeout: 20 * time.Second}
	if os.Getenv("GODIST_TEST_VICTIM") == os.Getenv("RANK") {
		tok, _ := hex.DecodeString(os.Getenv("GODIST_TOKEN"))
		st, err := store.Dial(ctx, os.Getenv("MASTER_ADDR")+":"+os.Getenv("MASTER_PORT"),
			store.DialOptions{Token: tok, JobID: os.Getenv("GODIST_RUN_ID"), Rank: me})
		if err != nil {
			return fmt.Errorf("the victim cannot reach the store: %w", err)
		}
		k := &killAfter{Store: st}
		switch at := os.Getenv("GODIST_TEST_DIE_AT"); at {
		case "addr":
			k.key = fmt.Sprintf("transport/once/rank/%d", me)
		case "shm":
			k.key = fmt.Sprintf("transport/shm/seg/%d/0", me)
		case "shm-mapped":
			k.key = fmt.Sprintf("transport/shm/ok/0/%d", me)
		default:
			return fmt.Errorf("unknown GODIST_TEST_DIE_AT %q", at)
		}
		opts.Store = k
	}
	start := time.Now()
	g, err := dist.Init(ctx, opts)
	if err != nil {
		fmt.Printf("INIT-FAILED ms=%d err=%q\n", time.Since(start).Milliseconds(), err.Error())
	} else {
		fmt.Printf("INIT-OK ms=%d\n", time.Since(start).Milliseconds())
	}
	// Stay until the parent has every survivor's line: rank 0 serves the
	// store, and a survivor slower to start than the others must still
	// find it.
	eof := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(eof) }()
	select {
	case <-eof:
	case <-time.After(30 * time.Second):
	}
	if g != nil {
		return g.Destroy()
	}
	return nil
}

// killAfter is a store through which the process SIGKILLs itself right
// after it has written key (by Set or CompareAndSet).
type killAfter struct {
	store.Store
	key string
}

func (k *killAfter) die(key string) {
	if key == k.key {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way; go no further
	}
}

func (k *killAfter) Set(ctx context.Context, key string, value []byte) error {
	err := k.Store.Set(ctx, key, value)
	if err == nil {
		k.die(key)
	}
	return err
}

func (k *killAfter) CompareAndSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	v, err := k.Store.CompareAndSet(ctx, key, expected, desired)
	if err == nil {
		k.die(key)
	}
	return v, err
}

// TestMultiProcessDieInInit (issue 19, items 9 and 10): a rank SIGKILLed
// during Init, right after it published its address, created a
// shared-memory segment or mapped a peer's (connecting at Init), makes every survivor's Init fail
// promptly with an error naming it (Init returned success at its
// deadline, with the peer dead), and leaves no file of the job in
// /dev/shm (segments leaked: 14 files of 16 MB in 20 trials).
func TestMultiProcessDieInInit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes per trial")
	}
	const world = 4
	ats := []string{"addr"}
	if _, err := os.Stat("/dev/shm"); err == nil {
		ats = append(ats, "shm", "shm-mapped")
	}
	for _, at := range ats {
		for victim := 1; victim < world; victim++ { // rank 0 serves the store: its death is the store's
			env := []string{fmt.Sprintf("GODIST_TEST_VICTIM=%d", victim), "GODIST_TEST_DIE_AT=" + at}
			if at != "addr" {
				// The segments' names go through the store only when
				// every pair connects at Init; on demand a pair sets
				// up its memory over its connection.
				env = append(env, "GODIST_CONNECT=init")
			}
			ws := startWorkers(t, world, "die-in-init", env...)
			name := fmt.Sprintf("die at %s, victim %d", at, victim)
			timeout := time.After(40 * time.Second)
			for _, w := range ws {
				if w.rank == victim {
					continue
				}
				var line string
			read:
				for {
					select {
					case l, ok := <-w.lines:
						if !ok {
							break read
						}
						if strings.HasPrefix(l, "INIT-") {
							line = l
							break read
						}
					case <-timeout:
						break read
					}
				}
				var ms int
				var text string
				if _, err := fmt.Sscanf(line, "INIT-FAILED ms=%d err=%q", &ms, &text); err != nil {
					t.Errorf("%s: rank %d: %q, want its Init to fail; stderr:\n%s", name, w.rank, line, w.stderr.String())
					continue
				}
				if !strings.Contains(text, fmt.Sprintf("rank %d ", victim)) || ms > 10000 {
					t.Errorf("%s: rank %d's Init failed after %d ms with %q, want an error naming rank %d well before the 20 s timeout", name, w.rank, ms, text, victim)
				}
				if w.rank == (victim+1)%world {
					t.Logf("%s: rank %d after %d ms: %s", name, w.rank, ms, text)
				}
			}
			for _, w := range ws {
				w.stdin.Close()
			}
			for _, err := range waitWorkers(ws, 40*time.Second) {
				if !strings.HasPrefix(err.Error(), fmt.Sprintf("rank %d: signal: killed", victim)) {
					t.Errorf("%s: %v", name, err)
				}
			}
			if code := ws[victim].cmd.ProcessState.ExitCode(); code != -1 {
				t.Errorf("%s: the victim was not killed (exit %d): %s%s", name, code, ws[victim].stdout.String(), ws[victim].stderr.String())
			}
			for _, w := range ws {
				left, _ := filepath.Glob(fmt.Sprintf("/dev/shm/godist-%d-*", w.cmd.Process.Pid))
				if len(left) > 0 {
					t.Errorf("%s: rank %d left %v in /dev/shm", name, w.rank, left)
					for _, f := range left {
						os.Remove(f)
					}
				}
			}
		}
	}
}

// loopThenStop starts three ranks looping all_reduce with a 7 s timeout,
// waits until each loops, and stops (SIGSTOP) rank victim, which is
// killed when the test ends.
func loopThenStop(t *testing.T, victim int) []*worker {
	t.Helper()
	ws := startWorkers(t, 3, "loop-until-timeout", "GODIST_TIMEOUT=7s")
	for _, w := range ws {
		select {
		case l, ok := <-w.lines:
			if !ok || l != "LOOPING" {
				t.Fatalf("rank %d: %q instead of LOOPING; stderr:\n%s", w.rank, l, w.stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("rank %d did not start looping", w.rank)
		}
	}
	if err := ws[victim].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws[victim].cmd.Process.Kill() })
	return ws
}

// TestMultiProcessTimeoutNamesStoppedStoreHost (issue 27, item 5): three
// ranks loop all_reduce and rank 0, which serves the job's store, is
// stopped (SIGSTOP). No status record can be read then; each survivor's
// TimeoutError says that the store's host, rank 0, stopped responding,
// and its chain ends there (its error file blames rank 0). Before, the
// survivors named the peer their call was blocked on, a live neighbour
// for one of them, and said nothing of the store.
func TestMultiProcessTimeoutNamesStoppedStoreHost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ws := loopThenStop(t, 0)
	for _, w := range ws[1:] {
		select {
		case err := <-w.done:
			out := w.stdout.String()
			if err != nil || !strings.Contains(out, "TIMEOUT") {
				t.Fatalf("rank %d: %v\n%s\n%s", w.rank, err, out, w.stderr.String())
			}
			if !strings.Contains(out, "the job's store, which rank 0 serves, does not answer: rank 0 stopped responding") ||
				!regexp.MustCompile(`chain=\[(\d )*0\]`).MatchString(out) {
				t.Errorf("rank %d's timeout does not name rank 0, the stopped store host:\n%s", w.rank, out)
			}
			t.Logf("rank %d: %s", w.rank, strings.TrimSpace(out))
		case <-time.After(40 * time.Second):
			t.Fatalf("rank %d did not time out", w.rank)
		}
	}
}

// childLoopUntilTimeout is a worker of TestMultiProcessTimeoutNamesStoppedRank:
// it all-reduces until a call fails, and prints the error.
func childLoopUntilTimeout() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g, err := dist.Init(ctx, dist.Options{Rank: -1})
	if err != nil {
		return err
	}
	defer g.Destroy()
	x := tensor.New(tensor.Float32, 2)
	for i := 0; ; i++ {
		if i == 50 {
			fmt.Println("LOOPING")
		}
		err := g.AllReduce(ctx, x, dist.Sum)
		if err == nil {
			time.Sleep(time.Millisecond)
			continue
		}
		var te *dist.TimeoutError
		if !errors.As(err, &te) {
			return fmt.Errorf("all_reduce %d: %T %w, want a *dist.TimeoutError", i, err, err)
		}
		fmt.Printf("TIMEOUT waiting=%v chain=%v err=%q\n", te.Waiting, te.Chain, err.Error())
		// Rank 0 serves the store the others read their explanations
		// from: stay a little (under godist run the launcher would stop
		// the job when the first rank failed).
		time.Sleep(2 * time.Second)
		return nil
	}
}

// TestMultiProcessTimeoutNamesStoppedRank (issue 19, item 11): three
// ranks loop all_reduce and rank 1 is stopped (SIGSTOP). Whichever peer a
// survivor's call was blocked on, its TimeoutError follows the ranks'
// status records to rank 1 and says it stopped reporting; it named only
// the direct peer before, a live rank for some survivors.
func TestMultiProcessTimeoutNamesStoppedRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ws := loopThenStop(t, 1)
	for _, w := range []*worker{ws[0], ws[2]} {
		select {
		case err := <-w.done:
			out := w.stdout.String()
			if err != nil || !strings.Contains(out, "TIMEOUT") {
				t.Fatalf("rank %d: %v\n%s\n%s", w.rank, err, out, w.stderr.String())
			}
			if !strings.Contains(out, "rank 1 (") || !strings.Contains(out, "has not reported for") || !strings.Contains(out, "chain=[") {
				t.Errorf("rank %d's timeout does not name the stopped rank 1:\n%s", w.rank, out)
			}
			t.Logf("rank %d: %s", w.rank, strings.TrimSpace(out))
		case <-time.After(40 * time.Second):
			t.Fatalf("rank %d did not time out", w.rank)
		}
	}
}

// childJob is a worker of TestMultiProcessJobsDoNotMerge: a rank of a
// two-rank job that mpirun started (OMPI_COMM_WORLD_RANK/SIZE,
// PMIX_NAMESPACE), without a token or a run id.
func childJob() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := dist.Init(ctx, dist.Options{Timeout: 20 * time.Second})
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	defer g.Destroy()
	x := tensor.Full(tensor.Float32, 1, 4)
	if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
		return err
	}
	fmt.Printf("JOINED rank=%d job=%s sum=%v\n", g.Rank(), g.JobID(), x.At(0))
	return g.Barrier(ctx)
}

// TestMultiProcessJobsDoNotMerge (issue 27, item 9): two mpirun jobs on
// one host, without tokens, both on the default port. Job A's rank 0
// serves the store; job B's rank 1 reaches it and is refused at once,
// with an error that names both jobs and where this one's id comes from;
// job A's own rank 1 then joins it. (Without job ids, B's rank 1 joined
// job A.)
func TestMultiProcessJobsDoNotMerge(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 processes")
	}
	port := strconv.Itoa(freePort(t))
	var base []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(launcherVars, k) || strings.HasPrefix(k, "GODIST_") || strings.HasPrefix(k, "TORCHELASTIC_") ||
			strings.HasPrefix(k, "OMPI_") || strings.HasPrefix(k, "PMIX_") || strings.HasPrefix(k, "SLURM_") || strings.HasPrefix(k, "PMI_") {
			continue
		}
		base = append(base, kv)
	}
	rank := func(r int, ns string) *worker {
		return startChild(t, r, append(slices.Clone(base), "GODIST_TEST_MODE=job", "MASTER_PORT="+port,
			"OMPI_COMM_WORLD_RANK="+strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK="+strconv.Itoa(r),
			"PMIX_NAMESPACE="+ns, "OMPI_MCA_ess_base_jobid="+ns))
	}
	a0 := rank(0, "111")
	time.Sleep(200 * time.Millisecond) // let A's rank 0 serve the port first, as in the report
	start := time.Now()
	b1 := rank(1, "222")
	errs := waitWorkers([]*worker{b1}, 25*time.Second)
	if len(errs) == 0 {
		t.Fatalf("job B's rank 1 joined job A:\n%s", b1.stdout)
	}
	msg := b1.stderr.String()
	for _, want := range []string{"job id mismatch", `"openmpi:222"`, `"openmpi:111"`, "PMIX_NAMESPACE", "MASTER_PORT"} {
		if !strings.Contains(msg, want) {
			t.Errorf("job B's rank 1 failed without naming %q:\n%s", want, msg)
		}
	}
	t.Logf("job B's rank 1: %s", strings.TrimSpace(msg))
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("job B's rank 1 took %v to be refused", d)
	}
	a1 := rank(1, "111")
	for _, err := range waitWorkers([]*worker{a0, a1}, 30*time.Second) {
		t.Error(err)
	}
	for _, w := range []*worker{a0, a1} {
		if want := fmt.Sprintf("JOINED rank=%d job=openmpi:111 sum=2", w.rank); !strings.Contains(w.stdout.String(), want) {
			t.Errorf("job A's rank %d: want %q:\n%s", w.rank, want, w.stdout)
		}
	}
}
