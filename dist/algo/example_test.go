package algo_test

import (
	"fmt"

	"github.com/godist/godist/dist/algo"
)

// An executor asks for a plan once per call, then runs its own rank's
// schedule round by round: post the receives, start the sends, wait for
// all, and apply the reduction for receives marked Reduce.
func ExampleChooseAllReduce() {
	const size, count, elemSize = 4, 8, 4 // 8 float32s on 4 ranks
	plan := algo.ChooseAllReduce(size, count, elemSize)
	fmt.Println(plan)
	fmt.Print(plan.Schedule(1))

	big := algo.ChooseAllReduce(size, 64<<20, elemSize) // 256 MiB
	fmt.Println(big, len(big.Schedule(0)), "rounds")
	// Output:
	// recursive-doubling
	// round 0: send[0:8]->0 reduce[0:8]<-0 (snapshot)
	// round 1: send[0:8]->3 reduce[0:8]<-3 (snapshot)
	// ring/16 96 rounds
}

func ExampleRingAllReduce() {
	fmt.Print(algo.RingAllReduce(0, 3, 6, 1))
	// Output:
	// round 0: send[4:6]->1 reduce[2:4]<-2
	// round 1: send[2:4]->1 reduce[0:2]<-2
	// round 2: send[0:2]->1 recv[4:6]<-2
	// round 3: send[4:6]->1 recv[2:4]<-2
}
