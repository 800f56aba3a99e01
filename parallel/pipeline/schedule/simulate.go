package schedule

import "fmt"

// Costs are the times Simulate gives each kind of action, in any unit.
// A schedule that runs whole backwards uses Backward; one that splits
// them uses BackwardInput and BackwardWeight (typically adding up to
// Backward). Comm is the latency from a send to its data being ready at
// the receiver; transfers take no time of either rank. All must be >= 0.
type Costs struct {
	Forward, Backward, BackwardInput, BackwardWeight, Comm float64
}

// of returns the cost of running a, 0 for a transfer.
func (c Costs) of(a Action) float64 {
	switch a.Kind {
	case Forward:
		return c.Forward
	case Backward:
		return c.Backward
	case BackwardInput:
		return c.BackwardInput
	case BackwardWeight:
		return c.BackwardWeight
	}
	return 0
}

// Span is when one action of a rank's program ran. A computation spans
// its cost; a send is a point, at the time the rank reached it; a receive
// spans the wait from the time the rank reached it to the time its data
// was ready (a point when the data was there already).
type Span struct {
	Action     Action
	Start, End float64
}

// Result is a simulated step of a schedule.
type Result struct {
	// Makespan is the time from the start of the step to the end of the
	// last action of any rank.
	Makespan float64
	// Busy[r] is rank r's total compute time.
	Busy []float64
	// Bubble is the idle fraction of the ranks' time over the step,
	// 1 - sum(Busy)/(Ranks*Makespan); 0 when Makespan is 0.
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
// waits until its send has run plus c.Comm. All ranks start at time 0. It
// returns Validate's error for a schedule that cannot run (a deadlock
// included) and an error wrapping ErrArgument for a negative cost.
func Simulate(s *Schedule, c Costs) (Result, error) {
	for _, x := range []float64{c.Forward, c.Backward, c.BackwardInput, c.BackwardWeight, c.Comm} {
		if !(x >= 0) {
			return Result{}, fmt.Errorf("schedule: %w: costs must be >= 0, got %+v", ErrArgument, c)
		}
	}
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	res := Result{
		Busy:            make([]float64, s.Ranks),
		PeakActivations: make([]int, s.Ranks),
		Timeline:        make([][]Span, s.Ranks),
	}
	now := make([]float64, s.Ranks) // when each rank is free
	live := make([]int, s.Ranks)    // activations each rank holds
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
			res.Busy[r] += end - start
		}
		switch a.Kind {
		case Forward:
			live[r]++
			res.PeakActivations[r] = max(res.PeakActivations[r], live[r])
		case Backward, BackwardWeight:
			live[r]--
		}
		now[r] = end
		res.Makespan = max(res.Makespan, end)
		res.Timeline[r] = append(res.Timeline[r], Span{Action: a, Start: start, End: end})
	})
	if len(stuck) > 0 {
		// Validate ran the same programs to the end; this cannot happen.
		return Result{}, fmt.Errorf("schedule: %s: %w: rank %d stuck at action %d", s.Name, ErrDeadlock, stuck[0].rank, stuck[0].index)
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
