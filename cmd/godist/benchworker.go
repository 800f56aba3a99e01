package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/store"
	"github.com/godist/godist/tensor"
)

// benchWorker is one rank of godist bench: it reads the configuration
// spawnRanks passes in the environment and is benchRank.
func benchWorker() int {
	var cfg benchConfig
	if err := json.Unmarshal([]byte(os.Getenv(benchConfigEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "godist bench worker: bad %s (this mode is started by godist bench): %v\n", benchConfigEnv, err)
		return exitUsage
	}
	return benchRank(cfg)
}

// benchRank is one rank of a benchmark, started by godist bench or, with
// godist bench --worker, by a launcher: it joins the job from the
// environment, runs every cell of cfg, and on rank 0 prints one JSON
// result per line on stdout. Errors go to stderr and the exit status.
func benchRank(cfg benchConfig) int {
	dt, err := tensor.ParseDType(cfg.DType)
	if err != nil {
		fmt.Fprintf(os.Stderr, "godist bench worker: %v\n", err)
		return exitUsage
	}
	if prefix := os.Getenv("GODIST_CPUPROFILE"); prefix != "" {
		f, err := os.Create(prefix + ".rank" + os.Getenv("RANK"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "godist bench worker: %v\n", err)
			return exitFail
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "godist bench worker: %v\n", err)
			return exitFail
		}
		defer pprof.StopCPUProfile()
	}
	if prefix := os.Getenv("GODIST_TRACE"); prefix != "" {
		f, err := os.Create(prefix + ".rank" + os.Getenv("RANK"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "godist bench worker: %v\n", err)
			return exitFail
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			fmt.Fprintf(os.Stderr, "godist bench worker: %v\n", err)
			return exitFail
		}
		defer trace.Stop()
	}
	ctx := context.Background()
	if cfg.RPC {
		if err := benchRPC(ctx, cfg, json.NewEncoder(os.Stdout)); err != nil {
			fmt.Fprintf(os.Stderr, "godist bench worker: rank %s: %v\n", os.Getenv("RANK"), err)
			return exitFail
		}
		return exitOK
	}
	g, err := dist.Init(ctx, dist.Options{Rank: -1, Timeout: cfg.Timeout})
	if err != nil {
		fmt.Fprintf(os.Stderr, "godist bench worker: %v\n", err)
		return exitFail
	}
	defer g.Destroy()
	if g.Rank() == 0 && len(g.Topology().Hosts) > 1 {
		fmt.Fprintf(os.Stderr, "godist bench worker: %d hosts; cost model: %v\n", len(g.Topology().Hosts), g.Model())
	}
	if err := warmUpJob(ctx, g, cfg.WarmupJob); err != nil {
		fmt.Fprintf(os.Stderr, "godist bench worker: rank %d: the job's warm-up: %v\n", g.Rank(), err)
		return exitFail
	}
	enc := json.NewEncoder(os.Stdout)
	for _, op := range cfg.Ops {
		sizes := cfg.Sizes
		if op == "barrier" {
			sizes = []int{0}
		}
		for _, size := range sizes {
			r, err := benchCell(ctx, g, cfg, dt, op, size)
			if err != nil {
				fmt.Fprintf(os.Stderr, "godist bench worker: rank %d: %s of %s: %v\n", g.Rank(), op, formatSize(size), err)
				return exitFail
			}
			if g.Rank() == 0 {
				if err := enc.Encode(r); err != nil {
					fmt.Fprintf(os.Stderr, "godist bench worker: %v\n", err)
					return exitFail
				}
			}
		}
	}
	if err := leaveTogether(ctx, g.Rank(), g.Size()); err != nil {
		fmt.Fprintf(os.Stderr, "godist bench worker: rank %d: leaving: %v\n", g.Rank(), err)
		return exitFail
	}
	return exitOK
}

