package dist_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// envInt reads a test knob from the environment.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestKillRankMidAllReduce kills one of 4 ranks after a short random delay
// while all ranks run all-reduces of a few MiB: every survivor must fail
// within 2s of the kill with a *dist.RankError naming the dead rank.
// 100 seeds (20 under -race; GODIST_KILL_SEEDS overrides).
func TestKillRankMidAllReduce(t *testing.T) {
	seeds := 100
	if raceOn {
		seeds = 20
	}
	if testing.Short() {
		seeds = 10
	}
	seeds = envInt("GODIST_KILL_SEEDS", seeds)
	const world = 4
	var slowest time.Duration
	start := time.Now()
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		victim := rng.IntN(world)
		delay := time.Duration(rng.Int64N(int64(15 * time.Millisecond)))
		n := (1 + rng.IntN(3)) << 20 / 4 // 1 to 3 MiB of float32
		var killedAt atomic.Int64
		var mu sync.Mutex
		var lat []time.Duration
		disttest.SpawnWith(t, world, disttest.Options{Timeout: 10 * time.Second}, func(j *disttest.Job, g *dist.Group) error {
			x := tensor.Full(tensor.Float32, 1, n)
			if g.Rank() == victim {
				w := g.AllReduceAsync(x, dist.Sum)
				time.Sleep(delay)
				killedAt.Store(time.Now().UnixNano())
				j.Kill(victim)
				w.Wait(context.Background()) // fails at once: every peer is gone
				return nil
			}
			// A training loop: all-reduce until the group fails.
			var err error
			for i := 0; err == nil; i++ {
				err = g.AllReduceAsync(x, dist.Sum).Wait(context.Background())
				if i > 10000 {
					return fmt.Errorf("seed %d: still running after %d all-reduces", seed, i)
				}
			}
			at := killedAt.Load()
			if at == 0 {
				return fmt.Errorf("seed %d: error before the kill: %v", seed, err)
			}
			el := time.Since(time.Unix(0, at))
			mu.Lock()
			lat = append(lat, el)
			mu.Unlock()
			if el > 2*time.Second {
				return fmt.Errorf("seed %d: survivor failed %v after rank %d was killed", seed, el, victim)
			}
			var re *dist.RankError
			if !errors.As(err, &re) || re.Rank != victim {
				return fmt.Errorf("seed %d: got %v, want a *dist.RankError naming rank %d", seed, err, victim)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("rank %d", victim)) {
				return fmt.Errorf("seed %d: error text does not name rank %d: %v", seed, victim, err)
			}
			// Later calls fail at once with ErrGroupFailed.
			if err := g.Barrier(context.Background()); !errors.Is(err, dist.ErrGroupFailed) || !errors.As(err, &re) {
				return fmt.Errorf("seed %d: barrier after the death: %v", seed, err)
			}
			return nil
		})
		for _, l := range lat {
			slowest = max(slowest, l)
		}
		if t.Failed() {
			t.Fatalf("seed %d (victim %d, delay %v, %d floats) failed", seed, victim, delay, n)
		}
	}
	t.Logf("%d seeds in %v; slowest time from kill to a survivor's error: %v", seeds, time.Since(start).Round(time.Millisecond), slowest)
}

// TestKillRankEveryCollective: a rank dies while the others are inside
// each kind of call; all of them fail with a RankError naming it.
func TestKillRankEveryCollective(t *testing.T) {
	const world = 4
	calls := map[string]func(g *dist.Group) error{
		"broadcast": func(g *dist.Group) error {
			return g.Broadcast(context.Background(), tensor.New(tensor.Float32, 1<<18), 3)
		},
		"reduce": func(g *dist.Group) error {
			// Only the root needs every rank's data.
			err := g.Reduce(context.Background(), tensor.New(tensor.Float32, 1000), 0, dist.Sum)
			if err == nil && g.Rank() != 0 {
				return &dist.RankError{Rank: 3}
			}
			return err
		},
		"all_reduce": func(g *dist.Group) error {
			return g.AllReduce(context.Background(), tensor.New(tensor.Float32, 1<<19), dist.Sum)
		},
		"all_gather": func(g *dist.Group) error {
			return g.AllGatherIntoTensor(context.Background(), tensor.New(tensor.Float32, 4000), tensor.New(tensor.Float32, 1000))
		},
		"reduce_scatter": func(g *dist.Group) error {
			return g.ReduceScatterTensor(context.Background(), tensor.New(tensor.Float32, 1000), tensor.New(tensor.Float32, 4000), dist.Sum)
		},
		"all_to_all": func(g *dist.Group) error {
			return g.AllToAllSingle(context.Background(), tensor.New(tensor.Float32, 4000), tensor.New(tensor.Float32, 4000), nil, nil)
		},
		"barrier": func(g *dist.Group) error { return g.Barrier(context.Background()) },
		"recv": func(g *dist.Group) error {
			_, err := g.Recv(context.Background(), tensor.New(tensor.Float32, 1), 3, 0)
			return err
		},
		"recv any": func(g *dist.Group) error {
			_, err := g.Recv(context.Background(), tensor.New(tensor.Float32, 1), dist.AnySource, 0)
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			disttest.SpawnWith(t, world, disttest.Options{Timeout: 10 * time.Second}, func(j *disttest.Job, g *dist.Group) error {
				if g.Rank() == 3 {
					time.Sleep(20 * time.Millisecond) // the others are waiting for it
					j.Kill(3)
					return nil
				}
				return within(2*time.Second, name+" with a dead peer", func() error {
					err := call(g)
					var re *dist.RankError
					if !errors.As(err, &re) || re.Rank != 3 {
						return fmt.Errorf("%s: got %v, want a *dist.RankError naming rank 3", name, err)
					}
					return nil
				})
			})
		})
	}
}

