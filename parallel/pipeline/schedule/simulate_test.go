package schedule

import (
	"errors"
	"math"
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
