package schedule

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// each calls f with every schedule the constructors build for ranks 1..8,
// chunks 1..4 (interleaved only) and micro-batches 1..16, and checks that
// a constructor refuses exactly the arguments its doc says it refuses.
func each(t *testing.T, f func(t *testing.T, s *Schedule, chunks int)) {
	t.Helper()
	for _, name := range Names {
		for p := 1; p <= 8; p++ {
			for v := 1; v <= 4; v++ {
				if name != "interleaved1f1b" && v > 1 {
					continue
				}
				for m := 1; m <= 16; m++ {
					s, err := ByName(name, p, v, m)
					refuse := name == "interleaved1f1b" && m%p != 0
					if refuse != (err != nil) {
						t.Fatalf("ByName(%q, %d, %d, %d): error %v, want one: %v", name, p, v, m, err, refuse)
					}
					if err != nil {
						if !errors.Is(err, ErrArgument) {
							t.Fatalf("ByName(%q, %d, %d, %d): %v does not wrap ErrArgument", name, p, v, m, err)
						}
						continue
					}
					f(t, s, v)
				}
			}
		}
	}
}

func TestConstructorsValid(t *testing.T) {
	each(t, func(t *testing.T, s *Schedule, v int) {
		if err := s.Validate(); err != nil {
			t.Fatalf("%v\n%v", err, s)
		}
		if s.Stages != s.Ranks*v || len(s.Programs) != s.Ranks {
			t.Fatalf("%s: %d stages and %d programs for %d ranks and %d chunks", s.Name, s.Stages, len(s.Programs), s.Ranks, v)
		}
		if s.Ranks == 1 {
			for _, a := range s.Programs[0] {
				if !a.Kind.Compute() {
					t.Fatalf("%s with one rank has transfer %v", s.Name, a)
				}
			}
		}
		// Sends right after the computation that produces the value,
		// receives right before the one that needs it.
		for r, prog := range s.Programs {
			for i, a := range prog {
				switch a.Kind {
				case SendAct, SendGrad:
					if i == 0 || prog[i-1].Stage != a.Stage || prog[i-1].Micro != a.Micro || !prog[i-1].Kind.Compute() {
						t.Fatalf("%s rank %d action %d: %v does not follow its computation\n%v", s.Name, r, i, a, s)
					}
				case RecvAct, RecvGrad:
					if i+1 == len(prog) || prog[i+1].Stage != a.Stage || prog[i+1].Micro != a.Micro || !prog[i+1].Kind.Compute() {
						t.Fatalf("%s rank %d action %d: %v does not precede its computation\n%v", s.Name, r, i, a, s)
					}
				}
			}
		}
	})
}

func TestConstructorArgs(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		ranks, chunks, micros int
		want                  string
	}{
		{"gpipe", 0, 1, 4, "schedule: gpipe: bad argument: 0 ranks; need at least 1"},
		{"1f1b", 2, 1, 0, "schedule: 1f1b: bad argument: 0 micro-batches; need at least 1"},
		{"zbh1", -1, 1, 1, "schedule: zbh1: bad argument: -1 ranks; need at least 1"},
		{"interleaved1f1b", 2, 0, 4, "schedule: interleaved1f1b: bad argument: 0 chunks per rank; need at least 1"},
		{"interleaved1f1b", 4, 2, 6, "schedule: interleaved1f1b: bad argument: 6 micro-batches is not a multiple of the 4 ranks, as the interleaved schedule requires"},
		{"pipedream", 2, 1, 4, `schedule: bad argument: unknown schedule "pipedream"; valid names: gpipe, 1f1b, interleaved1f1b, zbh1`},
	} {
		s, err := ByName(tc.name, tc.ranks, tc.chunks, tc.micros)
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrArgument) {
			t.Errorf("ByName(%q, %d, %d, %d) = %v, %v; want error %q", tc.name, tc.ranks, tc.chunks, tc.micros, s, err, tc.want)
		}
	}
}

