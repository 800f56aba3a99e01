package schedule_test

import (
	"fmt"

	"github.com/godist/godist/parallel/pipeline/schedule"
)

// Build a 1F1B schedule, check it and time it with a backward costing two
// forwards.
func Example() {
	s, err := schedule.OneFOneB(2, 3) // 2 ranks, 3 micro-batches
	if err != nil {
		panic(err)
	}
	if err := s.Validate(); err != nil {
		panic(err)
	}
	fmt.Print(s)
	res, err := schedule.Simulate(s, schedule.Costs{Forward: 1, Backward: 2})
	if err != nil {
		panic(err)
	}
	fmt.Printf("makespan %v, bubble %.2f, peak activations %v\n", res.Makespan, res.Bubble, res.PeakActivations)
	// Output:
	// 1f1b: 2 ranks, 2 stages, 3 micro-batches
	// rank 0: F0.0 SendAct0.0@1 F0.1 SendAct0.1@1 RecvGrad0.0@1 B0.0 F0.2 SendAct0.2@1 RecvGrad0.1@1 B0.1 RecvGrad0.2@1 B0.2
	// rank 1: RecvAct1.0@0 F1.0 B1.0 SendGrad1.0@0 RecvAct1.1@0 F1.1 B1.1 SendGrad1.1@0 RecvAct1.2@0 F1.2 B1.2 SendGrad1.2@0
	// makespan 12, bubble 0.25, peak activations [2 1]
}

// The figures quoted in the package doc.
func ExampleSimulate() {
	s, _ := schedule.OneFOneB(4, 8)
	res, _ := schedule.Simulate(s, schedule.Costs{Forward: 1, Backward: 2})
	fmt.Printf("bubble %.4f (3/11 = %.4f), peak activations %v\n", res.Bubble, 3.0/11, res.PeakActivations)
	// Output:
	// bubble 0.2727 (3/11 = 0.2727), peak activations [4 3 2 1]
}

// Time 1F1B for a GPT cut into 4 stages whose first carries the
// embeddings and whose last the output head and the loss, first with a
// core per rank, then with the 4 ranks on a 2-core machine. With a core
// per rank the step is the last stage's work, 8·6 = 48, plus the
// forwards before it and the backwards after it, 3.5 + 7; sharing two
// cores it cannot beat the total work over the cores, 132/2 = 66.
func ExampleCosts() {
	s, _ := schedule.OneFOneB(4, 8)
	c := schedule.Costs{Stages: []schedule.StageCosts{
		{Forward: 1.5, Backward: 3},
		{Forward: 1, Backward: 2},
		{Forward: 1, Backward: 2},
		{Forward: 2, Backward: 4},
	}}
	own, _ := schedule.Simulate(s, c)
	c.Cores = 2
	shared, _ := schedule.Simulate(s, c)
	fmt.Printf("a core per rank: makespan %v, bubble %.3f\n", own.Makespan, own.Bubble)
	fmt.Printf("2 cores: makespan %v, bubble %.3f (at least 1 - 2/4)\n", shared.Makespan, shared.Bubble)
	// Output:
	// a core per rank: makespan 58.5, bubble 0.436
	// 2 cores: makespan 71.5, bubble 0.538 (at least 1 - 2/4)
}