// TestSilentPeerTimesOut: a rank that never calls the collective makes the
// others fail at the group timeout with a *dist.TimeoutError.
func TestSilentPeerTimesOut(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, world := range []int{2, 3, 5} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			var others sync.WaitGroup
			others.Add(world - 1)
			disttest.SpawnWith(t, world, disttest.Options{Timeout: timeout}, func(_ *disttest.Job, g *dist.Group) error {
				if g.Rank() == world-1 {
					others.Wait() // alive, but never calls
					return nil
				}
				defer others.Done()
				start := time.Now()
				err := g.AllReduce(context.Background(), tensor.New(tensor.Float32, 1000), dist.Sum)
				el := time.Since(start)
				var te *dist.TimeoutError
				var de *dist.DesyncError
				if !errors.As(err, &te) && !errors.As(err, &de) {
					return fmt.Errorf("all_reduce with a silent peer: %v, want a *dist.TimeoutError", err)
				}
				if te == nil {
					return nil // a peer's timeout reached us first
				}
				if el < timeout*8/10 || el > timeout+2*time.Second {
					return fmt.Errorf("timed out after %v with a %v group timeout", el, timeout)
				}
				if !strings.Contains(err.Error(), "all_reduce") {
					return fmt.Errorf("timeout error does not name the call: %v", err)
				}
				// It names the rank it waited for: the silent one, or one
				// that waits for it.
				if len(te.Waiting) != 1 || te.Waiting[0] == g.Rank() || world == 2 && te.Waiting[0] != 1 ||
					!strings.Contains(err.Error(), fmt.Sprintf("waiting on ranks [%d]", te.Waiting[0])) {
					return fmt.Errorf("timeout error waiting on %v: %v", te.Waiting, err)
				}
				if err := g.Barrier(context.Background()); !errors.Is(err, dist.ErrGroupFailed) {
					return fmt.Errorf("barrier after a timeout: %v, want dist.ErrGroupFailed", err)
				}
				return nil
			})
		})
	}
}

// TestGroupTimeoutWithCallerDeadline: the group timeout bounds a call also
// when the caller's context has a later deadline (Options.Timeout "bounds
// every collective").
func TestGroupTimeoutWithCallerDeadline(t *testing.T) {
	const timeout = 300 * time.Millisecond
	done := make(chan struct{})
	disttest.SpawnWith(t, 2, disttest.Options{Timeout: timeout}, func(_ *disttest.Job, g *dist.Group) error {
		if g.Rank() == 1 {
			<-done
			return nil
		}
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		err := g.AllReduce(ctx, tensor.New(tensor.Float32, 10), dist.Sum)
		if el := time.Since(start); el > timeout+time.Second {
			return fmt.Errorf("call with a 3s caller deadline and a %v group timeout returned after %v: %v", timeout, el.Round(time.Millisecond), err)
		}
		if !errors.As(err, new(*dist.TimeoutError)) {
			return fmt.Errorf("got %v, want a *dist.TimeoutError", err)
		}
		return nil
	})
}

// TestCallerCancel: a caller's cancelled context ends its call at once.
func TestCallerCancel(t *testing.T) {
	done := make(chan struct{})
	disttest.SpawnWith(t, 2, disttest.Options{Timeout: 5 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
		if g.Rank() == 1 {
			<-done
			return nil
		}
		defer close(done)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		err := within(time.Second, "cancelled all_reduce", func() error {
			return g.AllReduce(ctx, tensor.New(tensor.Float32, 10), dist.Sum)
		})
		if !errors.Is(err, context.Canceled) {
			return fmt.Errorf("cancelled all_reduce: %v, want context.Canceled", err)
		}
		return nil
	})
}

