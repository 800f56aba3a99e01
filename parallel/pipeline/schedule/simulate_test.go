package schedule

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12 }

func sim(t *testing.T, s *Schedule, c Costs) Result {
	t.Helper()
	res, err := Simulate(s, c)
	if err != nil {
		t.Fatalf("%v\n%v", err, s)
	}
	return res
}

// TestBubbleGPipe1F1B: with no latency, GPipe and 1F1B take
// (m+p-1)(F+B): the last micro-batch's forward reaches the last rank after
// p-1 forwards and its backward returns after p-1 backwards. The bubble is
// (p-1)/(m+p-1), whatever B/F (B = 2F is the usual figure).
func TestBubbleGPipe1F1B(t *testing.T) {
	for _, c := range []Costs{{Forward: 1, Backward: 2}, {Forward: 1, Backward: 1}, {Forward: 1, Backward: 3.5}} {
		for p := 1; p <= 8; p++ {
			for m := 1; m <= 16; m++ {
				for _, s := range []*Schedule{must(GPipe(p, m)), must(OneFOneB(p, m))} {
					res := sim(t, s, c)
					fb := c.Forward + c.Backward
					if want := float64(m+p-1) * fb; res.Makespan != want {
						t.Errorf("%s %+v p=%d m=%d: makespan %v, want %v", s.Name, c, p, m, res.Makespan, want)
					}
					if want := float64(p-1) / float64(m+p-1); !near(res.Bubble, want) {
						t.Errorf("%s %+v p=%d m=%d: bubble %v, want %v", s.Name, c, p, m, res.Bubble, want)
					}
					for r, b := range res.Busy {
						if b != float64(m)*fb {
							t.Errorf("%s %+v p=%d m=%d: rank %d busy %v, want %v", s.Name, c, p, m, r, b, float64(m)*fb)
						}
					}
				}
			}
		}
	}
}

// TestBubbleInterleaved: with v chunks per rank, a chunk's forward and
// backward costing F/v and B/v and m a multiple of p, Megatron's
// interleaved schedule takes m(F+B) + (p-1)(F+B)/v: the fill and drain
// now cross p chunks of 1/v of the work each. The bubble is
// (p-1)/(v*m+p-1). This holds for m = p too, where every rank runs all
// forwards first, and for v = 1, where it is 1F1B's.
func TestBubbleInterleaved(t *testing.T) {
	for p := 1; p <= 8; p++ {
		for v := 1; v <= 4; v++ {
			for m := p; m <= 16; m += p {
				s := must(Interleaved1F1B(p, v, m))
				res := sim(t, s, Costs{Forward: 1 / float64(v), Backward: 2 / float64(v)})
				if want := 3 * (float64(m) + float64(p-1)/float64(v)); !near(res.Makespan, want) {
					t.Errorf("p=%d v=%d m=%d: makespan %v, want %v", p, v, m, res.Makespan, want)
				}
				if want := float64(p-1) / float64(v*m+p-1); !near(res.Bubble, want) {
					t.Errorf("p=%d v=%d m=%d: bubble %v, want %v", p, v, m, res.Bubble, want)
				}
			}
		}
	}
}

// TestBubbleZBH1: with F = BI = BW = 1 and m >= p, ZB-H1 takes 3m+p-1:
// each rank idles p-1 = (p-1)(F+BI-BW), a third of 1F1B's idle time
// (p-1)(F+B) with B = BI+BW = 2. With m < p there are too few weight
// passes to fill the drain and it takes 2m+2p-1 (measured here, and
// still less than 1F1B's 3(m+p-1) for p > 1).
func TestBubbleZBH1(t *testing.T) {
	for p := 1; p <= 8; p++ {
		for m := 1; m <= 16; m++ {
			zb := sim(t, must(ZBH1(p, m)), Costs{Forward: 1, BackwardInput: 1, BackwardWeight: 1})
			one := sim(t, must(OneFOneB(p, m)), Costs{Forward: 1, Backward: 2})
			want := float64(max(3*m+p-1, 2*m+2*p-1))
			if zb.Makespan != want {
				t.Errorf("p=%d m=%d: makespan %v, want %v", p, m, zb.Makespan, want)
			}
			if w := 1 - float64(3*m)/want; !near(zb.Bubble, w) {
				t.Errorf("p=%d m=%d: bubble %v, want %v", p, m, zb.Bubble, w)
			}
			if m >= p && !near(3*(zb.Makespan-float64(3*m)), one.Makespan-float64(3*m)) {
				t.Errorf("p=%d m=%d: idle time %v per rank, want a third of 1F1B's %v", p, m, zb.Makespan-float64(3*m), one.Makespan-float64(3*m))
			}
			if p > 1 && !(zb.Bubble < one.Bubble) {
				t.Errorf("p=%d m=%d: ZB-H1 bubble %v not below 1F1B's %v", p, m, zb.Bubble, one.Bubble)
			}
		}
	}
}

