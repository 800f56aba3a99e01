package schedule

import (
	"errors"
	"fmt"
	"strings"
)

// ErrArgument is wrapped by the errors of the constructors and ByName
// when their arguments describe no schedule (no ranks, no micro-batches,
// a micro-batch count the schedule cannot take, an unknown name).
var ErrArgument = errors.New("bad argument")

// Names lists the schedules ByName builds, in the order its error lists
// them.
var Names = []string{"gpipe", "1f1b", "interleaved1f1b", "zbh1"}

// ByName builds the schedule called name (one of Names) for ranks ranks
// and micros micro-batches. chunks, the virtual stages per rank, is used
// by "interleaved1f1b" only and ignored by the others.
func ByName(name string, ranks, chunks, micros int) (*Schedule, error) {
	switch name {
	case "gpipe":
		return GPipe(ranks, micros)
	case "1f1b":
		return OneFOneB(ranks, micros)
	case "interleaved1f1b":
		return Interleaved1F1B(ranks, chunks, micros)
	case "zbh1":
		return ZBH1(ranks, micros)
	}
	return nil, fmt.Errorf("schedule: %w: unknown schedule %q; valid names: %s", ErrArgument, name, strings.Join(Names, ", "))
}

// checkArgs checks the arguments every schedule shares.
func checkArgs(name string, ranks, micros int) error {
	if ranks < 1 {
		return fmt.Errorf("schedule: %s: %w: %d ranks; need at least 1", name, ErrArgument, ranks)
	}
	if micros < 1 {
		return fmt.Errorf("schedule: %s: %w: %d micro-batches; need at least 1", name, ErrArgument, micros)
	}
	return nil
}

// GPipe returns the GPipe schedule (Huang et al. 2019): every rank runs
// the forwards of micro-batches 0..micros-1, then their backwards in the
// same order. One stage per rank. Every rank holds the activations of all
// micros micro-batches at once; the bubble is (p-1)/(m+p-1) of the step
// for p ranks and m micro-batches when a backward costs a fixed multiple
// of a forward.
func GPipe(ranks, micros int) (*Schedule, error) {
	const name = "gpipe"
	if err := checkArgs(name, ranks, micros); err != nil {
		return nil, err
	}
	comp := make([][]Action, ranks)
	for r := range comp {
		for i := range micros {
			comp[r] = append(comp[r], compute(Forward, r, i))
		}
		for i := range micros {
			comp[r] = append(comp[r], compute(Backward, r, i))
		}
	}
	return assemble(name, ranks, ranks, micros, comp), nil
}

// OneFOneB returns the non-interleaved one-forward-one-backward schedule
// of PipeDream-Flush and Megatron-LM (PyTorch's Schedule1F1B): rank r
// runs min(p-1-r, m) warm-up forwards, then alternates one forward and one
// backward until the forwards run out, then runs the remaining backwards.
// One stage per rank; backwards run in micro-batch order. Its bubble is
// GPipe's, (p-1)/(m+p-1), but rank r holds at most min(p-r, m)
// micro-batches' activations instead of m.
func OneFOneB(ranks, micros int) (*Schedule, error) {
	const name = "1f1b"
	if err := checkArgs(name, ranks, micros); err != nil {
		return nil, err
	}
	comp := make([][]Action, ranks)
	for r := range comp {
		warm := min(ranks-1-r, micros)
		comp[r] = oneFOneB(micros, warm,
			func(k int) Action { return compute(Forward, r, k) },
			func(k int) Action { return compute(Backward, r, k) })
	}
	return assemble(name, ranks, ranks, micros, comp), nil
}

// oneFOneB orders n forwards fwd(0..n-1) and n backwards bwd(0..n-1):
// warm forwards, then forward warm+k and backward k alternately, then the
// remaining backwards.
func oneFOneB(n, warm int, fwd, bwd func(int) Action) []Action {
	var out []Action
	for k := range warm {
		out = append(out, fwd(k))
	}
	for k := 0; k < n-warm; k++ {
		out = append(out, fwd(warm+k), bwd(k))
	}
	for k := n - warm; k < n; k++ {
		out = append(out, bwd(k))
	}
	return out
}

