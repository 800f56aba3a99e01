package dist

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

var scaleSizes = flag.String("scale", "", "world sizes for TestScale, comma-separated (default 256; 64 with -short or -race), e.g. -scale=4096,16384 (make bench-scale)")

// TestScale runs a job of W goroutine ranks over the in-process transport
// through every kind of call, each checked against its closed form, and
// logs the time of each and the heap per rank. At W ranks nothing may be
// W² per call or per rank: the links are made on first use (a ring's rank
// uses two, a tree's log W), and a failure floods through them.
func TestScale(t *testing.T) {
	sizes := []int{256}
	if testing.Short() || raceEnabled {
		sizes = []int{64}
	}
	if *scaleSizes != "" {
		sizes = nil
		for _, f := range strings.Split(*scaleSizes, ",") {
			w, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || w < 2 {
				t.Fatalf("-scale: %q is not a world size", f)
			}
			sizes = append(sizes, w)
		}
	}
	for _, w := range sizes {
		t.Run(strconv.Itoa(w), func(t *testing.T) { runScale(t, w) })
	}
}

// scaleJob is a job of goroutine ranks.
type scaleJob struct {
	t     *testing.T
	w     int
	mesh  *transport.Mesh
	gs    []*Group
	start time.Time
}

// each runs fn on every rank at once and fails the test with the first
// error (naming its rank); it logs the phase's time.
func (j *scaleJob) each(phase string, fn func(ctx context.Context, r int, g *Group) error) {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	errs := make([]error, j.w)
	var wg sync.WaitGroup
	for r := range j.w {
		wg.Go(func() { errs[r] = fn(ctx, r, j.gs[r]) })
	}
	wg.Wait()
	j.t.Logf("W=%d %-40s %v", j.w, phase, time.Since(start).Round(time.Millisecond))
	for r, err := range errs {
		if err != nil {
			j.t.Fatalf("W=%d %s: rank %d: %v", j.w, phase, r, err)
		}
	}
}

// heap logs the heap in use per rank, after two collections (the second
// empties the pools' victim caches of scratch buffers).
func (j *scaleJob) heap(when string) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	j.t.Logf("W=%d heap after %s: %.1f KiB a rank (%d MiB in all)", j.w, when, float64(ms.HeapInuse)/1024/float64(j.w), ms.HeapInuse>>20)
}

// force makes g's all-reduces of count float64s run plan, as if the
// policy had chosen it.
func force(g *Group, count int, plan algo.Plan) {
	g.mu.Lock()
	g.mu.plans[schedKey{opAllReduce, count, 8, -1}] = planned{plan, plan.Schedule(g.rank)}
	g.mu.Unlock()
}

// checkF64 compares got with want(i) element by element.
func checkF64(what string, got []float64, want func(i int) float64) error {
	for i, v := range got {
		if v != want(i) {
			return fmt.Errorf("%s: element %d is %v, want %v", what, i, v, want(i))
		}
	}
	return nil
}

func checkF32(what string, got []float32, want func(i int) float32) error {
	for i, v := range got {
		if v != want(i) {
			return fmt.Errorf("%s: element %d is %v, want %v", what, i, v, want(i))
		}
	}
	return nil
}

