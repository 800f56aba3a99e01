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
