// Package dist provides process groups: the collectives, point-to-point
// messages and subgroups of torch.distributed, over the authenticated
// connections of package transport.
//
// Init joins a job (env://, tcp://host:port, file:///path,
// etcd://host:port/prefix with store/etcdstore imported, or an explicit
// store; the variables of godist run, torchrun, Slurm and mpirun) and
// returns the default group of all ranks; nothing is global. A Group runs
// broadcast, reduce, all_reduce, gather, all_gather, scatter,
// reduce_scatter, all_to_all, barrier and a monitored barrier with every
// reduce op (Sum, Avg, Product, Min, Max, BAnd, BOr, BXor); Send, Recv,
// ISend, IRecv and BatchISendIRecv; and typed object collectives
// (AllGatherObject and the like: gob, data only, never code). NewGroup and
// Split make subgroups, which number their calls apart from their parent.
//
// Ordering. Every member must issue a group's collectives in the same
// order, with the same dtype, element count, root and reduce op. Each call
// gets the next sequence number of its group, and a fingerprint of it
// (op, dtype, count, root, reduce op) rides in the header of every frame it
// sends. A member that receives a frame, or answers a probe, for the same
// call number with another fingerprint fails the group on every member
// with a *DesyncError naming both ranks and both calls; a receive that has
// waited 500 ms asks its peer which call it is in, so a desync where each
// side waits for the other is found then, not at the timeout. The check is
// always on. Point-to-point messages are numbered per (sender, receiver,
// tag) stream, apart from collectives: the n-th Send from a to b with tag
// t meets b's n-th Recv from a with tag t, and their dtypes and counts are
// checked the same way.
//
// Failures. A group that fails stays failed: every call in flight and
// every later one returns an error, and the members are told why. A peer
// whose process dies closes its connections; the group fails at once with
// a *RankError naming it (a host that vanishes without closing them is
// found by the timeout). A call that does not finish within the group's
// timeout (Options.Timeout, 30 minutes by default, as gloo's) fails with a
// *TimeoutError naming the ranks it was waiting on. The caller's context
// ends a call too. Input a member can check alone (a nil or
// non-contiguous tensor, a root outside the group) is an *InputError and
// fails nothing; a member that fails the group for a reason of its own (a
// peer's sizes unlike its own, say) makes the others' calls return an
// *AbortError. Later calls wrap ErrGroupFailed and the first failure
// (ErrDestroyed after Destroy). Nothing panics across a rank boundary: use
// errors.Is and errors.As to tell these apart.
//
// Async work. Each call has a synchronous form and an async one returning
// a *Work (Wait, Done, Err; Source for a receive); the synchronous form is
// the async form plus Wait. A tensor passed to an async call must not be
// touched until its Work is done. Go wraps a function of several calls
// into one Work (a DDP communication hook).
//
// Shared memory. When all of a group is on one host and the transport
// offers peer memory (transport.PeerMemory: TCP with shared memory on), a
// tensor from NewSharedTensor is mapped by every member from every other,
// and an all-reduce of it, or of a piece of at least 128 KiB, reduces
// straight out of the others' copies instead of sending the payload. It is
// an optional capability: elsewhere NewSharedTensor returns an ordinary
// tensor and the results are the same. A shared tensor is freed by its
// Release or the group's Destroy, never by the garbage collector.
//
// Diagnosis. Every group keeps its last calls (sequence number, op, sizes,
// peers, state, times) in a fixed ring: FlightRecord reads it, DumpFlight
// writes every group's to a JSON file, which a job made by Init also does
// by itself when a group fails with a timeout or a desync, and on SIGUSR1
// once asked (DumpOnSignal; godist run asks for its workers);
// WriteChromeTrace turns records into a chrome://tracing timeline (godist
// trace merges the ranks' files). A rank made by Init also publishes the
// call it is in, for how long and the peer it waits on to the job's store
// (RankStatus), where godist top shows every rank's live and names a rank
// that stopped.
//
// Hosts. A group knows which members share a host (Topology, from the
// host identity every rank publishes at Init). On one host its calls
// choose their algorithm by world size and message size; across hosts by
// a cost model (Model: shared memory's and the network's latency and
// bandwidth, measured at Init by rank 0 against a rank of another host,
// or Options.Model), which predicts every candidate's time, two-level
// schedules among them (reduce on each host, exchange across hosts,
// spread on each host), and takes the fastest. Choice says what a call
// runs and the predicted time.
//
// The algorithms are pure schedules in package dist/algo; the group runs
// them over the transport. Package dist/spawn starts ranks as processes
// (torch.multiprocessing.spawn); package dist/disttest runs them as
// goroutines in a test.
//
// A training step's all-reduce, under godist run or torchrun:
//
//	g, err := dist.Init(ctx, dist.Options{}) // env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//	if err != nil {
//		return err
//	}
//	defer g.Destroy()
//	grad := tensor.Zeros(1024)
//	// ... backward fills grad ...
//	if err := g.AllReduce(ctx, grad, dist.Avg); err != nil {
//		var re *dist.RankError
//		if errors.As(err, &re) {
//			log.Printf("rank %d died; the launcher restarts the job", re.Rank)
//		}
//		return err
//	}
//	w := g.BroadcastAsync(weights, 0) // overlaps with what follows
//	// ...
//	if err := w.Wait(ctx); err != nil {
//		return err
//	}
//	sub, err := g.NewGroup(ctx, []int{0, 1}) // every member calls it; others get nil
package dist