// TestPeakActivations: GPipe holds all m micro-batches on every rank;
// 1F1B's rank r holds min(p-r, m); ZB-H1 holds min(p, m) on every rank
// (its later ranks keep micro-batches until their put-off weight passes),
// so its peak over the ranks is 1F1B's; interleaved rank r holds its
// warm-up forwards plus one, at most all m*v.
func TestPeakActivations(t *testing.T) {
	c := Costs{Forward: 1, Backward: 2, BackwardInput: 1, BackwardWeight: 1}
	for p := 1; p <= 8; p++ {
		for m := 1; m <= 16; m++ {
			gp := sim(t, must(GPipe(p, m)), c).PeakActivations
			one := sim(t, must(OneFOneB(p, m)), c).PeakActivations
			zb := sim(t, must(ZBH1(p, m)), c).PeakActivations
			for r := range p {
				if gp[r] != m {
					t.Errorf("gpipe p=%d m=%d rank %d: peak %d, want %d", p, m, r, gp[r], m)
				}
				if want := min(p-r, m); one[r] != want {
					t.Errorf("1f1b p=%d m=%d rank %d: peak %d, want %d", p, m, r, one[r], want)
				}
				if want := min(p, m); zb[r] != want {
					t.Errorf("zbh1 p=%d m=%d rank %d: peak %d, want %d", p, m, r, zb[r], want)
				}
				if m == 8 && one[r] > gp[r] {
					t.Errorf("p=%d m=8 rank %d: 1F1B peak %d above GPipe's %d", p, r, one[r], gp[r])
				}
			}
			if one[0] != zb[0] {
				t.Errorf("p=%d m=%d: ZB-H1 peak %d, 1F1B's %d", p, m, zb[0], one[0])
			}
			if m%p != 0 {
				continue
			}
			for v := 1; v <= 4; v++ {
				il := sim(t, must(Interleaved1F1B(p, v, m)), c).PeakActivations
				for r := range p {
					var want int
					switch {
					case v == 1:
						want = min(p-r, m)
					case m == p:
						want = m * v
					default:
						want = min((p-1-r)*2+(v-1)*p+1, m*v)
					}
					if il[r] != want {
						t.Errorf("interleaved p=%d v=%d m=%d rank %d: peak %d, want %d", p, v, m, r, il[r], want)
					}
				}
			}
		}
	}
}

// TestComm: 1F1B on two ranks, F = 1, B = 2, latency c. By hand for m = 2:
//
//	rank 0: F0.0 [0,1] F0.1 [1,2]               B0.0 [4+2c,6+2c]  B0.1 [7+2c,9+2c]
//	rank 1: F1.0 [1+c,2+c] B1.0 [2+c,4+c] F1.1 [4+c,5+c] B1.1 [5+c,7+c]
//
// (B0.0 waits for the gradient sent at 4+c, B0.1 for the one sent at
// 7+c), so the step takes 9+2c. In general every second micro-batch adds
// a round trip, 2c: rank 1's forward of micro-batch i+2 waits for rank 0's
// backward of i, which waits for rank 1's backward of i, so the step takes
// 3(m+1) + 2c*ceil(m/2).
func TestComm(t *testing.T) {
	for _, c := range []float64{0, 0.25, 0.5, 1, 3, 10} {
		res := sim(t, must(OneFOneB(2, 2)), Costs{Forward: 1, Backward: 2, Comm: c})
		if want := 9 + 2*c; res.Makespan != want {
			t.Errorf("m=2 c=%v: makespan %v, want %v", c, res.Makespan, want)
		}
		b00 := res.Timeline[0][5] // F0.0 SendAct0.0@1 F0.1 SendAct0.1@1 RecvGrad0.0@1 B0.0
		if b00.Action != compute(Backward, 0, 0) || b00.Start != 4+2*c || b00.End != 6+2*c {
			t.Errorf("m=2 c=%v: %v, want B0.0 [%v,%v]", c, b00, 4+2*c, 6+2*c)
		}
		for m := 1; m <= 8; m++ {
			res := sim(t, must(OneFOneB(2, m)), Costs{Forward: 1, Backward: 2, Comm: c})
			if want := float64(3*(m+1)) + 2*c*float64((m+1)/2); res.Makespan != want {
				t.Errorf("m=%d c=%v: makespan %v, want %v", m, c, res.Makespan, want)
			}
		}
	}
}

