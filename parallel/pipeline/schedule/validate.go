package schedule

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is wrapped by Validate's errors for a schedule that breaks a
// rule of the model, and ErrDeadlock by its error for one whose ranks
// would wait for each other forever.
var (
	ErrInvalid  = errors.New("invalid")
	ErrDeadlock = errors.New("deadlock")
)

// key names one action of a schedule. Since a stage lives on one rank,
// and transfers are named by the local stage, a key names at most one
// action in a valid schedule.
type key struct {
	kind  Kind
	stage int
	micro int
}

func (k key) String() string { return fmt.Sprintf("%v%d.%d", k.kind, k.stage, k.micro) }

// loc is where an action sits: rank and index in its program.
type loc struct{ rank, index int }

// Validate reports whether s can run, and why not: the first broken rule
// it finds, naming the rank, the index of the action in its program and
// what is wrong, wrapping ErrInvalid, or a deadlock naming where each
// stuck rank waits, wrapping ErrDeadlock. It checks, in this order:
//
//   - the shape: Ranks >= 1, Stages a positive multiple of Ranks,
//     Micros >= 1, one program per rank;
//   - each action: a known kind, stage and micro-batch in range, the stage
//     held by the rank (RankOf), Peer -1 on a computation, and on a
//     transfer the rank of the neighbouring stage (SendAct and RecvGrad:
//     stage+1; RecvAct and SendGrad: stage-1), which must be another rank;
//     no action twice;
//   - completeness: every (stage, micro-batch) has one Forward and either
//     one Backward or one BackwardInput and one BackwardWeight;
//   - dependencies, in program order: Forward(s, i) for s > 0 after
//     RecvAct(s, i), or after Forward(s-1, i) when stage s-1 is on the same
//     rank; SendAct(s, i) after Forward(s, i); Backward or
//     BackwardInput(s, i) after Forward(s, i) and, for s below the last
//     stage, after RecvGrad(s, i), or after the Backward or BackwardInput
//     of (s+1, i) on the same rank; BackwardWeight(s, i) after
//     BackwardInput(s, i); SendGrad(s, i) after the Backward or
//     BackwardInput of (s, i);
//   - matching: every SendAct(s, i) has its RecvAct(s+1, i) on the peer,
//     every SendGrad(s, i) its RecvGrad(s-1, i), and the other way round;
//   - order: on each stage, the backwards (Backward or BackwardInput) run
//     in increasing micro-batch order, and so do the BackwardWeights, so
//     that gradients accumulate in the same order under every schedule;
//   - progress: run with sends that never block and receives that block
//     until their send has run, every rank reaches the end of its program.
func (s *Schedule) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("schedule: %s: %w: %s", s.Name, ErrInvalid, fmt.Sprintf(format, args...))
	}
	at := func(r, i int, format string, args ...any) error {
		return bad("rank %d action %d (%v): %s", r, i, s.Programs[r][i], fmt.Sprintf(format, args...))
	}
	switch {
	case s.Ranks < 1:
		return bad("%d ranks; need at least 1", s.Ranks)
	case s.Stages < 1 || s.Stages%s.Ranks != 0:
		return bad("%d stages is not a positive multiple of the %d ranks", s.Stages, s.Ranks)
	case s.Micros < 1:
		return bad("%d micro-batches; need at least 1", s.Micros)
	case len(s.Programs) != s.Ranks:
		return bad("%d programs for %d ranks", len(s.Programs), s.Ranks)
	}

	// Each action on its own, and where each one is.
	where := make(map[key]loc)
	for r, prog := range s.Programs {
		for i, a := range prog {
			if a.Kind > RecvGrad {
				return at(r, i, "unknown kind")
			}
			if a.Stage < 0 || a.Stage >= s.Stages {
				return at(r, i, "stage %d out of range for %d stages", a.Stage, s.Stages)
			}
			if a.Micro < 0 || a.Micro >= s.Micros {
				return at(r, i, "micro-batch %d out of range for %d micro-batches", a.Micro, s.Micros)
			}
			if o := s.RankOf(a.Stage); o != r {
				return at(r, i, "stage %d is on rank %d", a.Stage, o)
			}
			if a.Kind.Compute() {
				if a.Peer != -1 {
					return at(r, i, "peer %d on a computation; want -1", a.Peer)
				}
			} else {
				nb := a.Stage + 1
				if a.Kind == RecvAct || a.Kind == SendGrad {
					nb = a.Stage - 1
				}
				if nb < 0 || nb >= s.Stages {
					return at(r, i, "stage %d has no neighbour stage %d to exchange with", a.Stage, nb)
				}
				want := s.RankOf(nb)
				if want == r {
					return at(r, i, "transfer between rank %d and itself (stages %d and %d are both on it)", r, a.Stage, nb)
				}
				if a.Peer != want {
					return at(r, i, "peer %d, but stage %d is on rank %d", a.Peer, nb, want)
				}
			}
			k := key{a.Kind, a.Stage, a.Micro}
			if first, ok := where[k]; ok {
				return at(r, i, "%v again (first at action %d)", a, first.index)
			}
			where[k] = loc{r, i}
		}
	}
	has := func(kind Kind, stage, micro int) bool {
		_, ok := where[key{kind, stage, micro}]
		return ok
	}

	// Completeness.
	for st := range s.Stages {
		for i := range s.Micros {
			r := s.RankOf(st)
			if !has(Forward, st, i) {
				return bad("rank %d: no forward of stage %d micro-batch %d", r, st, i)
			}
			b, bi, bw := has(Backward, st, i), has(BackwardInput, st, i), has(BackwardWeight, st, i)
			switch {
			case b && (bi || bw):
				return bad("rank %d: stage %d micro-batch %d has both a whole backward and a split one", r, st, i)
			case bi && !bw:
				return bad("rank %d: stage %d micro-batch %d has a BackwardInput but no BackwardWeight", r, st, i)
			case bw && !bi:
				return bad("rank %d: stage %d micro-batch %d has a BackwardWeight but no BackwardInput", r, st, i)
			case !b && !bi:
				return bad("rank %d: no backward of stage %d micro-batch %d", r, st, i)
			}
		}
	}

	// Dependencies within each program.
	for r, prog := range s.Programs {
		// before reports whether action k runs on rank r before index i.
		before := func(k key, i int) bool {
			l, ok := where[k]
			return ok && l.rank == r && l.index < i
		}
		// bwd is the key of the backward (whole or input) of (stage, micro).
		bwd := func(stage, micro int) key {
			if has(Backward, stage, micro) {
				return key{Backward, stage, micro}
			}
			return key{BackwardInput, stage, micro}
		}
		for i, a := range prog {
			st, mi := a.Stage, a.Micro
			need := func(k key, why string) error {
				if before(k, i) {
					return nil
				}
				return at(r, i, "no %v before it on rank %d%s", k, r, why)
			}
			var err error
			switch a.Kind {
			case Forward:
				if st > 0 {
					if s.RankOf(st-1) != r {
						err = need(key{RecvAct, st, mi}, fmt.Sprintf(" (stage %d is on rank %d)", st-1, s.RankOf(st-1)))
					} else {
						err = need(key{Forward, st - 1, mi}, "")
					}
				}
			case SendAct:
				err = need(key{Forward, st, mi}, "")
			case Backward, BackwardInput:
				err = need(key{Forward, st, mi}, "")
				if err == nil && st < s.Stages-1 {
					if s.RankOf(st+1) != r {
						err = need(key{RecvGrad, st, mi}, fmt.Sprintf(" (stage %d is on rank %d)", st+1, s.RankOf(st+1)))
					} else {
						err = need(bwd(st+1, mi), "")
					}
				}
			case BackwardWeight:
				err = need(key{BackwardInput, st, mi}, "")
			case SendGrad:
				err = need(bwd(st, mi), "")
			}
			if err != nil {
				return err
			}
		}
	}

	// Every transfer's other end.
	for r, prog := range s.Programs {
		for i, a := range prog {
			var other key
			switch a.Kind {
			case SendAct:
				other = key{RecvAct, a.Stage + 1, a.Micro}
			case SendGrad:
				other = key{RecvGrad, a.Stage - 1, a.Micro}
			case RecvAct, RecvGrad:
				other = sender(a)
			default:
				continue
			}
			if _, ok := where[other]; !ok {
				verb := "receives"
				if a.Kind == RecvAct || a.Kind == RecvGrad {
					verb = "sends"
				}
				return at(r, i, "rank %d never %s it (no %v)", a.Peer, verb, other)
			}
		}
	}

	// Per-stage order of backwards and of weight passes.
	for r, prog := range s.Programs {
		// latest[0][st] is the index of stage st's latest B or BI so far,
		// latest[1][st] of its latest BW.
		latest := [2]map[int]int{{}, {}}
		for i, a := range prog {
			c, what := 0, "backwards"
			switch a.Kind {
			case Backward, BackwardInput:
			case BackwardWeight:
				c, what = 1, "weight passes"
			default:
				continue
			}
			if j, ok := latest[c][a.Stage]; ok && prog[j].Micro > a.Micro {
				return at(r, i, "after %v at action %d: the %s of stage %d must run in increasing micro-batch order", prog[j], j, what, a.Stage)
			}
			latest[c][a.Stage] = i
		}
	}

	if stuck := s.run(nil); len(stuck) > 0 {
		var parts []string
		for _, l := range stuck {
			parts = append(parts, fmt.Sprintf("rank %d waits at action %d (%v)", l.rank, l.index, s.Programs[l.rank][l.index]))
		}
		return fmt.Errorf("schedule: %s: %w: %s", s.Name, ErrDeadlock, strings.Join(parts, "; "))
	}
	return nil
}

