package main

import (
	"fmt"
	"time"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/parallel/pipeline/schedule"
)

// The step time the run should take, from the schedule simulator given
// the stages' measured costs, the link between adjacent stages and the
// hosts' CPUs, plus the collectives a step makes besides the pipeline's
// sends (the replicas' gradient all-reduce, the tied embedding's sum, the
// clipping's norm), each as the group's cost model predicts it, and the
// optimizer's step as the run measured it.

// placement is where a pipeline's ranks run, as rank 0 sees it.
type placement struct {
	// Link carries an activation between adjacent stages: the network's
	// when any two adjacent stages are on different hosts, else shared
	// memory's.
	Link algo.Link
	// CPUs is the CPUs of rank 0's host, RanksOnHost the job's ranks on
	// it, StagesOnHost how many of them are stages of rank 0's pipeline.
	CPUs, RanksOnHost, StagesOnHost int
}

// processors returns what the simulator needs to model the CPUs the
// pipeline's ranks get: a factor on every computation's time and
// Costs.Cores. A host's CPUs are shared by all its ranks. A pipeline with
// one stage per host runs each stage at the rank's share of its host
// (slower by RanksOnHost/CPUs when there are fewer CPUs than ranks); one
// with several stages on a host shares that host's CPUs among them, at
// most their share of the host's CPUs computing at once.
func (p placement) processors() (scale float64, cores int) {
	cpus, ranks := max(p.CPUs, 1), max(p.RanksOnHost, 1)
	if p.StagesOnHost <= 1 {
		return max(1, float64(ranks)/float64(cpus)), 0
	}
	cores = cpus * p.StagesOnHost / ranks
	if cores >= p.StagesOnHost {
		return 1, 0
	}
	if cores < 1 {
		// Less than one CPU for the pipeline's stages: one computes at a
		// time, at that share of a CPU.
		return float64(ranks) / (float64(cpus) * float64(p.StagesOnHost)), 1
	}
	return 1, cores
}

// prediction is the predicted step, by part.
type prediction struct {
	Transfer  time.Duration // one activation (or its gradient) between adjacent stages
	Pipeline  time.Duration // the schedule's makespan
	Bubble    float64       // its idle share
	AllReduce time.Duration // the replicas' gradient all-reduce (0 with one replica)
	Others    time.Duration // the tied embedding's sum and the clipping's norm
	Optimizer time.Duration // the optimizer's step, measured (the caller adds it)
	Step      time.Duration
}

func (p prediction) String() string {
	return fmt.Sprintf("%.1f ms a step (pipeline %.1f ms, bubble %.0f%%, %.2f ms a transfer; gradient all-reduce %.1f ms; others %.2f ms; optimizer %.1f ms, measured)",
		ms(p.Step), ms(p.Pipeline), 100*p.Bubble, ms(p.Transfer), ms(p.AllReduce), ms(p.Others), ms(p.Optimizer))
}

func ms(d time.Duration) float64 { return d.Seconds() * 1e3 }

// predict simulates sched with the stages' costs (seconds, each measured
// alone on a CPU, as pipeline.Profile measures) on place, with an
// activation of actBytes between adjacent stages, and adds the other
// collectives' predicted times.
func predict(sched *schedule.Schedule, stages []schedule.StageCosts, place placement, actBytes int, allReduce, others time.Duration) (prediction, error) {
	scale, cores := place.processors()
	f := scale
	costs := schedule.Costs{Cores: cores, Stages: make([]schedule.StageCosts, len(stages))}
	for i, s := range stages {
		costs.Stages[i] = schedule.StageCosts{Forward: s.Forward * f, Backward: s.Backward * f,
			BackwardInput: s.BackwardInput * f, BackwardWeight: s.BackwardWeight * f}
	}
	transfer := place.Link.Latency
	if place.Link.Bandwidth > 0 {
		transfer += time.Duration(float64(actBytes) / place.Link.Bandwidth * 1e9)
	}
	costs.Comm = transfer.Seconds()
	sim, err := schedule.Simulate(sched, costs)
	if err != nil {
		return prediction{}, err
	}
	pipe := time.Duration(sim.Makespan * 1e9)
	return prediction{Transfer: transfer, Pipeline: pipe, Bubble: sim.Bubble, AllReduce: allReduce, Others: others,
		Step: pipe + allReduce + others}, nil
}