// warmUpJob runs iters iterations of a barrier and a 4-byte all_reduce,
// as bench_gloo.py's and bench_mpi.py's --warmup-job do: a job's first
// few hundred calls allocate into memory the process has not touched yet,
// each page a fault (13 µs on this project's virtual machines), and on
// hosts whose ranks share a CPU those faults showed as 8 B all-reduces of
// 170-370 µs for a job's first 200-400 calls, against 100-130 µs after.
func warmUpJob(ctx context.Context, g *dist.Group, iters int) error {
	one := tensor.Full(tensor.Float32, 1, 1)
	for range iters {
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		if err := g.AllReduce(ctx, one, dist.Sum); err != nil {
			return err
		}
	}
	return nil
}

// benchCell measures op at size bytes as bench_gloo.py's cell does:
// warmup iterations, 5 probe iterations whose median (rank 0's, broadcast)
// sets the iteration count, then the timed iterations, each
// barrier; t0; op; t1, and the per-iteration maximum over ranks by an
// all_reduce(MAX) after the loop. The result is complete on rank 0 only.
func benchCell(ctx context.Context, g *dist.Group, cfg benchConfig, dt tensor.DType, op string, size int) (result, error) {
	n, es := g.Size(), dt.Size()
	per, nbytes := elemCount(op, size, es, n)
	var fn func() error
	var plan string
	var pred prediction // the cost model's times (Group.Choice)
	// input returns a tensor of numel ones: with --shared, made by
	// NewSharedTensor (and plan says so when the op goes through shared
	// memory), released when the cell ends (its calls have ended by then).
	var release []*tensor.Tensor
	defer func() {
		for _, t := range release {
			t.Release()
		}
	}()
	input := func(numel int) (*tensor.Tensor, error) {
		t := tensor.Full(dt, 1, numel)
		if !cfg.Shared {
			return t, nil
		}
		st, err := g.NewSharedTensor(ctx, dt, numel)
		if err != nil {
			return nil, err
		}
		release = append(release, st)
		st.Copy(t)
		if dist.SharedAllReduceApplies(g, st) {
			plan, pred = "shared memory", prediction{}
		}
		return st, nil
	}
	switch op {
	case "all_reduce":
		plan = choice(g, op, per, dt, &pred)
		t, err := input(per)
		if err != nil {
			return result{}, err
		}
		fn = func() error { return g.AllReduce(ctx, t, dist.Sum) }
	case "broadcast":
		plan = choice(g, op, per, dt, &pred)
		t, err := input(per)
		if err != nil {
			return result{}, err
		}
		fn = func() error { return g.Broadcast(ctx, t, 0) }
	case "all_gather":
		plan = choice(g, op, per, dt, &pred)
		in, err := input(per)
		if err != nil {
			return result{}, err
		}
		out := tensor.New(dt, per*n)
		fn = func() error { return g.AllGatherIntoTensor(ctx, out, in) }
	case "reduce_scatter":
		plan = choice(g, op, per, dt, &pred)
		in, err := input(per * n)
		if err != nil {
			return result{}, err
		}
		out := tensor.New(dt, per)
		fn = func() error { return g.ReduceScatterTensor(ctx, out, in, dist.Sum) }
	case "all_to_all":
		in, out := tensor.Full(dt, 1, per*n), tensor.New(dt, per*n)
		fn = func() error { return g.AllToAllSingle(ctx, out, in, nil, nil) }
		plan = choice(g, op, per, dt, &pred)
	case "barrier":
		fn = func() error { return g.Barrier(ctx) }
		plan = choice(g, op, 0, dt, &pred)
	default:
		return result{}, fmt.Errorf("unknown op %q", op)
	}
	loop := func(iters int) ([]float64, error) {
		ts := make([]float64, iters)
		for i := range ts {
			if err := g.Barrier(ctx); err != nil {
				return nil, fmt.Errorf("barrier before iteration %d: %w", i, err)
			}
			t0 := time.Now()
			if err := fn(); err != nil {
				return nil, fmt.Errorf("iteration %d: %w", i, err)
			}
			ts[i] = time.Since(t0).Seconds()
		}
		return ts, nil
	}
	start := time.Now()
	if _, err := loop(cfg.Warmup); err != nil {
		return result{}, fmt.Errorf("warm-up: %w", err)
	}
	probe, err := loop(5)
	if err != nil {
		return result{}, fmt.Errorf("probe: %w", err)
	}
	est := tensor.FromFloat64([]float64{median(probe)})
	if err := g.Broadcast(ctx, est, 0); err != nil {
		return result{}, fmt.Errorf("broadcasting the probe's latency: %w", err)
	}
	iters := iterCount(est.Float64s()[0], cfg.Target.Seconds(), cfg.MinIters, cfg.MaxIters)
	ts, err := loop(iters)
	if err != nil {
		return result{}, err
	}
	if err := g.AllReduce(ctx, tensor.FromFloat64(ts), dist.Max); err != nil {
		return result{}, fmt.Errorf("all_reduce(MAX) of the latencies: %w", err)
	}
	r := newResult(op, size, nbytes, n, ts)
	if cfg.CommonStart > 0 {
		spans, late, err := commonStartLoop(ctx, g, fn, cfg.CommonStart)
		if err != nil {
			return result{}, err
		}
		r.CommonIters, r.CommonUsMedian, r.CommonLateUsMedian = len(spans), median(spans)*1e6, median(late)*1e6
	}
	r.DType, r.Algo = dt.String(), plan
	r.PredUs, r.PredAfterBarrierUs = pred.common.Seconds()*1e6, pred.afterBarrier.Seconds()*1e6
	if len(g.Topology().Hosts) > 1 {
		r.Model = g.Model().String()
	}
	r.TStart, r.TEnd = unixSeconds(start), unixSeconds(time.Now())
	return r, nil
}

