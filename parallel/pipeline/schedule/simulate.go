package schedule

import "fmt"

// Costs are the times Simulate gives each kind of action, in any unit,
// and the processors the ranks run on. A schedule that runs whole
// backwards uses Backward; one that splits them uses BackwardInput and
// BackwardWeight (typically adding up to Backward). Comm is the latency
// from a send to its data being ready at the receiver; transfers take no
// time of either rank. Every cost, ignored ones included, must be >= 0.
type Costs struct {
	Forward, Backward, BackwardInput, BackwardWeight, Comm float64

	// Stages, when not nil, gives each model stage its own costs: it must
	// hold one entry per stage of the schedule (Schedule.Stages, which for
	// an interleaved schedule counts every virtual stage), and stage k's
	// computations cost Stages[k]'s values instead of the four scalar
	// fields above, which are then ignored. Comm stays the same for all.
	// A GPT's first stage carries the embeddings and its last the output
	// head and the loss, so they cost more than the blocks in between.
	Stages []StageCosts

	// Cores is the number of processors the ranks share. 0 gives every
	// rank a processor of its own. With Cores > 0, k ranks computing at
	// once each progress at the rate min(1, Cores/k): a computation of
	// cost x takes x while at most Cores ranks compute, and longer while
	// more do (processor sharing). A rank waiting for a receive's data
	// takes no processor. Cores >= Ranks times a schedule as Cores = 0.
	Cores int
}

// StageCosts are the costs of one model stage's computations; see
// Costs.Stages.
type StageCosts struct {
	Forward, Backward, BackwardInput, BackwardWeight float64
}

// of returns the nominal cost of running a, 0 for a transfer: the time it
// takes on a processor of its own.
func (c Costs) of(a Action) float64 {
	sc := StageCosts{c.Forward, c.Backward, c.BackwardInput, c.BackwardWeight}
	if c.Stages != nil {
		sc = c.Stages[a.Stage]
	}
	switch a.Kind {
	case Forward:
		return sc.Forward
	case Backward:
		return sc.Backward
	case BackwardInput:
		return sc.BackwardInput
	case BackwardWeight:
		return sc.BackwardWeight
	}
	return 0
}

// check returns an error wrapping ErrArgument when c cannot time s.
func (c Costs) check(s *Schedule) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("schedule: %s: %w: %s", s.Name, ErrArgument, fmt.Sprintf(format, args...))
	}
	for _, x := range []float64{c.Forward, c.Backward, c.BackwardInput, c.BackwardWeight, c.Comm} {
		if !(x >= 0) {
			return bad("costs must be >= 0, got %+v", c)
		}
	}
	if c.Stages != nil && len(c.Stages) != s.Stages {
		return bad("%d stage costs for %d stages; give one per stage or none", len(c.Stages), s.Stages)
	}
	for k, sc := range c.Stages {
		for _, x := range []float64{sc.Forward, sc.Backward, sc.BackwardInput, sc.BackwardWeight} {
			if !(x >= 0) {
				return bad("costs must be >= 0, got %+v for stage %d", sc, k)
			}
		}
	}
	if c.Cores < 0 {
		return bad("%d cores; want 0 (a processor per rank) or more", c.Cores)
	}
	return nil
}

// Span is when one action of a rank's program ran. A computation spans
// the time from its start to its end: its cost on a processor of its own,
// longer when it shares one (Costs.Cores); a send is a point, at the time
// the rank reached it; a receive spans the wait from the time the rank
// reached it to the time its data was ready (a point when the data was
// there already).
type Span struct {
	Action     Action
	Start, End float64
}

// Result is a simulated step of a schedule.
type Result struct {
	// Makespan is the time from the start of the step to the end of the
	// last action of any rank.
	Makespan float64
	// Busy[r] is the sum of the nominal costs of rank r's computations:
	// the time they would take on a processor of its own, whether or not
	// they shared one.
	Busy []float64
	// Bubble is the idle fraction of the ranks' time over the step,
	// 1 - sum(Busy)/(Ranks*Makespan); 0 when Makespan is 0. Since the
	// ranks do at most Cores units of nominal work per unit of time, with
	// 0 < Cores < Ranks the bubble is at least 1 - Cores/Ranks: the
	// ranks' idle share includes the time they wait for a processor.
	Bubble float64
	// PeakActivations[r] is the largest number of (stage, micro-batch)
	// pairs of rank r, over all its stages, whose Forward has started and
	// whose Backward (for a split backward, BackwardWeight) has not yet
	// finished: the micro-batches whose activations the rank keeps.
	PeakActivations []int
	// Timeline[r] is rank r's program as it ran, one span per action, in
	// program order.
	Timeline [][]Span
}