// TestTimeline checks every simulated timeline against the model: spans
// in program order without overlap, computations as long as their cost,
// receives ending no earlier than their send plus the latency, busy time
// the sum of the computations, makespan the last end.
func TestTimeline(t *testing.T) {
	c := Costs{Forward: 1, Backward: 2.5, BackwardInput: 1.25, BackwardWeight: 1.25, Comm: 0.5}
	each(t, func(t *testing.T, s *Schedule, _ int) {
		res := sim(t, s, c)
		sentAt := make(map[key]float64)
		for r, spans := range res.Timeline {
			for _, sp := range spans {
				if a := sp.Action; a.Kind == SendAct || a.Kind == SendGrad {
					sentAt[key{a.Kind, a.Stage, a.Micro}] = sp.Start
				}
			}
			if len(spans) != len(s.Programs[r]) {
				t.Fatalf("%s rank %d: %d spans for %d actions", s.Name, r, len(spans), len(s.Programs[r]))
			}
		}
		last := 0.0
		for r, spans := range res.Timeline {
			at, busy := 0.0, 0.0
			for i, sp := range spans {
				a := sp.Action
				if a != s.Programs[r][i] || sp.Start != at || sp.End < sp.Start {
					t.Fatalf("%s rank %d span %d: %v [%v,%v] after %v", s.Name, r, i, a, sp.Start, sp.End, at)
				}
				switch a.Kind {
				case SendAct, SendGrad:
					if sp.End != sp.Start {
						t.Fatalf("%s rank %d span %d: send %v takes time", s.Name, r, i, a)
					}
				case RecvAct, RecvGrad:
					if ready := sentAt[sender(a)] + c.Comm; sp.End < ready || (sp.End > sp.Start && sp.End != ready) {
						t.Fatalf("%s rank %d span %d: %v ends at %v, data ready at %v", s.Name, r, i, a, sp.End, ready)
					}
				default:
					if sp.End-sp.Start != c.of(a) {
						t.Fatalf("%s rank %d span %d: %v takes %v", s.Name, r, i, a, sp.End-sp.Start)
					}
					busy += c.of(a)
				}
				at = sp.End
			}
			if !near(busy, res.Busy[r]) {
				t.Fatalf("%s rank %d: busy %v, spans say %v", s.Name, r, res.Busy[r], busy)
			}
			last = max(last, at)
		}
		if last != res.Makespan {
			t.Fatalf("%s: makespan %v, last span ends at %v", s.Name, res.Makespan, last)
		}
	})
}

func TestSimulateErrors(t *testing.T) {
	s := must(OneFOneB(2, 1))
	if _, err := Simulate(s, Costs{Forward: 1, Backward: -1}); !errors.Is(err, ErrArgument) {
		t.Errorf("negative cost: %v", err)
	}
	if _, err := Simulate(s, Costs{Forward: math.NaN()}); !errors.Is(err, ErrArgument) {
		t.Errorf("NaN cost: %v", err)
	}
	d := clone(s)
	p := d.Programs[0] // F0.0 SendAct0.0@1 RecvGrad0.0@1 B0.0
	p[0], p[1], p[2] = p[2], p[0], p[1]
	if _, err := Simulate(d, Costs{Forward: 1, Backward: 2}); !errors.Is(err, ErrDeadlock) {
		t.Errorf("deadlocked schedule: %v", err)
	}
	res := sim(t, s, Costs{})
	if res.Makespan != 0 || res.Bubble != 0 {
		t.Errorf("free actions: makespan %v, bubble %v", res.Makespan, res.Bubble)
	}
}