// Interleaved1F1B returns Megatron-LM's interleaved 1F1B schedule
// (Narayanan et al. 2021) with chunks virtual stages per rank: the model
// has ranks*chunks stages and stage s lives on rank s % ranks. Each rank
// walks its virtual micro-batches in groups of ranks micro-batches: the
// forwards of micro-batches g*p..g*p+p-1 on its first chunk, then the
// same micro-batches on its second chunk, and so on; backwards go the
// same way from the last chunk down. Rank r first runs
// (p-1-r)*2 + (v-1)*p warm-up forwards (all m*v of them when m = p, as
// Megatron does), then alternates, then drains the backwards. Megatron
// requires micros to be a multiple of ranks, and so does this. With one
// chunk the warm-up is OneFOneB's and so is the schedule.
//
// With a forward and a backward of one chunk costing F/v and B/v, the
// bubble is (p-1)/(v*m+p-1) of the step: v times smaller than 1F1B's
// bubble time, (p-1)(F+B)/v, at the cost of v times more transfers.
func Interleaved1F1B(ranks, chunks, micros int) (*Schedule, error) {
	const name = "interleaved1f1b"
	if err := checkArgs(name, ranks, micros); err != nil {
		return nil, err
	}
	if chunks < 1 {
		return nil, fmt.Errorf("schedule: %s: %w: %d chunks per rank; need at least 1", name, ErrArgument, chunks)
	}
	if micros%ranks != 0 {
		return nil, fmt.Errorf("schedule: %s: %w: %d micro-batches is not a multiple of the %d ranks, as the interleaved schedule requires", name, ErrArgument, micros, ranks)
	}
	p, v, m := ranks, chunks, micros
	total := m * v
	comp := make([][]Action, p)
	for r := range comp {
		// Virtual micro-batch k is micro-batch k/(p*v)*p + k%p on the
		// chunk (k%(p*v))/p, counted from the first chunk for forwards
		// and from the last for backwards.
		micro := func(k int) int { return k/(p*v)*p + k%p }
		chunk := func(k int) int { return k % (p * v) / p }
		fwd := func(k int) Action { return compute(Forward, chunk(k)*p+r, micro(k)) }
		bwd := func(k int) Action { return compute(Backward, (v-1-chunk(k))*p+r, micro(k)) }
		var warm int
		switch {
		case v == 1:
			warm = min(p-1-r, m)
		case m == p:
			warm = total
		default:
			warm = min((p-1-r)*2+(v-1)*p, total)
		}
		comp[r] = oneFOneB(total, warm, fwd, bwd)
	}
	return assemble(name, p, p*v, m, comp), nil
}

// ZBH1 returns the ZB-H1 schedule of Qi et al. 2023 ("Zero Bubble
// Pipeline Parallelism"), in the order of the authors' reference
// implementation: each backward is split into BackwardInput, which the
// previous stage waits for, and BackwardWeight, which nothing waits for.
// Rank r runs 1F1B's min(p-1-r, m) warm-up forwards, then r rounds of
// forward and BackwardInput, then rounds of forward, BackwardInput and
// BackwardWeight until the forwards run out, then BackwardInput and
// BackwardWeight pairs, and last the r BackwardWeights it put off. The
// put-off weight passes fill the cool-down bubble of 1F1B. One stage per
// rank.
//
// No rank ever holds more than min(p, m) micro-batches between their
// forward and their BackwardWeight: the peak of 1F1B's first rank, and so
// the same peak memory as 1F1B; the later ranks, which hold fewer in 1F1B,
// hold up to that peak too. With F = BI = BW and m >= p, the bubble is
// (p-1)/(3m+p-1) of the step, a third of 1F1B's bubble time with
// B = BI + BW: (p-1)(F+BI-BW) against (p-1)(F+BI+BW).
func ZBH1(ranks, micros int) (*Schedule, error) {
	const name = "zbh1"
	if err := checkArgs(name, ranks, micros); err != nil {
		return nil, err
	}
	p, m := ranks, micros
	comp := make([][]Action, p)
	for r := range comp {
		var out []Action
		f, b, w := 0, 0, 0
		F := func() { out = append(out, compute(Forward, r, f)); f++ }
		BI := func() { out = append(out, compute(BackwardInput, r, b)); b++ }
		BW := func() { out = append(out, compute(BackwardWeight, r, w)); w++ }
		for f < min(p-1-r, m) {
			F()
		}
		for j := 0; j < r && f < m; j++ {
			F()
			BI()
		}
		for f < m {
			F()
			BI()
			BW()
		}
		for b < m {
			BI()
			BW()
		}
		for w < m {
			BW()
		}
		comp[r] = out
	}
	return assemble(name, p, p, m, comp), nil
}

// compute returns the computation kind on stage and micro.
func compute(kind Kind, stage, micro int) Action {
	return Action{Kind: kind, Stage: stage, Micro: micro, Peer: -1}
}

// assemble builds a schedule from each rank's computations, in order,
// adding the transfers: a send right after the computation that produces
// the value and a receive right before the one that needs it, whenever
// the neighbouring stage is on another rank.
func assemble(name string, ranks, stages, micros int, comp [][]Action) *Schedule {
	s := &Schedule{Name: name, Ranks: ranks, Stages: stages, Micros: micros, Programs: make([]Program, ranks)}
	remote := func(r, stage int) bool { return stage >= 0 && stage < stages && s.RankOf(stage) != r }
	for r, cs := range comp {
		var p Program
		for _, a := range cs {
			st, i := a.Stage, a.Micro
			switch a.Kind {
			case Forward:
				if remote(r, st-1) {
					p = append(p, Action{Kind: RecvAct, Stage: st, Micro: i, Peer: s.RankOf(st - 1)})
				}
				p = append(p, a)
				if remote(r, st+1) {
					p = append(p, Action{Kind: SendAct, Stage: st, Micro: i, Peer: s.RankOf(st + 1)})
				}
			case Backward, BackwardInput:
				if remote(r, st+1) {
					p = append(p, Action{Kind: RecvGrad, Stage: st, Micro: i, Peer: s.RankOf(st + 1)})
				}
				p = append(p, a)
				if remote(r, st-1) {
					p = append(p, Action{Kind: SendGrad, Stage: st, Micro: i, Peer: s.RankOf(st - 1)})
				}
			default:
				p = append(p, a)
			}
		}
		s.Programs[r] = p
	}
	return s
}