// TestSmallPrograms pins the exact programs of small schedules.
func TestSmallPrograms(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		ranks, chunks, micros int
		want                  string
	}{
		{"gpipe", 1, 1, 2, "rank 0: F0.0 F0.1 B0.0 B0.1"},
		{"gpipe", 2, 1, 2, "rank 0: F0.0 SendAct0.0@1 F0.1 SendAct0.1@1 RecvGrad0.0@1 B0.0 RecvGrad0.1@1 B0.1\n" +
			"rank 1: RecvAct1.0@0 F1.0 RecvAct1.1@0 F1.1 B1.0 SendGrad1.0@0 B1.1 SendGrad1.1@0"},
		{"1f1b", 2, 1, 3, "rank 0: F0.0 SendAct0.0@1 F0.1 SendAct0.1@1 RecvGrad0.0@1 B0.0 F0.2 SendAct0.2@1 RecvGrad0.1@1 B0.1 RecvGrad0.2@1 B0.2\n" +
			"rank 1: RecvAct1.0@0 F1.0 B1.0 SendGrad1.0@0 RecvAct1.1@0 F1.1 B1.1 SendGrad1.1@0 RecvAct1.2@0 F1.2 B1.2 SendGrad1.2@0"},
		{"interleaved1f1b", 1, 2, 2, "rank 0: F0.0 F1.0 B1.0 F0.1 B0.0 F1.1 B1.1 B0.1"},
		{"zbh1", 2, 1, 3, "rank 0: F0.0 SendAct0.0@1 F0.1 SendAct0.1@1 RecvGrad0.0@1 BI0.0 BW0.0 F0.2 SendAct0.2@1 RecvGrad0.1@1 BI0.1 BW0.1 RecvGrad0.2@1 BI0.2 BW0.2\n" +
			"rank 1: RecvAct1.0@0 F1.0 BI1.0 SendGrad1.0@0 RecvAct1.1@0 F1.1 BI1.1 SendGrad1.1@0 BW1.0 RecvAct1.2@0 F1.2 BI1.2 SendGrad1.2@0 BW1.1 BW1.2"},
	} {
		s, err := ByName(tc.name, tc.ranks, tc.chunks, tc.micros)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(s.String()), "\n")[1:]
		if got := strings.Join(lines, "\n"); got != tc.want {
			t.Errorf("%s(%d, %d, %d):\n%s\nwant\n%s", tc.name, tc.ranks, tc.chunks, tc.micros, got, tc.want)
		}
	}
}

// clone returns a deep copy of s.
func clone(s *Schedule) *Schedule {
	c := *s
	c.Programs = make([]Program, len(s.Programs))
	for r, p := range s.Programs {
		c.Programs[r] = slices.Clone(p)
	}
	return &c
}

func must(s *Schedule, err error) *Schedule {
	if err != nil {
		panic(err)
	}
	return s
}