// diff returns where two results differ by more than 1e-9, "" when they
// do not.
func diff(a, b Result) string {
	far := func(x, y float64) bool { return math.Abs(x-y) > 1e-9 }
	switch {
	case far(a.Makespan, b.Makespan):
		return fmt.Sprintf("makespan %v, want %v", a.Makespan, b.Makespan)
	case far(a.Bubble, b.Bubble):
		return fmt.Sprintf("bubble %v, want %v", a.Bubble, b.Bubble)
	case !slices.Equal(a.PeakActivations, b.PeakActivations):
		return fmt.Sprintf("peak activations %v, want %v", a.PeakActivations, b.PeakActivations)
	case len(a.Busy) != len(b.Busy) || len(a.Timeline) != len(b.Timeline):
		return fmt.Sprintf("%d ranks busy, %d timelines; want %d, %d", len(a.Busy), len(a.Timeline), len(b.Busy), len(b.Timeline))
	}
	for r := range a.Busy {
		if far(a.Busy[r], b.Busy[r]) {
			return fmt.Sprintf("rank %d busy %v, want %v", r, a.Busy[r], b.Busy[r])
		}
		if len(a.Timeline[r]) != len(b.Timeline[r]) {
			return fmt.Sprintf("rank %d: %d spans, want %d", r, len(a.Timeline[r]), len(b.Timeline[r]))
		}
		for i, x := range a.Timeline[r] {
			if y := b.Timeline[r][i]; x.Action != y.Action || far(x.Start, y.Start) || far(x.End, y.End) {
				return fmt.Sprintf("rank %d span %d: %v [%v,%v], want %v [%v,%v]", r, i, x.Action, x.Start, x.End, y.Action, y.Start, y.End)
			}
		}
	}
	return ""
}

// uneven returns per-stage costs that differ from stage to stage (the
// first and last heavier, as a GPT's embeddings and head make them).
func uneven(stages int) []StageCosts {
	out := make([]StageCosts, stages)
	for k := range out {
		f := 1 + 0.25*float64(k%3)
		if k == 0 {
			f += 0.5
		}
		if k == stages-1 {
			f += 1.5
		}
		out[k] = StageCosts{Forward: f, Backward: 2 * f, BackwardInput: 1.25 * f, BackwardWeight: 0.75 * f}
	}
	return out
}

// TestCoresEnough: with at least as many cores as ranks no rank ever
// waits for a processor, so the event-driven simulation gives exactly the
// results of the one that gives each rank its own, for every schedule and
// size, with and without latency and per-stage costs.
func TestCoresEnough(t *testing.T) {
	each(t, func(t *testing.T, s *Schedule, _ int) {
		for _, c := range []Costs{
			{Forward: 1, Backward: 2.5, BackwardInput: 1.25, BackwardWeight: 1.25, Comm: 0.5},
			{Forward: 1, Backward: 2, BackwardInput: 1, BackwardWeight: 1},
			{Comm: 0.3, Stages: uneven(s.Stages)},
		} {
			own := sim(t, s, c)
			for _, cores := range []int{s.Ranks, s.Ranks + 3} {
				c.Cores = cores
				if d := diff(sim(t, s, c), own); d != "" {
					t.Fatalf("%s p=%d m=%d cores=%d comm=%v: %s", s.Name, s.Ranks, s.Micros, cores, c.Comm, d)
				}
			}
		}
	})
}

// TestStagesEqual: per-stage costs all equal to the scalar ones time a
// schedule exactly as the scalars do, on processors of their own or
// shared.
func TestStagesEqual(t *testing.T) {
	scalar := Costs{Forward: 1, Backward: 2.5, BackwardInput: 1.5, BackwardWeight: 1, Comm: 0.25}
	each(t, func(t *testing.T, s *Schedule, _ int) {
		per := scalar
		per.Stages = make([]StageCosts, s.Stages)
		for k := range per.Stages {
			per.Stages[k] = StageCosts{scalar.Forward, scalar.Backward, scalar.BackwardInput, scalar.BackwardWeight}
		}
		per.Forward, per.Backward = 7, 9 // ignored when Stages is set
		for _, cores := range []int{0, 1, 2} {
			a, b := scalar, per
			a.Cores, b.Cores = cores, cores
			if d := diff(sim(t, s, b), sim(t, s, a)); d != "" {
				t.Fatalf("%s p=%d m=%d cores=%d: %s", s.Name, s.Ranks, s.Micros, cores, d)
			}
		}
	})
}

