package dist_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/godist/godist/transport"
)

// TestSmallCallAllocs bounds the heap allocations of a barrier and of an
// 8-byte all-reduce between two ranks over TCP (the path of ranks on
// different hosts), counted over the whole process: the calls, the
// transport's readers and their deliveries. Each was 5.7 and 7.1 a rank
// and call before the socket reader's callback, the receive's channel
// and the call's record stopped being allocated for every call; at
// world 4, 39 allocations a barrier.
func TestSmallCallAllocs(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates for its own bookkeeping")
	}
	const world, calls = 2, 400
	gs := tcpGroupsTimeout(t, world, transport.TCPOptions{Spin: 50 * time.Millisecond}, 30*time.Second)
	defer func() {
		for _, g := range gs {
			g.Destroy()
		}
	}()
	// A caller's context that can end costs a context of the call's own
	// (Group.runCall); the group's timeout bounds these calls instead.
	ctx := context.Background()
	for _, c := range []struct {
		op   string
		most float64 // allocations a rank and call
	}{{"barrier", 4}, {"all_reduce_8B", 5.5}} {
		run := func(n int) {
			if err := smallCalls(ctx, gs, c.op, n); err != nil {
				t.Fatal(err)
			}
		}
		run(50) // warm: the first calls grow maps and buffers
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		run(calls)
		runtime.ReadMemStats(&after)
		per := float64(after.Mallocs-before.Mallocs) / (world * calls)
		t.Logf("%s: %.2f allocations a rank and call", c.op, per)
		if per > c.most {
			t.Errorf("%s: %.2f allocations a rank and call, want at most %.1f", c.op, per, c.most)
		}
	}
}
