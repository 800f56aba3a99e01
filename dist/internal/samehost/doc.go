// Package samehost is package dist's same-host engine: the collectives a
// process group runs without its schedules when every member shares this
// host's memory. It has two paths:
//
//   - the control block (Block): barriers and all-reduces, broadcasts,
//     all-gathers and reduce-scatters of at most MaxInput bytes a member
//     go through slots in the members' shared memory instead of the
//     transport;
//   - shared tensors (Tensors): collectives on pieces of at least
//     MinShared bytes of a tensor that every member has mapped from every
//     other (dist's Group.NewSharedTensor) read the others' inputs
//     straight out of their memory, and write results into it.
//
// The order of the calls through the block is a pure core, Turns, with
// no memory, goroutines or clocks: calls numbered in the order they are
// issued, run one at a time in that order, call k in slot Slot(k).
//
// The engine maps nothing and sends nothing. The process group gives it
// the memory (Regions: transport.PeerMemory has it) and what it needs of
// the group (Group): whether a member's connection ended, that a call
// waits on a member (the group's timeouts and probes), and the exchanges
// of small frames that order a shared-tensor call's steps. The reduction
// kernels come with each call (Reduction). Which path a call takes is the
// group's decision (dist's route), made once when the call is issued.
//
// # Driving it
//
//	e := samehost.New(samehost.Config{ID: id, Ranks: ranks, Rank: rank, Group: hooks})
//	// when every member has mapped every other's block (a shared tensor
//	// of BlockBytes bytes):
//	e.SetBlock(e.Tensors.Add(mem, regions, ids, release))
//
//	// issuing call seq (under the lock that numbers the group's calls,
//	// so that the block's calls are numbered in the same order):
//	if e.BlockFits(n) { // n: a member's largest input, in bytes
//		e.Block().Issue(seq)
//	}
//	// running it, on any goroutine, once:
//	err := e.Block().AllReduce(ctx, samehost.Call{Seq: seq, FP: fp}, buf, red)
//
//	// a large call on a piece of a shared tensor:
//	if t, _ := e.Tensors.Piece(buf); t != nil {
//		err = e.Tensors.AllReduce(ctx, samehost.Call{Seq: seq, FP: fp}, buf, es, red)
//	}
//
// ctx ends the call's waits: the group cancels it when it fails (a
// member's death, a timeout, a desync found elsewhere), so failures reach
// these calls as they reach any other. Every member must issue the same
// calls in the same order, and take the same path for each.
//
// # The control block
//
// Each member's block is BlockBytes of its own shared memory, which the
// others map. All integers are little-endian and the block starts on a
// 64-byte boundary (a mapping starts on a page).
//
//	 off  size  field
//	   0    64  slot 0's header: sequence word (8), fingerprint (8), length (4), zero
//	  64  4096  slot 0's input (MaxInput)
//	4160    64  slot 1's header
//	4224  4096  slot 1's input
//	8320     4  sleepers: members asleep on this member's sequence words
//	8324    60  zero (BlockBytes: 8384)
//
// In call k (its ordinal, from Turns) a member writes its input (if any)
// into its slot Slot(k), then the header's fingerprint and length, then
// stores k in the sequence word, and waits until the members whose
// inputs it needs have stored k (or later) in their own slot Slot(k):
// every other member, or for a broadcast the root (and the root waits on
// nobody); then it reads their inputs (all of them, in rank order, for
// an all-reduce, so that every member reduces in the same order and all
// get the same bits). A frame through the transport is a copy into a
// ring, a header, a reader that polls, a handoff to the waiting call;
// here it is a store and a load of one cache line each way.
//
// # Ordering
//
// Calls through the block run one at a time on each member, in the order
// they were issued (Turns). Before a member writes its slot in call k, it
// waits until every other member has stored k-1 (or later) in its slot
// Slot(k-1), unless it saw all their headers of call k-1 already (every
// call but a broadcast, where only the root's is read). Two slots are
// then enough: a member writes slot p again in call k+2 only after every
// other member has published call k+1, which each did after it had
// finished reading everyone's slots of call k; and a member waiting on
// another's header of call k never finds it overwritten, since that one
// writes call k+2 only after the waiting member has published k+1. So a
// broadcast's root goes on at once, and its members wait for the root
// alone; the cost, one call later, is a wait for the members to have
// entered the broadcast, which they usually have. (TestModel checks all
// this over every interleaving of a few members and calls, broadcasts
// among them, and that one slot, or broadcasts without the wait for the
// call before, would not do.) A member out of step finds it from the
// fingerprint of the header it reads; a broadcast's root, which reads
// none, learns it when the group fails.
//
// The sequence words and the sleepers' count are sync/atomic operations
// on the mapped memory, which order two processes as they order two
// goroutines (see transport/internal/shmring's doc); the inputs are plain
// memory, written before the sequence word's store and read after its
// load.
//
// Waiting polls the header (tightly for a microsecond or two, then
// yielding to other goroutines, or with Config.Yield to other threads of
// the host), then sleeps on the sequence word's low half (a futex) for
// naps growing to a millisecond, having counted itself in the block's
// sleepers; a writer that sees sleepers wakes them. A wakeup missed
// between the count and the sleep costs at most a nap. How long it polls
// adapts: a millisecond while the member's last wait ended within one,
// 50 µs after a longer one, and no longer once a poll finds its thread
// lost the CPU (other work wants it), or, yielding, once a yield came
// back only after other work's whole slice (cpuyield.YieldLost; after
// two such within 50 ms the engine's waits sleep at once for 100 ms:
// four ranks on two CPUs beside two CPU hogs, an 8 B all-reduce took
// 48-52 µs against 4.0 ms polling through every yield). A sleeping vCPU halts, and waking
// it costs 100-150 µs on this VM: with a fixed 50 µs poll, two ranks fell
// into turns of sleeping on each other, every call waiting out a wakeup.
//
// # Shared tensors
//
// Chunk q of every member's copy of a shared tensor is read and written
// by member q alone, so nothing races. Two exchanges of small frames
// through the group (Group.Exchange) order the steps, and carry the
// group's failure detection, timeouts and desync checks:
//
//  1. arrive: every member's input is in place (the frame carries the
//     piece's offset in the tensor, which must be the same everywhere
//     for an all-reduce or a broadcast: else an *OffsetError);
//  2. written: the member has read what it needed of the others' copies
//     and written its chunk into them; once a member has this from every
//     other, its copy holds the whole result and nobody reads it any
//     more, so the caller may write it again.
//
// An all-reduce writes its results into the others' copies with
// non-temporal stores (simd.CopyStreaming): no cache keeps those lines,
// so the owner's next writes (the next backward, for DDP's buckets) need
// not take them back from the writer's CPU. Measured on a VM whose two
// vCPUs the host moves between near and far cores: with the vCPUs far
// apart, reading the others' freshly reduced chunks instead (a third
// exchange, the copies pulled) took 200 µs for 470 KB against 33 µs
// near, and backward's writes into the lines the peer had read took
// 180 µs longer.
//
// Why: DDP's buckets live in such tensors. On the ring or halving-doubling
// schedules the member that finishes backward last does all of its share
// of the exchange after arriving (copy its half into a slot, reduce the
// other's half, copy the result into a slot, copy the other's result out:
// MLP, world 2, 940 KB: 250-300 µs while the other waits); here it only
// reduces its chunk and writes it out while the others do the same.
//
// MinShared, the smallest piece that goes this way, is where the two
// exchanges start to cost less than the payload's trip (`godist bench
// --shared`, world 2, ranks arriving together, vCPUs near: 32 KiB 27-30
// µs against recursive doubling's 18-19, 64 KiB 28-30 against 22-26, 128
// KiB 29-34 against halving-doubling's 42-50, 940 KB 88-97 against
// 126-128, 4 MiB 276-301 against 496-651; vCPUs far apart: 940 KB 70
// against 506, 4 MiB 190 against 2150).
//
// # Distrust
//
// The other members are other processes of the same job on this host,
// and their memory may stop being there: every peer region is looked up
// under the Regions lock for the call's duration, and one that is gone
// or too short fails the call with a *transport.PeerError naming the
// member. A header's fingerprint that is not this call's is a desync
// (*transport.FingerprintError, explained by dist as the transport's
// are); a length that is not what the call expects is a
// *transport.LengthError; no index is formed from a peer's length. A
// shared tensor's offsets come through the exchange and are checked
// against the tensor before use. Bytes moved through a peer's memory
// carry no checksum: they never leave the host's memory, as in MPI's and
// NCCL's shared-memory transports. A member that writes into another's
// memory outside the protocol can make its results wrong; that is a bug
// in this package, not a fault it survives.
package samehost