// faultSuite runs a fixed sequence of calls on g and returns every output's
// bytes; inputs depend on the rank only, so a correct run gives the same
// bytes whatever the transport does.
func faultSuite(g *dist.Group) ([][]byte, error) {
	ctx := context.Background()
	me, world := g.Rank(), g.Size()
	seed := uint64(1000 * (me + 1))
	var out [][]byte
	keep := func(ts ...*tensor.Tensor) {
		for _, t := range ts {
			out = append(out, append([]byte(nil), t.Bytes()...))
		}
	}
	for i, n := range []int{0, 1, 1000, 40000, 300000, 1<<19 + 3} { // up to 2 MiB: recursive doubling, halving-doubling, ring
		x := randFloat32(seed+uint64(i), n)
		if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
			return nil, fmt.Errorf("all_reduce %d: %w", n, err)
		}
		keep(x)
	}
	y := randFloat32(seed+50, 5000)
	if err := g.AllReduce(ctx, y, dist.Max); err != nil {
		return nil, err
	}
	keep(y)
	for _, n := range []int{10, 100000} { // binomial and chain
		b := randFloat32(seed+60, n)
		if err := g.Broadcast(ctx, b, world-1); err != nil {
			return nil, fmt.Errorf("broadcast: %w", err)
		}
		keep(b)
	}
	for _, n := range []int{7, 30000} {
		ag := tensor.New(tensor.Float32, n*world)
		if err := g.AllGatherIntoTensor(ctx, ag, randFloat32(seed+70, n)); err != nil {
			return nil, fmt.Errorf("all_gather: %w", err)
		}
		keep(ag)
	}
	rs := tensor.New(tensor.Float32, 20000)
	if err := g.ReduceScatterTensor(ctx, rs, randFloat32(seed+80, 20000*world), dist.Sum); err != nil {
		return nil, fmt.Errorf("reduce_scatter: %w", err)
	}
	keep(rs)
	red := randFloat32(seed+85, 3000)
	if err := g.Reduce(ctx, red, 0, dist.Sum); err != nil {
		return nil, fmt.Errorf("reduce: %w", err)
	}
	keep(red)
	// all_to_all_single with uneven splits: me sends (me+d)%3+1 rows of 4 to d.
	var inSplits, outSplits []int
	inRows, outRows := 0, 0
	for d := range world {
		inSplits = append(inSplits, (me+d)%3+1)
		outSplits = append(outSplits, (d+me)%3+1)
		inRows += (me+d)%3 + 1
		outRows += (d+me)%3 + 1
	}
	a2a := tensor.New(tensor.Float32, outRows, 4)
	if err := g.AllToAllSingle(ctx, a2a, randFloat32(seed+90, inRows*4).Reshape(inRows, 4), outSplits, inSplits); err != nil {
		return nil, fmt.Errorf("all_to_all_single: %w", err)
	}
	keep(a2a)
	ins, outs := make([]*tensor.Tensor, world), make([]*tensor.Tensor, world)
	for d := range world {
		ins[d] = randFloat32(seed+100+uint64(d), 100*(d+1))
		outs[d] = tensor.New(tensor.Float32, 100*(me+1))
	}
	if err := g.AllToAll(ctx, outs, ins); err != nil {
		return nil, fmt.Errorf("all_to_all: %w", err)
	}
	keep(outs...)
	gouts := make([]*tensor.Tensor, world)
	for i := range gouts {
		gouts[i] = tensor.New(tensor.Float32, 500)
	}
	if err := g.Gather(ctx, randFloat32(seed+110, 500), gouts, 1%world); err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	if me == 1%world {
		keep(gouts...)
	}
	sc := tensor.New(tensor.Float32, 500)
	var sins []*tensor.Tensor
	if me == 0 {
		for r := range world {
			sins = append(sins, randFloat32(seed+120+uint64(r), 500))
		}
	}
	if err := g.Scatter(ctx, sc, sins, 0); err != nil {
		return nil, fmt.Errorf("scatter: %w", err)
	}
	keep(sc)
	// p2p: several messages per tag around the ring, batched.
	if world > 1 {
		next, prev := (me+1)%world, (me+world-1)%world
		var ops []dist.P2POp
		var rx []*tensor.Tensor
		for k := range 6 {
			r := tensor.New(tensor.Float32, 1000*(k%3+1))
			rx = append(rx, r)
			ops = append(ops, dist.P2POp{Tensor: r, Peer: prev, Tag: k % 2})
			ops = append(ops, dist.P2POp{Send: true, Tensor: randFloat32(seed+200+uint64(k), 1000*(k%3+1)), Peer: next, Tag: k % 2})
		}
		for _, w := range g.BatchISendIRecv(ops) {
			if err := w.Wait(ctx); err != nil {
				return nil, fmt.Errorf("p2p: %w", err)
			}
		}
		keep(rx...)
	}
	objs, err := dist.AllGatherObject(ctx, g, objFor(me, 1000*me))
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		out = append(out, o.Blob)
	}
	if err := g.Barrier(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// TestFaultyTransportBitIdentical runs faultSuite over an in-process
// transport that loses, duplicates and delays frames, and compares every
// output byte with a run without faults.
func TestFaultyTransportBitIdentical(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if raceOn || testing.Short() {
		seeds = seeds[:1]
	}
	for _, world := range []int{1, 3, 4} {
		ref := make([][][]byte, world)
		disttest.SpawnWith(t, world, disttest.Options{}, func(_ *disttest.Job, g *dist.Group) error {
			var err error
			ref[g.Rank()], err = faultSuite(g)
			return err
		})
		if t.Failed() {
			t.Fatalf("world %d: run without faults failed", world)
		}
		for _, seed := range seeds {
			got := make([][][]byte, world)
			f := transport.Faults{Seed: seed, Loss: 0.2, Dup: 0.1, MaxDelay: 2 * time.Millisecond}
			start := time.Now()
			disttest.SpawnWith(t, world, disttest.Options{Faults: f, Timeout: 30 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
				var err error
				got[g.Rank()], err = faultSuite(g)
				return err
			})
			t.Logf("world %d seed %d: %v", world, seed, time.Since(start).Round(time.Millisecond))
			for r := range world {
				if len(got[r]) != len(ref[r]) {
					t.Fatalf("world %d seed %d rank %d: %d outputs, want %d", world, seed, r, len(got[r]), len(ref[r]))
				}
				for i := range got[r] {
					if err := sameBytes(fmt.Sprintf("world %d seed %d rank %d output %d", world, seed, r, i), got[r][i], ref[r][i]); err != nil {
						t.Error(err)
					}
				}
			}
		}
	}
}

// TestCorruptFrameNotDeath: a peer dropped for a malformed frame is not
// reported as a process that died (issue 19, item 11).
func TestCorruptFrameNotDeath(t *testing.T) {
	perr := &transport.PeerError{Rank: 0, Err: fmt.Errorf("%w: payload checksum mismatch on group 0 call 3 tag 0 from rank 0", transport.ErrFrame)}
	err := &dist.RankError{Rank: 0, Op: "all_reduce", Err: perr}
	msg := err.Error()
	if strings.Contains(msg, "is gone") || strings.Contains(msg, "probably died") || !strings.Contains(msg, "malformed frame") || !strings.Contains(msg, "checksum") {
		t.Fatalf("a corrupt frame reads as: %s", msg)
	}
	died := (&dist.RankError{Rank: 1, Op: "barrier", Err: &transport.PeerError{Rank: 1, Err: io.EOF}}).Error()
	if !strings.Contains(died, "is gone") || !strings.Contains(died, "probably died") {
		t.Fatalf("a death reads as: %s", died)
	}
}

// TestAbortReachesMembersNeverConnected: with links made on first use, a
// member that aborts before any call is connected to nobody, and most
// members never connect to it. Its news still reaches every member: those
// that connect to it are told then (PeerUp), and each member that fails
// passes the news on to its own overlay (±2^k), so every member's next
// call fails naming the member that aborted, not at a timeout; and no
// member connects to more than a few others.
func TestAbortReachesMembersNeverConnected(t *testing.T) {
	const w, aborter = 64, 37
	m := transport.NewInProc(w, transport.Faults{})
	gs := make([]*dist.Group, w)
	for r, ep := range m.Endpoints {
		gs[r] = dist.FromEndpoint(ep, nil, "inproc", time.Minute)
	}
	defer func() {
		for _, g := range gs {
			g.Destroy()
		}
	}()
	gs[aborter].Abort(errors.New("out of memory on the device"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, w)
	for r := range w {
		if r == aborter {
			continue
		}
		wg.Go(func() {
			x := tensor.FromFloat32([]float32{1})
			for i := 0; i < 1000 && errs[r] == nil; i++ { // until the news comes
				errs[r] = gs[r].AllReduce(ctx, x, dist.Sum)
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if r == aborter {
			continue
		}
		var ae *dist.AbortError
		if !errors.As(err, &ae) || ae.Rank != aborter || !strings.Contains(ae.Reason, "out of memory") {
			t.Fatalf("rank %d: %v, want an AbortError from rank %d", r, err, aborter)
		}
	}
	for r, ep := range m.Endpoints {
		n := 0
		for p := range w {
			if ep.Connected(p) {
				n++
			}
		}
		if n > 2*6+6 { // the overlay's 2log₂W, and the calls' own
			t.Errorf("rank %d is connected to %d of %d ranks", r, n, w-1)
		}
	}
}