func runScale(t *testing.T, w int) {
	j := &scaleJob{t: t, w: w, start: time.Now()}
	j.mesh = transport.NewInProc(w, transport.Faults{})
	j.gs = make([]*Group, w)
	// A call's timeout catches a hang; at 16,384 ranks on two CPUs the
	// calls that move W² data in all (all_gather, Split's gather of
	// every color and key: 4 GiB) take a minute or more by right.
	timeout := time.Minute
	if w > 4096 {
		timeout = 5 * time.Minute
		// About 6 GiB stay live after the collectives (393 KiB a rank)
		// and Split gathers 4 GiB more: at the default GOGC the heap
		// would grow past this machine's 24 GiB before collecting.
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(16 << 30))
	}
	for r, ep := range j.mesh.Endpoints {
		j.gs[r] = FromEndpoint(ep, nil, "inproc", timeout)
	}
	t.Logf("W=%d %-40s %v", w, "init", time.Since(j.start).Round(time.Millisecond))
	defer func() {
		start := time.Now()
		for _, g := range j.gs {
			g.Destroy()
		}
		t.Logf("W=%d %-40s %v", w, "destroy", time.Since(start).Round(time.Millisecond))
	}()
	j.heap("init")
	sum := float64(w) * float64(w+1) / 2 // of 1..W

	j.each("barrier", func(ctx context.Context, r int, g *Group) error { return g.Barrier(ctx) })

	// All-reduce: the policy's choice at 8 elements, then each algorithm.
	const n = 8
	allReduce := func(ctx context.Context, r int, g *Group) error {
		x := tensor.New(tensor.Float64, n)
		for i := range n {
			x.Float64s()[i] = float64(r+1) + float64(i)*float64(r%3)
		}
		if err := g.AllReduce(ctx, x, Sum); err != nil {
			return err
		}
		var thirds float64 // sum of r%3 over the ranks
		for q := range w {
			thirds += float64(q % 3)
		}
		return checkF64("all_reduce", x.Float64s(), func(i int) float64 { return sum + float64(i)*thirds })
	}
	c, _ := j.gs[0].Choice("all_reduce", n, tensor.Float64)
	j.each("all_reduce (policy: "+c.Algo+")", allReduce)
	t.Logf("W=%d init, barrier and the first all-reduce: %v", w, time.Since(j.start).Round(time.Millisecond))
	hosts := make([]int, w)
	for r := range hosts {
		hosts[r] = r / 16
	}
	topo := algo.NewTopology(hosts)
	plans := []algo.Plan{
		{Name: "recursive-doubling", Segments: 1, Schedule: func(r int) algo.Schedule { return algo.RecursiveDoublingAllReduce(r, w, n) }},
		{Name: "halving-doubling", Segments: 1, Schedule: func(r int) algo.Schedule { return algo.HalvingDoublingAllReduce(r, w, n) }},
		{Name: "two-level (16 a host)", Segments: 1, Schedule: func(r int) algo.Schedule { return algo.TwoLevelAllReduce(r, topo, n, 1) }},
		{Name: "leader (16 a host)", Segments: 1, Schedule: func(r int) algo.Schedule { return algo.LeaderAllReduce(r, topo, n) }},
	}
	if w <= 1024 {
		// 2(W-1) steps: a ring is for large messages on few ranks.
		plans = append(plans, algo.Plan{Name: "ring", Segments: 1, Schedule: func(r int) algo.Schedule { return algo.RingAllReduce(r, w, n, 1) }})
	}
	for _, p := range plans {
		for _, g := range j.gs {
			force(g, n, p)
		}
		j.each("all_reduce "+p.Name, allReduce)
	}
	for _, g := range j.gs {
		g.mu.Lock()
		clear(g.mu.plans)
		g.mu.Unlock()
	}

	j.each("broadcast from the last rank", func(ctx context.Context, r int, g *Group) error {
		x := tensor.New(tensor.Float64, n)
		if r == w-1 {
			for i := range n {
				x.Float64s()[i] = float64(i) + 0.5
			}
		}
		if err := g.Broadcast(ctx, x, w-1); err != nil {
			return err
		}
		return checkF64("broadcast", x.Float64s(), func(i int) float64 { return float64(i) + 0.5 })
	})
	j.each("all_gather_into_tensor (1 a rank)", func(ctx context.Context, r int, g *Group) error {
		out := tensor.New(tensor.Float32, w)
		if err := g.AllGatherIntoTensor(ctx, out, tensor.FromFloat32([]float32{float32(r)})); err != nil {
			return err
		}
		return checkF32("all_gather", out.Float32s(), func(i int) float32 { return float32(i) })
	})
	j.each("reduce_scatter_tensor (1 a rank)", func(ctx context.Context, r int, g *Group) error {
		in := tensor.New(tensor.Float32, w)
		for i := range w {
			in.Float32s()[i] = 1
		}
		in.Float32s()[r] = 2
		out := tensor.New(tensor.Float32, 1)
		if err := g.ReduceScatterTensor(ctx, out, in, Sum); err != nil {
			return err
		}
		return checkF32("reduce_scatter", out.Float32s(), func(int) float32 { return float32(w + 1) })
	})
	// One float32 to each rank, equal splits: Bruck's algorithm, log₂W
	// rounds of W/2 blocks (the pairwise exchange would be W² messages,
	// every pair connected).
	j.each("all_to_all_single (1 to each rank)", func(ctx context.Context, r int, g *Group) error {
		in, out := tensor.New(tensor.Float32, w), tensor.New(tensor.Float32, w)
		for i := range w {
			in.Float32s()[i] = float32(r)
		}
		if err := g.AllToAllSingle(ctx, out, in, nil, nil); err != nil {
			return err
		}
		return checkF32("all_to_all", out.Float32s(), func(i int) float32 { return float32(i) })
	})
	j.heap("the collectives")

	// Groups: W/64 contiguous ones, and 64 strided ones.
	split := func(name string, color func(r int) int) {
		subs := make([]*Group, w)
		j.each("split "+name, func(ctx context.Context, r int, g *Group) error {
			sg, err := g.Split(ctx, color(r), r)
			subs[r] = sg
			return err
		})
		j.each("all_reduce in each group of "+name, func(ctx context.Context, r int, g *Group) error {
			sg := subs[r]
			x := tensor.FromFloat64([]float64{float64(r)})
			if err := sg.AllReduce(ctx, x, Sum); err != nil {
				return err
			}
			var want float64
			for _, m := range sg.Ranks() {
				if color(m) != color(r) {
					return fmt.Errorf("group of color %d holds rank %d of color %d", color(r), m, color(m))
				}
				want += float64(m)
			}
			return checkF64("subgroup all_reduce", x.Float64s(), func(int) float64 { return want })
		})
		for _, sg := range subs {
			sg.Destroy()
		}
	}
	split("64 contiguous", func(r int) int { return r / 64 })
	split("strided by 64", func(r int) int { return r % 64 })

	type obj struct {
		Step int
		Name string
	}
	j.each("broadcast_object", func(ctx context.Context, r int, g *Group) error {
		var v obj
		if r == 0 {
			v = obj{7, "ckpt"}
		}
		if err := BroadcastObject(ctx, g, &v, 0); err != nil {
			return err
		}
		if v != (obj{7, "ckpt"}) {
			return fmt.Errorf("broadcast_object: got %+v", v)
		}
		return nil
	})
	if w <= 256 {
		// W objects decoded by each rank: W² in all.
		j.each("all_gather_object", func(ctx context.Context, r int, g *Group) error {
			vs, err := AllGatherObject(ctx, g, obj{r, "r" + strconv.Itoa(r)})
			if err != nil {
				return err
			}
			for i, v := range vs {
				if v != (obj{i, "r" + strconv.Itoa(i)}) {
					return fmt.Errorf("all_gather_object: element %d is %+v", i, v)
				}
			}
			return nil
		})
	}
	j.each("monitored_barrier", func(ctx context.Context, r int, g *Group) error {
		return g.MonitoredBarrier(ctx, time.Minute, true)
	})
	j.heap("everything")

	// A rank killed in the middle of the job: every survivor's next
	// call names it.
	dead := w / 3
	killed := time.Now()
	j.mesh.Kill(dead)
	var slowest time.Duration
	var mu sync.Mutex
	j.each(fmt.Sprintf("barrier after rank %d is killed", dead), func(ctx context.Context, r int, g *Group) error {
		if r == dead {
			return nil
		}
		err := g.Barrier(ctx)
		var re *RankError
		if !errors.As(err, &re) || re.Rank != dead {
			return fmt.Errorf("barrier after rank %d was killed: %v, want a RankError naming it", dead, err)
		}
		mu.Lock()
		slowest = max(slowest, time.Since(killed))
		mu.Unlock()
		return nil
	})
	t.Logf("W=%d every survivor named the killed rank within %v", w, slowest.Round(time.Millisecond))
	if slowest > 2*time.Second && !raceEnabled {
		t.Errorf("W=%d: the killed rank was named by every survivor only after %v, want within 2 s", w, slowest)
	}
}
