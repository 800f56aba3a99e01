package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/tensor"
)

// The functions of tools/peers/bench_rpc.py.
type rpcAddArgs struct {
	X *tensor.Tensor
	Y float32
}

// rpcCaseNames are godist bench --rpc's cases, in the order they run.
var rpcCaseNames = []string{"add", "remote", "echo_1KiB", "echo_1MiB", "echo_16MiB", "async_echo", "async_add"}

// parseRPCCases parses --rpc-cases.
func parseRPCCases(s string) ([]string, error) {
	if s == "all" || s == "" {
		return rpcCaseNames, nil
	}
	var out []string
	for _, c := range strings.Split(s, ",") {
		if !slices.Contains(rpcCaseNames, c) {
			return nil, fmt.Errorf("unknown case %q (cases: %s)", c, strings.Join(rpcCaseNames, ","))
		}
		out = append(out, c)
	}
	return out, nil
}

// benchRPC is one rank of godist bench --rpc: rank 1 serves, rank 0 times
// bench_rpc.py's cases the way it does (5 warm-up calls, one probe call
// that sets the iteration count for the time target, then each iteration
// timed alone; the median) and prints one result per case.
func benchRPC(ctx context.Context, cfg benchConfig, enc *json.Encoder) error {
	reg := rpc.NewRegistry()
	add, err := rpc.Register(reg, "add", func(_ context.Context, a rpcAddArgs) (*tensor.Tensor, error) {
		out := tensor.New(a.X.DType(), a.X.Shape()...)
		return out.AddScalar(a.X, float64(a.Y)), nil
	})
	if err != nil {
		return err
	}
	echo, err := rpc.Register(reg, "echo", func(_ context.Context, t *tensor.Tensor) (*tensor.Tensor, error) { return t, nil })
	if err != nil {
		return err
	}
	make2, err := rpc.Register(reg, "make", func(_ context.Context, n int) (*tensor.Tensor, error) {
		t := tensor.New(tensor.Float32, n)
		return t.AddScalar(t, 1), nil
	})
	if err != nil {
		return err
	}
	a, err := rpc.Init(ctx, "", rpc.Options{Functions: reg, Timeout: cfg.Timeout, Dist: distOptions(cfg)})
	if err != nil {
		return err
	}
	if a.Self().ID != 0 {
		return a.Shutdown(ctx, true)
	}
	target := cfg.Target.Seconds()
	timed := func(minIters, maxIters int, fn func() error) ([]float64, error) {
		for range 5 {
			if err := fn(); err != nil {
				return nil, err
			}
		}
		t0 := time.Now()
		if err := fn(); err != nil {
			return nil, err
		}
		est := time.Since(t0).Seconds()
		n := int(min(float64(maxIters), max(float64(minIters), target/max(est, 1e-7))))
		ts := make([]float64, 0, n)
		for range n {
			t0 := time.Now()
			if err := fn(); err != nil {
				return nil, err
			}
			ts = append(ts, time.Since(t0).Seconds())
		}
		return ts, nil
	}
	emit := func(op string, bytes int, ts []float64, calls int) error {
		r := newResult(op, bytes, bytes, 2, ts)
		r.BusbwGBps = 0
		if calls > 0 {
			r.CallsPerS = float64(calls) / (r.LatUsMedian / 1e6)
			if bytes > 0 {
				r.AlgbwGBps = float64(calls*bytes) / (r.LatUsMedian / 1e6) / 1e9
			}
		}
		return enc.Encode(r)
	}
	want := func(c string) bool { return cfg.RPCCases == nil || slices.Contains(cfg.RPCCases, c) }
	small := tensor.FromFloat32([]float32{1, 1}, 2)
	if want("add") {
		ts, err := timed(20, 20000, func() error {
			_, err := add.Call(ctx, a, "worker1", rpcAddArgs{small, 3})
			return err
		})
		if err != nil {
			return fmt.Errorf("rpc_sync add: %w", err)
		}
		if err := emit("rpc_sync add(2 floats)", 0, ts, 0); err != nil {
			return err
		}
	}
	if want("remote") {
		if err := benchRemote(ctx, a, make2, timed, emit); err != nil {
			return err
		}
	}
	for i, n := range []int{1 << 10, 1 << 20, 16 << 20} {
		if !want([]string{"echo_1KiB", "echo_1MiB", "echo_16MiB"}[i]) {
			continue
		}
		t := tensor.New(tensor.Float32, n/4)
		ts, err := timed(5, 20000, func() error {
			_, err := echo.Call(ctx, a, "worker1", t)
			return err
		})
		if err != nil {
			return fmt.Errorf("echo of %d bytes: %w", n, err)
		}
		if err := emit(fmt.Sprintf("rpc_sync echo %d B", n), n, ts, 1); err != nil {
			return err
		}
	}
	futs := make([]*rpc.Future[*tensor.Tensor], 256)
	if want("async_echo") {
		mib := tensor.New(tensor.Float32, (1<<20)/4)
		ts, err := timed(3, 200, func() error {
			for i := range 64 {
				futs[i] = echo.Go(ctx, a, "worker1", mib)
			}
			_, err := rpc.WaitAll(ctx, futs[:64])
			return err
		})
		if err != nil {
			return fmt.Errorf("echo 1 MiB x64: %w", err)
		}
		if err := emit("rpc_async echo 1 MiB x64 in flight", 1<<20, ts, 64); err != nil {
			return err
		}
	}
	if want("async_add") {
		ts, err := timed(3, 2000, func() error {
			for i := range 256 {
				futs[i] = add.Go(ctx, a, "worker1", rpcAddArgs{small, 1})
			}
			_, err := rpc.WaitAll(ctx, futs)
			return err
		})
		if err != nil {
			return fmt.Errorf("add x256: %w", err)
		}
		if err := emit("rpc_async add x256 in flight", 0, ts, 256); err != nil {
			return err
		}
	}
	return a.Shutdown(ctx, true)
}

// benchRemote times remote(make 2 floats).to_here().
func benchRemote(ctx context.Context, a *rpc.Agent, make2 rpc.Fn[int, *tensor.Tensor], timed func(int, int, func() error) ([]float64, error), emit func(string, int, []float64, int) error) error {
	ts, err := timed(20, 20000, func() error {
		ref, err := make2.Remote(ctx, a, "worker1", 2)
		if err != nil {
			return err
		}
		_, err = ref.ToHere(ctx)
		ref.Release()
		return err
	})
	if err != nil {
		return fmt.Errorf("remote().to_here(): %w", err)
	}
	return emit("remote(make 2 floats).to_here()", 0, ts, 0)
}

func distOptions(cfg benchConfig) dist.Options {
	return dist.Options{Rank: -1, Timeout: cfg.Timeout}
}
