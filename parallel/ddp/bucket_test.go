package ddp

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestPlanBuckets(t *testing.T) {
	sizes := []int64{40, 10, 30, 30, 100, 5}
	order := []int{5, 4, 3, 2, 1, 0}
	got := PlanBuckets(order, sizes, 20, 60)
	want := [][]int{{5}, {4}, {3, 2}, {1, 0}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	// Every parameter exactly once, order kept, caps respected.
	for _, cap := range []int64{1, 25, 50, 1000} {
		plan := PlanBuckets(order, sizes, cap/2+1, cap)
		var flat []int
		for b, ps := range plan {
			var n int64
			for _, p := range ps {
				n += sizes[p]
			}
			limit := cap
			if b == 0 {
				limit = cap/2 + 1
			}
			if n > limit && len(ps) > 1 {
				t.Fatalf("cap %d: bucket %d has %d bytes in %d parameters", cap, b, n, len(ps))
			}
			flat = append(flat, ps...)
		}
		if !slices.Equal(flat, order) {
			t.Fatalf("cap %d: plan %v loses the order %v", cap, plan, order)
		}
	}
	if len(PlanBuckets(nil, nil, 1, 1)) != 0 {
		t.Fatal("empty plan has buckets")
	}
}

// linkCost is an all-reduce of b bytes at latency alpha and bandwidth
// bytesPerS.
func linkCost(alpha time.Duration, bytesPerS float64) func(int64) time.Duration {
	return func(b int64) time.Duration { return alpha + time.Duration(float64(b)/bytesPerS*1e9) }
}

func TestSimulateBuckets(t *testing.T) {
	sizes := []int64{100, 100, 100}
	ready := []time.Duration{0, 10, 20}
	cost := func(b int64) time.Duration { return 5 + time.Duration(b/10) }
	// Apart: 0-15, 15-30, 30-45, so 25 after the last gradient (at 20).
	if got := simulateBuckets([][]int{{0}, {1}, {2}}, sizes, ready, cost); got != 25 {
		t.Errorf("three buckets: exposed %d, want 25", got)
	}
	// Together: 20-55.
	if got := simulateBuckets([][]int{{0, 1, 2}}, sizes, ready, cost); got != 35 {
		t.Errorf("one bucket: exposed %d, want 35", got)
	}
	// A bucket launches only after the one before it is ready: {2} is
	// ready at 20 and goes first, so {0} (ready at 0) waits for it.
	if got := simulateBuckets([][]int{{2}, {0, 1}}, sizes, ready, cost); got != 15+25 {
		t.Errorf("out of order: exposed %d, want 40", got)
	}
}

func TestChooseBucketCaps(t *testing.T) {
	const kib, mib = 1 << 10, 1 << 20
	even := func(n int, size int64, step time.Duration) (order []int, sizes []int64, ready []time.Duration) {
		for i := range n {
			order = append(order, i)
			sizes = append(sizes, size)
			ready = append(ready, time.Duration(i)*step)
		}
		return
	}
	defaults := BucketCaps{mib, 25 * mib}

	// A slow link (1 Gbit/s) and a backward pass of 31 ms over 8 MiB of
	// gradients: small buckets start at once and hide most of backward,
	// where PyTorch's default sends 7 MiB after it.
	order, sizes, ready := even(32, 256*kib, time.Millisecond)
	slow := linkCost(50*time.Microsecond, 125e6)
	c := ChooseBucketCaps(order, sizes, ready, slow)
	def := simulateBuckets(PlanBuckets(order, sizes, defaults.First, defaults.Rest), sizes, ready, slow)
	if c.Caps.Rest > mib || c.Exposed >= def*3/4 {
		t.Errorf("slow link: chose %+v (exposed %v), default exposes %v: want caps of at most 1 MiB that hide a quarter more", c.Caps, c.Exposed, def)
	}

	// Latency that dwarfs the bytes: one bucket.
	c = ChooseBucketCaps(order, sizes, ready, linkCost(20*time.Millisecond, 1e12))
	if c.Buckets != 1 {
		t.Errorf("latency-bound: chose %+v in %d buckets, want one bucket", c.Caps, c.Buckets)
	}

	// Free communication: every choice exposes nothing but the last
	// bucket's cost; the fewest buckets win the tie.
	c = ChooseBucketCaps(order, sizes, ready, func(int64) time.Duration { return 0 })
	if c.Buckets != 1 || c.Exposed != 0 {
		t.Errorf("free links: chose %+v in %d buckets exposing %v, want one bucket", c.Caps, c.Buckets, c.Exposed)
	}

	// Random models and links: the answer is what it says (its plan
	// simulated), never worse than PyTorch's default beyond the 2% that
	// fewer buckets may cost, and its plan keeps every parameter.
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	for trial := range 200 {
		n := 1 + rng.IntN(60)
		order, sizes, ready := even(n, 0, 0)
		for i := range n {
			sizes[i] = 4 * (1 + rng.Int64N(1<<rng.IntN(22)))
			ready[i] = time.Duration(rng.Int64N(int64(50 * time.Millisecond)))
		}
		slices.SortFunc(order, func(a, b int) int { return int(ready[a] - ready[b]) })
		cost := linkCost(time.Duration(rng.Int64N(int64(time.Millisecond))), 1e7+rng.Float64()*1e10)
		c := ChooseBucketCaps(order, sizes, ready, cost)
		plan := PlanBuckets(order, sizes, c.Caps.First, c.Caps.Rest)
		if got := simulateBuckets(plan, sizes, ready, cost); got != c.Exposed || len(plan) != c.Buckets {
			t.Fatalf("seed %d trial %d: chose %+v saying %v in %d buckets; its plan exposes %v in %d", seed, trial, c.Caps, c.Exposed, c.Buckets, got, len(plan))
		}
		def := simulateBuckets(PlanBuckets(order, sizes, defaults.First, defaults.Rest), sizes, ready, cost)
		if float64(c.Exposed) > 1.02*float64(def) {
			t.Fatalf("seed %d trial %d: chose %+v exposing %v, worse than the default's %v", seed, trial, c.Caps, c.Exposed, def)
		}
	}
}

func TestBucketShortlist(t *testing.T) {
	const kib = 1 << 10
	order := []int{0, 1, 2, 3}
	sizes := []int64{100 * kib, 100 * kib, 100 * kib, 100 * kib}
	options := BucketCaps{1 << 20, 25 << 20}
	// The options' caps hold all in one bucket; the model's 128 KiB cuts
	// a bucket a parameter; ×4 and ×16 both cut the first parameter and
	// the other three, so ×16 is left out.
	got := BucketShortlist(order, sizes, options, BucketCaps{128 * kib, 128 * kib})
	want := []BucketCaps{options, {128 * kib, 128 * kib}, {128 * kib, 512 * kib}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("shortlist %v, want %v", got, want)
	}
	// A model choice of one bucket: only the options' and it.
	if got := BucketShortlist(order, sizes, BucketCaps{kib, kib}, BucketCaps{1 << 20, 1 << 20}); len(got) != 2 {
		t.Errorf("shortlist %v, want two", got)
	}
}

func TestPickTrial(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	for _, c := range []struct {
		times [][]time.Duration
		want  int
	}{
		{[][]time.Duration{ms(10, 11, 12), ms(9, 30, 40)}, 0}, // the median, not the least
		{[][]time.Duration{ms(10, 11, 12), ms(50, 8, 9)}, 1},
		{[][]time.Duration{nil, ms(50)}, 1},
		{[][]time.Duration{ms(5), ms(5)}, 0}, // a tie keeps the first
		{[][]time.Duration{nil, nil}, -1},
	} {
		if got := PickTrial(c.times); got != c.want {
			t.Errorf("PickTrial(%v) = %d, want %d", c.times, got, c.want)
		}
	}
}