// Simulate runs s with the costs c: each rank runs its actions in program
// order, a computation starts when the rank has finished its previous
// action, a send is started at once and never blocks, and a receive
// waits until its send has run plus c.Comm. All ranks start at time 0.
// With c.Cores > 0 the computing ranks share c.Cores processors equally,
// so a computation lasts its cost or longer (see Costs.Cores). It returns
// Validate's error for a schedule that cannot run (a deadlock included)
// and an error wrapping ErrArgument for a negative cost or core count or
// for c.Stages of the wrong length.
func Simulate(s *Schedule, c Costs) (Result, error) {
	if err := c.check(s); err != nil {
		return Result{}, err
	}
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	res := Result{
		Busy:            make([]float64, s.Ranks),
		PeakActivations: make([]int, s.Ranks),
		Timeline:        make([][]Span, s.Ranks),
	}
	live := make([]int, s.Ranks) // activations each rank holds
	// record notes that rank r ran a from start to end.
	record := func(r int, a Action, start, end float64) {
		switch a.Kind {
		case Forward:
			live[r]++
			res.PeakActivations[r] = max(res.PeakActivations[r], live[r])
		case Backward, BackwardWeight:
			live[r]--
		}
		if a.Kind.Compute() {
			res.Busy[r] += c.of(a)
		}
		res.Makespan = max(res.Makespan, end)
		res.Timeline[r] = append(res.Timeline[r], Span{Action: a, Start: start, End: end})
	}
	if c.Cores > 0 {
		if err := s.share(c, record); err != nil {
			return Result{}, err
		}
	} else {
		now := make([]float64, s.Ranks) // when each rank is free
		ready := make(map[key]float64)  // send -> when its data is at the receiver
		stuck := s.run(func(r int, a Action) {
			start, end := now[r], now[r]
			switch a.Kind {
			case SendAct, SendGrad:
				ready[key{a.Kind, a.Stage, a.Micro}] = start + c.Comm
			case RecvAct, RecvGrad:
				end = max(start, ready[sender(a)])
			default:
				end = start + c.of(a)
			}
			now[r] = end
			record(r, a, start, end)
		})
		if len(stuck) > 0 {
			// Validate ran the same programs to the end; this cannot happen.
			return Result{}, fmt.Errorf("schedule: %s: %w: rank %d stuck at action %d", s.Name, ErrDeadlock, stuck[0].rank, stuck[0].index)
		}
	}
	if res.Makespan > 0 {
		total := 0.0
		for _, b := range res.Busy {
			total += b
		}
		res.Bubble = 1 - total/(float64(s.Ranks)*res.Makespan)
	}
	return res, nil
}

// share runs s with the computing ranks sharing c.Cores processors,
// calling record for each action of each rank in program order once it
// has ended. It steps from event to event: a computation ending, a
// receive's data arriving. At each event every rank that is not
// computing runs as far as it can at that instant (sends, receives whose
// data is there, computations costing nothing) and stops at a
// computation, which it starts, or at a receive whose data is not there
// yet; then the rate of every computing rank is set for the k ranks now
// computing, min(1, Cores/k), and the next event is the earliest end of
// a computation at that rate or arrival of data that a rank waits for.
func (s *Schedule) share(c Costs, record func(r int, a Action, start, end float64)) error {
	type rank struct {
		next      int     // index of the action it runs or waits at
		reached   float64 // when it reached that action
		computing bool
		left      float64 // the computation's nominal work left at since
		since     float64 // when left and rate were last set
		rate      float64 // its progress per unit of time since then; 0 when just started
		end       float64 // when the computation ends at that rate
	}
	ranks := make([]rank, s.Ranks)
	ready := make(map[key]float64) // send -> when its data is at the receiver
	cores := float64(c.Cores)
	// step runs rank r's next action at time now, or starts it if it is
	// a computation that takes time, and reports whether the rank moved
	// on to its following action.
	step := func(r int, now float64) bool {
		rk, prog := &ranks[r], s.Programs[r]
		if rk.computing || rk.next == len(prog) {
			return false
		}
		a := prog[rk.next]
		switch a.Kind {
		case SendAct, SendGrad:
			ready[key{a.Kind, a.Stage, a.Micro}] = now + c.Comm
			record(r, a, now, now)
		case RecvAct, RecvGrad:
			at, ok := ready[sender(a)]
			if !ok || at > now {
				return false
			}
			record(r, a, rk.reached, max(rk.reached, at))
		default:
			if cost := c.of(a); cost > 0 {
				*rk = rank{next: rk.next, reached: now, computing: true, left: cost, since: now}
				return false
			}
			record(r, a, now, now)
		}
		*rk = rank{next: rk.next + 1, reached: now}
		return true
	}
	for now := 0.0; ; {
		// Run every idle rank as far as it can at time now.
		for moved := true; moved; {
			moved = false
			for r := range ranks {
				for step(r, now) {
					moved = true
				}
			}
		}

		// Share the cores among the computing ranks and find the next event.
		k := 0
		for _, rk := range ranks {
			if rk.computing {
				k++
			}
		}
		rate := min(1, cores/float64(max(k, 1)))
		next, found := 0.0, false
		soonest := func(t float64) {
			if !found || t < next {
				next, found = t, true
			}
		}
		for r := range ranks {
			rk := &ranks[r]
			switch {
			case rk.computing:
				if rk.rate != rate {
					// Keep end as computed when the rate stays, so that
					// a computation that never shares a core ends at
					// exactly its start plus its cost.
					rk.left -= (now - rk.since) * rk.rate
					rk.since, rk.rate = now, rate
					rk.end = now + max(rk.left, 0)/rate
				}
				soonest(rk.end)
			case rk.next < len(s.Programs[r]):
				// Waiting at a receive; its data's arrival is an event
				// once the send has run.
				if at, ok := ready[sender(s.Programs[r][rk.next])]; ok {
					soonest(at)
				}
			}
		}
		if !found {
			break
		}
		now = next

		// End the computations due now.
		for r := range ranks {
			if rk := &ranks[r]; rk.computing && rk.end <= now {
				record(r, s.Programs[r][rk.next], rk.reached, rk.end)
				*rk = rank{next: rk.next + 1, reached: now}
			}
		}
	}
	for r, rk := range ranks {
		if rk.next < len(s.Programs[r]) {
			// Validate ran the same programs to the end; this cannot happen.
			return fmt.Errorf("schedule: %s: %w: rank %d stuck at action %d", s.Name, ErrDeadlock, r, rk.next)
		}
	}
	return nil
}