// leaveTogether returns once every rank has finished its last collective,
// and on rank 0 (which serves the store) once every other rank has been
// told so. It works around dist failing a group when a peer that has
// already sent everything it owes says goodbye (Destroy, or a clean exit)
// before this rank has posted the receive for it: the frame is there, but
// the goodbye fails the group. It talks to the job's store over a
// connection of its own, since dist does not expose the group's.
func leaveTogether(ctx context.Context, rank, world int) error {
	addr := net.JoinHostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"))
	st, err := store.Dial(ctx, addr, store.DialOptions{
		Token: tokenFrom(os.Getenv("GODIST_TOKEN")), JobID: os.Getenv("GODIST_RUN_ID"), Rank: rank, Timeout: time.Minute,
	})
	if err != nil {
		return err
	}
	defer st.Close()
	keys := func(what string, from int) []string {
		var ks []string
		for r := from; r < world; r++ {
			ks = append(ks, fmt.Sprintf("godist-bench/%s/%d", what, r))
		}
		return ks
	}
	if err := st.Set(ctx, keys("done", rank)[0], nil); err != nil {
		return err
	}
	if err := st.Wait(ctx, keys("done", 0)...); err != nil {
		return err
	}
	if rank != 0 {
		// Rank 0 closes the store once it sees this, maybe before the
		// answer reaches us; an error here costs nothing.
		st.Set(ctx, keys("gone", rank)[0], nil)
		return nil
	}
	return st.Wait(ctx, keys("gone", 1)...)
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// choice is the algorithm g runs op with (Group.Choice), and its predicted
// times in *pred.
func choice(g *dist.Group, op string, count int, dt tensor.DType, pred *prediction) string {
	c, ok := g.Choice(op, count, dt)
	if !ok {
		return ""
	}
	*pred = prediction{c.Predicted, c.AfterBarrier()}
	return c.Algo
}

// prediction is the cost model's time for a call from a common start,
// and from each rank's exit of a barrier just before it (dist.Choice).
type prediction struct{ common, afterBarrier time.Duration }
