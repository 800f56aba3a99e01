package rref_test

import (
	"fmt"

	"github.com/godist/godist/rpc/rref"
)

// Worker 1 calls remote() on worker 0, passes the RRef to worker 2, and
// both users release it. Here messages are delivered by hand, in order;
// an agent sends them over its transport and calls Handle on arrival.
func Example() {
	w0, w1, w2 := rref.NewTable(0), rref.NewTable(1), rref.NewTable(2)
	tables := map[rref.WorkerID]*rref.Table{0: w0, 1: w1, 2: w2}
	var deliver func(out []rref.Msg)
	deliver = func(out []rref.Msg) {
		for _, m := range out {
			fmt.Println(m)
			deliver(tables[m.To].Handle(m))
		}
	}

	id, f1, _ := w1.CreateRemote(0) // the remote call carries id, f1
	_ = w0.AcceptRemote(1, id, f1)  // the owner runs the function into id
	deliver(w1.ConfirmRemote(id, f1))

	f2, _ := w1.Fork(id, f1, 2) // an RPC to worker 2 carries (0, id, f2)
	deliver(w1.Release(id, f1)) // deferred: worker 2 is not counted yet
	out, _ := w2.ReceiveFork(1, 0, id, f2)
	deliver(out)
	fmt.Println("deleted:", w0.Deleted())
	deliver(w2.Release(id, f2))
	fmt.Println("deleted:", w0.Deleted())
	fmt.Println(w0.Empty() && w1.Empty() && w2.Empty())
	// Output:
	// RREF_FORK_REQUEST worker2→worker0 rref(1.1) fork(1.3)
	// RREF_FORK_ACCEPT worker0→worker2 rref(1.1) fork(1.3)
	// RREF_CHILD_ACCEPT worker2→worker1 rref(1.1) fork(1.3)
	// RREF_USER_DELETE worker1→worker0 rref(1.1) fork(1.2) forked
	// deleted: []
	// RREF_USER_DELETE worker2→worker0 rref(1.1) fork(1.3)
	// deleted: [rref(1.1)]
	// true
}
