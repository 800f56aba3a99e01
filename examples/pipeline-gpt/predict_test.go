package main

import (
	"math"
	"testing"
	"time"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/parallel/pipeline/schedule"
)

func TestProcessors(t *testing.T) {
	for _, c := range []struct {
		p     placement
		scale float64
		cores int
	}{
		{placement{CPUs: 1, RanksOnHost: 2, StagesOnHost: 1}, 2, 0}, // stages across hosts, two replicas a CPU
		{placement{CPUs: 2, RanksOnHost: 2, StagesOnHost: 1}, 1, 0}, // a CPU each
		{placement{CPUs: 1, RanksOnHost: 2, StagesOnHost: 2}, 1, 1}, // a pipeline on one CPU
		{placement{CPUs: 2, RanksOnHost: 4, StagesOnHost: 2}, 1, 1}, // two pipelines on two CPUs
		{placement{CPUs: 4, RanksOnHost: 2, StagesOnHost: 2}, 1, 0}, // more CPUs than ranks
		{placement{CPUs: 1, RanksOnHost: 4, StagesOnHost: 2}, 2, 1}, // half a CPU for two stages
		{placement{CPUs: 0, RanksOnHost: 0, StagesOnHost: 0}, 1, 0}, // unknown: a CPU each
	} {
		scale, cores := c.p.processors()
		if math.Abs(scale-c.scale) > 1e-12 || cores != c.cores {
			t.Errorf("%+v: scale %g, cores %d; want %g, %d", c.p, scale, cores, c.scale, c.cores)
		}
	}
}

func TestPredict(t *testing.T) {
	sched, err := schedule.ByName("gpipe", 2, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	stage := schedule.StageCosts{Forward: 1e-3, Backward: 2e-3, BackwardInput: 1e-3, BackwardWeight: 1e-3}
	costs := []schedule.StageCosts{stage, stage}
	// One CPU a rank, no transfer time: GPipe's (m + p - 1)(F + B).
	p, err := predict(sched, costs, placement{CPUs: 2, RanksOnHost: 2, StagesOnHost: 2}, 0, 3*time.Millisecond, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Pipeline - 15*time.Millisecond; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("pipeline %v, want 15ms", p.Pipeline)
	}
	if p.Step != p.Pipeline+4*time.Millisecond || p.Bubble <= 0 {
		t.Errorf("%+v: want the step the pipeline plus 4 ms of collectives, and a bubble", p)
	}
	// Stages on two hosts over a link of 100 µs and 100 MB/s: 1 ms a
	// transfer of 90 kB, and a pipeline the simulator makes longer by it.
	link := placement{Link: algo.Link{Latency: 100 * time.Microsecond, Bandwidth: 1e8}, CPUs: 1, RanksOnHost: 1, StagesOnHost: 1}
	q, err := predict(sched, costs, link, 90_000, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := schedule.Simulate(sched, schedule.Costs{Stages: costs, Comm: 1e-3})
	if q.Transfer != time.Millisecond || math.Abs(q.Pipeline.Seconds()-want.Makespan) > 1e-9 || q.Pipeline <= p.Pipeline {
		t.Errorf("%+v: want 1 ms transfers and the simulator's %v s", q, want.Makespan)
	}
	// Both stages and another pipeline's on one CPU: the stages take turns
	// on the half of it their pipeline has.
	r, err := predict(sched, costs, placement{CPUs: 1, RanksOnHost: 4, StagesOnHost: 2}, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	alone := make([]schedule.StageCosts, 2)
	for i := range alone {
		alone[i] = schedule.StageCosts{Forward: 2e-3, Backward: 4e-3, BackwardInput: 2e-3, BackwardWeight: 2e-3}
	}
	want, _ = schedule.Simulate(sched, schedule.Costs{Stages: alone, Cores: 1})
	if math.Abs(r.Pipeline.Seconds()-want.Makespan) > 1e-9 {
		t.Errorf("shared CPU: pipeline %v, want %v s", r.Pipeline, want.Makespan)
	}
}