// sender returns the key of the send that a receive waits for.
func sender(a Action) key {
	if a.Kind == RecvAct {
		return key{SendAct, a.Stage - 1, a.Micro}
	}
	return key{SendGrad, a.Stage + 1, a.Micro}
}

// run executes the programs of s with sends that never block and receives
// that block until their send has run, calling step (when not nil) for
// each action as it runs, and returns where each rank that cannot finish
// is stuck (nil when all finish). Ranks take turns, each running as far
// as it can, until none moves. step sees every action of a rank in
// program order, and a receive only after its send.
func (s *Schedule) run(step func(r int, a Action)) []loc {
	sent := make(map[key]bool)
	next := make([]int, len(s.Programs))
	for moved := true; moved; {
		moved = false
		for r, prog := range s.Programs {
			for next[r] < len(prog) {
				a := prog[next[r]]
				if (a.Kind == RecvAct || a.Kind == RecvGrad) && !sent[sender(a)] {
					break
				}
				if a.Kind == SendAct || a.Kind == SendGrad {
					sent[key{a.Kind, a.Stage, a.Micro}] = true
				}
				if step != nil {
					step(r, a)
				}
				next[r]++
				moved = true
			}
		}
	}
	var stuck []loc
	for r, prog := range s.Programs {
		if next[r] < len(prog) {
			stuck = append(stuck, loc{r, next[r]})
		}
	}
	return stuck
}
