package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/internal/cpuyield"
	"github.com/godist/godist/internal/futex"
	"github.com/godist/godist/tensor"
)

// The common start: what a collective's cost model predicts is the time
// from an instant at which every rank calls until the last one returns.
// bench_gloo.py's iteration (barrier; t0; op; t1, the slowest rank's t1-t0)
// measures something else: each rank's clock starts when it leaves the
// barrier, and ranks leave it at different moments. A broadcast's rank
// that leaves last may find the root's message already there (8 B across
// hosts at 10 Gbit/s measured 22 µs, under one network latency), and an
// all-reduce's rank that leaves first waits for the others inside the
// call. Where every rank reads one clock (hosts that are network
// namespaces of one machine, as hostcmp's lab is), the common start
// measures the model's quantity: rank 0 picks an instant a margin ahead
// on the machine's monotonic clock and broadcasts it, every rank sleeps
// until then, calls, and reports its return less the instant.
//
// Ranks that share a CPU cannot all start at the instant: the kernel
// wakes them in turn, as it runs them in turn inside the call, and the
// model counts a host's CPUs (algo.Model.CPUs). late says how far the
// last rank's start was behind the instant.

// commonMargin is how far ahead of rank 0's clock the start lies: the
// broadcast of the instant and every rank's wake-up fit in it.
const commonMargin = time.Millisecond

// commonStartLoop runs iters iterations of fn from a common start and
// returns, per iteration, the last return and the last start after the
// instant (seconds, the maximum over ranks; complete on every rank).
func commonStartLoop(ctx context.Context, g *dist.Group, fn func() error, iters int) (spans, late []float64, err error) {
	spans, late = make([]float64, iters), make([]float64, iters)
	at := tensor.New(tensor.Int64, 1)
	for i := range iters {
		if err := g.Barrier(ctx); err != nil {
			return nil, nil, fmt.Errorf("barrier before common start %d: %w", i, err)
		}
		if g.Rank() == 0 {
			at.Int64s()[0] = monoNow() + int64(commonMargin)
		}
		if err := g.Broadcast(ctx, at, 0); err != nil {
			return nil, nil, fmt.Errorf("broadcasting common start %d: %w", i, err)
		}
		t := at.Int64s()[0]
		sleepUntil(t)
		t0 := monoNow()
		if err := fn(); err != nil {
			return nil, nil, fmt.Errorf("common start %d: %w", i, err)
		}
		spans[i] = float64(monoNow()-t) / 1e9
		late[i] = float64(max(t0-t, 0)) / 1e9
	}
	both := tensor.FromFloat64(append(append([]float64(nil), spans...), late...))
	if err := g.AllReduce(ctx, both, dist.Max); err != nil {
		return nil, nil, fmt.Errorf("all_reduce(MAX) of the common starts: %w", err)
	}
	v := both.Float64s()
	return v[:iters], v[iters:], nil
}

// monoNow is CLOCK_MONOTONIC in nanoseconds: one clock for every process
// of the machine, network namespaces included (a time namespace would
// offset it; the lab makes none).
func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// sleepUntil returns when CLOCK_MONOTONIC reads t (ns). It sleeps until
// commonPoll before t, then polls the clock, yielding the CPU between
// reads: a thread that slept to the instant itself started 40-100 µs
// late on this project's virtual machines (a vCPU with nothing to run
// halts, and waking it is slow), and a rank sharing a CPU with another
// lets it run to its own start.
func sleepUntil(t int64) {
	// Not time.Sleep: the runtime's timers wake through the network
	// poller, to the millisecond. A futex wait on a word nobody wakes
	// counts in futex.Slept, so the transport's readers do not take this
	// sleep for a CPU kept from the process (a busy host).
	var never atomic.Uint32
	for {
		d := t - int64(commonPoll) - monoNow()
		if d <= 0 {
			break
		}
		futex.Wait(&never, 0, time.Duration(d))
	}
	for monoNow() < t {
		cpuyield.Yield()
	}
}

// commonPoll is how long before the instant a rank stops sleeping and
// polls the clock: more than a vCPU's wake-up.
const commonPoll = 300 * time.Microsecond