func TestValidateCatches(t *testing.T) {
	for _, tc := range []struct {
		what   string
		base   *Schedule
		mutate func(s *Schedule)
		want   string
		kind   error
	}{
		{
			what: "a dropped receive",
			base: must(OneFOneB(2, 2)),
			mutate: func(s *Schedule) {
				s.Programs[1] = slices.Delete(s.Programs[1], 0, 1) // RecvAct1.0@0
			},
			want: "schedule: 1f1b: invalid: rank 1 action 0 (F1.0): no RecvAct1.0 before it on rank 1 (stage 0 is on rank 0)",
			kind: ErrInvalid,
		},
		{
			what: "a dropped send",
			base: must(OneFOneB(2, 2)),
			mutate: func(s *Schedule) {
				s.Programs[1] = slices.Delete(s.Programs[1], 3, 4) // SendGrad1.0@0
			},
			want: "schedule: 1f1b: invalid: rank 0 action 4 (RecvGrad0.0@1): rank 1 never sends it (no SendGrad1.0)",
			kind: ErrInvalid,
		},
		{
			what: "two backwards of one stage swapped",
			base: must(GPipe(1, 3)),
			mutate: func(s *Schedule) {
				p := s.Programs[0] // F0.0 F0.1 F0.2 B0.0 B0.1 B0.2
				p[3], p[4] = p[4], p[3]
			},
			want: "schedule: gpipe: invalid: rank 0 action 4 (B0.0): after B0.1 at action 3: the backwards of stage 0 must run in increasing micro-batch order",
			kind: ErrInvalid,
		},
		{
			what: "two backwards swapped with their receives",
			base: must(GPipe(2, 2)),
			mutate: func(s *Schedule) {
				p := s.Programs[0] // F0.0 SendAct0.0@1 F0.1 SendAct0.1@1 RecvGrad0.0@1 B0.0 RecvGrad0.1@1 B0.1
				p[4], p[5], p[6], p[7] = p[6], p[7], p[4], p[5]
			},
			want: "schedule: gpipe: invalid: rank 0 action 7 (B0.0): after B0.1 at action 5: the backwards of stage 0 must run in increasing micro-batch order",
			kind: ErrInvalid,
		},
		{
			what: "two weight passes swapped",
			base: must(ZBH1(2, 2)),
			mutate: func(s *Schedule) {
				p := s.Programs[1] // RecvAct1.0@0 F1.0 BI1.0 SendGrad1.0@0 RecvAct1.1@0 F1.1 BI1.1 SendGrad1.1@0 BW1.0 BW1.1
				p[8], p[9] = p[9], p[8]
			},
			want: "schedule: zbh1: invalid: rank 1 action 9 (BW1.0): after BW1.1 at action 8: the weight passes of stage 1 must run in increasing micro-batch order",
			kind: ErrInvalid,
		},
		{
			what: "a wrong peer",
			base: must(GPipe(3, 1)),
			mutate: func(s *Schedule) {
				s.Programs[0][1].Peer = 2 // SendAct0.0@1
			},
			want: "schedule: gpipe: invalid: rank 0 action 1 (SendAct0.0@2): peer 2, but stage 1 is on rank 1",
			kind: ErrInvalid,
		},
		{
			what: "a receive before the send it waits on, in a cycle",
			base: must(OneFOneB(2, 1)),
			mutate: func(s *Schedule) {
				p := s.Programs[0] // F0.0 SendAct0.0@1 RecvGrad0.0@1 B0.0
				p[0], p[1], p[2] = p[2], p[0], p[1]
			},
			want: "schedule: 1f1b: deadlock: rank 0 waits at action 0 (RecvGrad0.0@1); rank 1 waits at action 0 (RecvAct1.0@0)",
			kind: ErrDeadlock,
		},
		{
			what: "a transfer to itself",
			base: must(GPipe(1, 1)),
			mutate: func(s *Schedule) {
				s.Stages = 2
				s.Programs[0] = Program{compute(Forward, 0, 0), {Kind: SendAct, Stage: 0, Micro: 0, Peer: 0}}
			},
			want: "schedule: gpipe: invalid: rank 0 action 1 (SendAct0.0@0): transfer between rank 0 and itself (stages 0 and 1 are both on it)",
			kind: ErrInvalid,
		},
		{
			what: "a stage on another rank",
			base: must(GPipe(2, 1)),
			mutate: func(s *Schedule) {
				s.Programs[0][0].Stage = 1
			},
			want: "schedule: gpipe: invalid: rank 0 action 0 (F1.0): stage 1 is on rank 1",
			kind: ErrInvalid,
		},
		{
			what: "a micro-batch out of range",
			base: must(GPipe(1, 2)),
			mutate: func(s *Schedule) {
				s.Programs[0][1].Micro = 2
			},
			want: "schedule: gpipe: invalid: rank 0 action 1 (F0.2): micro-batch 2 out of range for 2 micro-batches",
			kind: ErrInvalid,
		},
		{
			what: "an action twice",
			base: must(GPipe(1, 2)),
			mutate: func(s *Schedule) {
				s.Programs[0][1].Micro = 0
			},
			want: "schedule: gpipe: invalid: rank 0 action 1 (F0.0): F0.0 again (first at action 0)",
			kind: ErrInvalid,
		},
		{
			what: "a missing backward",
			base: must(GPipe(2, 2)),
			mutate: func(s *Schedule) {
				s.Programs[1] = s.Programs[1][:6] // without B1.1 SendGrad1.1@0
			},
			want: "schedule: gpipe: invalid: rank 1: no backward of stage 1 micro-batch 1",
			kind: ErrInvalid,
		},
		{
			what: "a weight pass before its input pass",
			base: must(ZBH1(1, 1)),
			mutate: func(s *Schedule) {
				p := s.Programs[0] // F0.0 BI0.0 BW0.0
				p[1], p[2] = p[2], p[1]
			},
			want: "schedule: zbh1: invalid: rank 0 action 1 (BW0.0): no BI0.0 before it on rank 0",
			kind: ErrInvalid,
		},
		{
			what: "a backward before the next stage's on the same rank",
			base: must(Interleaved1F1B(1, 2, 1)),
			mutate: func(s *Schedule) {
				p := s.Programs[0] // F0.0 F1.0 B1.0 B0.0
				p[2], p[3] = p[3], p[2]
			},
			want: "schedule: interleaved1f1b: invalid: rank 0 action 2 (B0.0): no B1.0 before it on rank 0",
			kind: ErrInvalid,
		},
		{
			what: "a send before its forward",
			base: must(GPipe(2, 1)),
			mutate: func(s *Schedule) {
				p := s.Programs[0] // F0.0 SendAct0.0@1 RecvGrad0.0@1 B0.0
				p[0], p[1] = p[1], p[0]
			},
			want: "schedule: gpipe: invalid: rank 0 action 0 (SendAct0.0@1): no F0.0 before it on rank 0",
			kind: ErrInvalid,
		},
		{
			what: "too few programs",
			base: must(GPipe(3, 1)),
			mutate: func(s *Schedule) {
				s.Programs = s.Programs[:2]
			},
			want: "schedule: gpipe: invalid: 2 programs for 3 ranks",
			kind: ErrInvalid,
		},
		{
			what: "stages not a multiple of ranks",
			base: must(GPipe(3, 1)),
			mutate: func(s *Schedule) {
				s.Stages = 4
			},
			want: "schedule: gpipe: invalid: 4 stages is not a positive multiple of the 3 ranks",
			kind: ErrInvalid,
		},
	} {
		t.Run(tc.what, func(t *testing.T) {
			if err := tc.base.Validate(); err != nil {
				t.Fatalf("before breaking: %v", err)
			}
			s := clone(tc.base)
			tc.mutate(s)
			err := s.Validate()
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Validate() = %v\nwant %s\n%v", err, tc.want, s)
			}
			if !errors.Is(err, tc.kind) {
				t.Fatalf("%v does not wrap %v", err, tc.kind)
			}
			if tc.base.Validate() != nil {
				t.Fatal("breaking the clone broke the original")
			}
		})
	}
}