// wantSpans checks res's timeline against [start, end] pairs per rank.
func wantSpans(t *testing.T, what string, res Result, want [][][2]float64) {
	t.Helper()
	for r, spans := range want {
		if len(res.Timeline[r]) != len(spans) {
			t.Fatalf("%s rank %d: %d spans, want %d", what, r, len(res.Timeline[r]), len(spans))
		}
		for i, w := range spans {
			if sp := res.Timeline[r][i]; !near(sp.Start, w[0]) || !near(sp.End, w[1]) {
				t.Errorf("%s rank %d: %v [%v,%v], want [%v,%v]", what, r, sp.Action, sp.Start, sp.End, w[0], w[1])
			}
		}
	}
}

// TestOneCore: GPipe on two ranks, two micro-batches, F = 1, B = 2, one
// core. By hand (rate 1/2 while both ranks compute):
//
//	[0,1]  rank 0 alone: F0.0
//	[1,3]  both: F0.1 and F1.0, a unit of work each at half speed
//	[3,4]  rank 1 alone (rank 0 waits for a gradient): F1.1
//	[4,6]  rank 1 alone: B1.0, which sends the gradient at 6
//	[6,10] both: B0.0 and B1.1, two units each at half speed
//	[10,12] rank 0 alone: B0.1
//
// The core never idles, so the step takes the total work 2·2·(1+2) = 12,
// against (m+p-1)(F+B) = 9 with a core per rank, and the bubble is
// 1 - 12/(2·12) = 1/2 = 1 - Cores/Ranks, its least.
func TestOneCore(t *testing.T) {
	res := sim(t, must(GPipe(2, 2)), Costs{Forward: 1, Backward: 2, Cores: 1})
	if res.Makespan != 12 || res.Bubble != 0.5 {
		t.Errorf("makespan %v, bubble %v; want 12, 0.5", res.Makespan, res.Bubble)
	}
	if !slices.Equal(res.Busy, []float64{6, 6}) {
		t.Errorf("busy %v, want [6 6]", res.Busy)
	}
	wantSpans(t, "gpipe p=2 m=2 one core", res, [][][2]float64{
		// F0.0 SendAct0.0 F0.1 SendAct0.1 RecvGrad0.0 B0.0 RecvGrad0.1 B0.1
		{{0, 1}, {1, 1}, {1, 3}, {3, 3}, {3, 6}, {6, 10}, {10, 10}, {10, 12}},
		// RecvAct1.0 F1.0 RecvAct1.1 F1.1 B1.0 SendGrad1.0 B1.1 SendGrad1.1
		{{0, 1}, {1, 3}, {3, 3}, {3, 4}, {4, 6}, {6, 6}, {6, 10}, {10, 10}},
	})

	// In general, with one core and no latency the core idles only when
	// every unfinished rank waits for data that was never sent, a
	// deadlock; so every schedule takes exactly its total work.
	each(t, func(t *testing.T, s *Schedule, _ int) {
		for _, c := range []Costs{
			{Forward: 1, Backward: 2, BackwardInput: 1.25, BackwardWeight: 0.75, Cores: 1},
			{Stages: uneven(s.Stages), Cores: 1},
		} {
			res := sim(t, s, c)
			total := 0.0
			for _, b := range res.Busy {
				total += b
			}
			if math.Abs(res.Makespan-total) > 1e-9*total {
				t.Fatalf("%s p=%d m=%d: makespan %v with one core, want the total work %v", s.Name, s.Ranks, s.Micros, res.Makespan, total)
			}
		}
	})
}

