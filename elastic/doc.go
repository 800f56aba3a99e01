// Package elastic is the machinery behind `godist run`, torchrun's
// counterpart: node rendezvous and the agent that starts, watches and
// restarts a node's workers.
//
// It is built in three layers, so that the part with the most cases can be
// tested without a network or a process (see the tests):
//
//   - [Decide] and [Check] are pure functions. Given the rendezvous state a
//     node read from the store, what it saw of the other nodes' heartbeats
//     and the time (passed in as a value), they return the next state to
//     write and what the node should do: wait, start its workers with a
//     node rank, or give up.
//   - [StoreRendezvous] is the executor: it reads the state from a
//     [store.Store], applies [Decide] and writes the result back with
//     CompareAndSet, keeps a heartbeat, publishes the workers' master port
//     for each round, and watches for nodes joining and leaving.
//   - [Agent] starts a node's workers as processes with torchrun's
//     environment (RANK, LOCAL_RANK, WORLD_SIZE, ... ), prefixes or files
//     their output, stops the whole group when one fails, restarts it
//     after a new rendezvous round up to MaxRestarts, and ends with a
//     root-cause [Report].
//
// The common use is the launcher's:
//
//	st, _ := store.Dial(ctx, endpoint, store.DialOptions{JobID: runID, Token: tok})
//	rdzv := &elastic.StoreRendezvous{
//		Store:  store.NewPrefix("godist-rdzv/"+runID, st),
//		Config: elastic.Config{MinNodes: 1, MaxNodes: 2, LastCall: 30 * time.Second},
//		Self:   elastic.Node{ID: elastic.NewNodeID(), Addr: "10.0.0.7", NodeRank: -1, LocalWorldSize: 8},
//	}
//	a := &elastic.Agent{Spec: spec, Rendezvous: rdzv}
//	res := a.Run(ctx)   // res.ExitCode is the launcher's exit status
//	if res.Report != nil { fmt.Fprint(os.Stderr, res.Report) }
package elastic