// TestStageCosts: 1F1B on two ranks, two micro-batches, stage 0 costing
// F = 1, B = 2 and stage 1 twice that, F = 2, B = 4. By hand:
//
//	rank 0: F0.0 [0,1] F0.1 [1,2]  (waits)  B0.0 [7,9]  (waits)  B0.1 [13,15]
//	rank 1: F1.0 [1,3] B1.0 [3,7] F1.1 [7,9] B1.1 [9,13]
//
// Rank 1, the bottleneck, computes without a break from 1 to 13; the step
// is its work m(F1+B1) = 12 plus stage 0's forward before it and backward
// after it, 1 + 12 + 2 = 15, where stages costing the average (1.5, 3)
// would take (m+p-1)(F+B) = 13.5. Busy is 6 and 12, so the bubble is
// 1 - 18/30 = 0.4.
func TestStageCosts(t *testing.T) {
	c := Costs{Stages: []StageCosts{{Forward: 1, Backward: 2}, {Forward: 2, Backward: 4}}}
	res := sim(t, must(OneFOneB(2, 2)), c)
	if res.Makespan != 15 || !near(res.Bubble, 0.4) || !slices.Equal(res.Busy, []float64{6, 12}) {
		t.Errorf("makespan %v, bubble %v, busy %v; want 15, 0.4, [6 12]", res.Makespan, res.Bubble, res.Busy)
	}
	wantSpans(t, "1f1b p=2 m=2 stage 1 doubled", res, [][][2]float64{
		// F0.0 SendAct0.0 F0.1 SendAct0.1 RecvGrad0.0 B0.0 RecvGrad0.1 B0.1
		{{0, 1}, {1, 1}, {1, 2}, {2, 2}, {2, 7}, {7, 9}, {9, 13}, {13, 15}},
		// RecvAct1.0 F1.0 B1.0 SendGrad1.0 RecvAct1.1 F1.1 B1.1 SendGrad1.1
		{{0, 1}, {1, 3}, {3, 7}, {7, 7}, {7, 7}, {7, 9}, {9, 13}, {13, 13}},
	})
	even := sim(t, must(OneFOneB(2, 2)), Costs{Forward: 1.5, Backward: 3})
	if even.Makespan != 13.5 {
		t.Errorf("average stages: makespan %v, want 13.5", even.Makespan)
	}
}

// TestShared: with fewer cores than ranks no step can beat the total
// work over the cores, nor the step on a processor per rank (sharing
// only slows computations down, and every start is a max of earlier
// ends), and the bubble is at least 1 - Cores/Ranks. And the timelines
// obey the model: each computation gets exactly its nominal work from
// the rate min(1, Cores/k) it was given while k ranks were computing.
func TestShared(t *testing.T) {
	each(t, func(t *testing.T, s *Schedule, _ int) {
		if s.Ranks < 2 {
			return
		}
		for _, c := range []Costs{
			{Forward: 1, Backward: 2, BackwardInput: 1.25, BackwardWeight: 0.75},
			{Comm: 0.5, Stages: uneven(s.Stages)},
		} {
			own := sim(t, s, c)
			for cores := 1; cores < s.Ranks; cores++ {
				if cores > 2 && s.Ranks != 4 && cores != s.Ranks-1 {
					continue // keep the test short: all of 4 ranks, 1, 2 and p-1 elsewhere
				}
				c.Cores = cores
				res := sim(t, s, c)
				what := fmt.Sprintf("%s p=%d m=%d cores=%d comm=%v", s.Name, s.Ranks, s.Micros, cores, c.Comm)
				total := 0.0
				for _, b := range res.Busy {
					total += b
				}
				// Busy counts nominal work; peaks follow program order.
				if !slices.Equal(res.Busy, own.Busy) || !slices.Equal(res.PeakActivations, own.PeakActivations) {
					t.Fatalf("%s: busy %v, peaks %v; want %v, %v as with a core per rank", what, res.Busy, res.PeakActivations, own.Busy, own.PeakActivations)
				}
				if res.Makespan < total/float64(cores)-1e-9 || res.Makespan < own.Makespan-1e-9 {
					t.Fatalf("%s: makespan %v below the total work over the cores %v or the makespan with a core per rank %v", what, res.Makespan, total/float64(cores), own.Makespan)
				}
				if least := 1 - float64(cores)/float64(s.Ranks); res.Bubble < least-1e-9 {
					t.Fatalf("%s: bubble %v below 1 - Cores/Ranks = %v", what, res.Bubble, least)
				}
				checkShared(t, what, s, c, res)
			}
		}
	})
}

// checkShared checks a timeline simulated with c.Cores > 0: spans in
// program order without gaps, receives ending when their data arrives,
// and each computation's nominal cost equal to the integral of the rate
// min(1, Cores/k(t)) over its span, k(t) counting the computations in
// progress at t.
func checkShared(t *testing.T, what string, s *Schedule, c Costs, res Result) {
	t.Helper()
	sentAt := make(map[key]float64)
	var comp []Span
	for _, spans := range res.Timeline {
		for _, sp := range spans {
			if a := sp.Action; a.Kind == SendAct || a.Kind == SendGrad {
				sentAt[key{a.Kind, a.Stage, a.Micro}] = sp.Start
			} else if a.Kind.Compute() {
				comp = append(comp, sp)
			}
		}
	}
	last := 0.0
	for r, spans := range res.Timeline {
		at := 0.0
		for i, sp := range spans {
			a := sp.Action
			if a != s.Programs[r][i] || sp.Start != at || sp.End < sp.Start {
				t.Fatalf("%s rank %d span %d: %v [%v,%v] after %v", what, r, i, a, sp.Start, sp.End, at)
			}
			if a.Kind == RecvAct || a.Kind == RecvGrad {
				if want := max(sp.Start, sentAt[sender(a)]+c.Comm); sp.End != want {
					t.Fatalf("%s rank %d span %d: %v ends at %v, want %v", what, r, i, a, sp.End, want)
				}
			}
			at = sp.End
		}
		last = max(last, at)
	}
	if last != res.Makespan {
		t.Fatalf("%s: makespan %v, last span ends at %v", what, res.Makespan, last)
	}

	// work(x) is the nominal work one computation in progress from 0 to x
	// would do: the integral of the rate, piecewise constant between the
	// starts and ends of the computations.
	var times []float64
	for _, sp := range comp {
		times = append(times, sp.Start, sp.End)
	}
	slices.Sort(times)
	times = slices.Compact(times)
	starts, ends := make([]float64, len(comp)), make([]float64, len(comp))
	for i, sp := range comp {
		starts[i], ends[i] = sp.Start, sp.End
	}
	slices.Sort(starts)
	slices.Sort(ends)
	work := make([]float64, len(times))
	si, ei := 0, 0
	for i := 1; i < len(times); i++ {
		a := times[i-1]
		for si < len(starts) && starts[si] <= a {
			si++
		}
		for ei < len(ends) && ends[ei] <= a {
			ei++
		}
		rate := min(1, float64(c.Cores)/float64(max(si-ei, 1)))
		work[i] = work[i-1] + rate*(times[i]-a)
	}
	workAt := func(x float64) float64 {
		i, _ := slices.BinarySearch(times, x)
		return work[i]
	}
	for _, sp := range comp {
		cost := c.of(sp.Action)
		if got := workAt(sp.End) - workAt(sp.Start); math.Abs(got-cost) > 1e-9*max(1, cost) {
			t.Fatalf("%s: %v [%v,%v] did %v of its %v work", what, sp.Action, sp.Start, sp.End, got, cost)
		}
	}
}

func TestSimulateCostErrors(t *testing.T) {
	s := must(Interleaved1F1B(2, 2, 2)) // 4 stages
	for _, c := range []Costs{
		{Forward: 1, Stages: make([]StageCosts, 2)},
		{Forward: 1, Stages: []StageCosts{}},
		{Stages: []StageCosts{{}, {}, {Backward: -1}, {}}},
		{Stages: []StageCosts{{}, {}, {}, {BackwardWeight: math.NaN()}}},
		{Forward: 1, Backward: 2, Cores: -1},
	} {
		if _, err := Simulate(s, c); !errors.Is(err, ErrArgument) {
			t.Errorf("%+v: %v, want an error wrapping ErrArgument", c, err)
		}
	}
	if _, err := Simulate(s, Costs{Stages: make([]StageCosts, 4), Cores: 1}); err != nil {
		t.Errorf("4 free stages on one core: %v", err)
	}
}
