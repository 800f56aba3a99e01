package dist

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/godist/godist/dist/internal/samehost"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// The engines that run collective calls, and the one decision that picks
// a call's.
//
// A collective runs on one of:
//   - the schedule: the plan chosen for the call (topology.go) run over
//     the transport by the executor (exec.go);
//   - the same-host engine's control block (package samehost's Block):
//     when every member shares this host's memory, barriers and
//     all-reduces, broadcasts, all-gathers and reduce-scatters of at most
//     4 KiB a member go through slots in the members' shared memory
//     instead of the transport;
//   - the same-host engine's shared tensors (samehost's Tensors): those
//     calls on pieces of at least 128 KiB of a tensor from
//     NewSharedTensor read the others' inputs straight out of their
//     memory.
//
// route decides, once, when the call is issued (the control block's
// calls are numbered then), and the call carries the decision (call.via).
// Every member decides alike, its input's size and whether it lies in a
// shared tensor being the same everywhere in a correct program; a member
// that differs meets a desync or a length error (explainShared).

// engine is what runs a collective call.
type engine uint8

const (
	bySchedule engine = iota // the transport, by the call's plan
	byBlock                  // the same-host engine's control block
	byShared                 // the same-host engine's shared tensors
)

// route returns the engine of a collective call whose largest input of
// any member is n bytes, in being this member's input (nil for a call
// without one, or when only the size is known: Choice).
func (g *Group) route(n int, in []byte) engine {
	switch {
	case g.host.BlockFits(n):
		return byBlock
	case g.isShared(in):
		return byShared
	}
	return bySchedule
}

// isShared reports whether b is a piece of at least 128 KiB of a tensor
// from g's NewSharedTensor.
func (g *Group) isShared(b []byte) bool {
	t, _ := g.host.Tensors.Piece(b)
	return t != nil
}

// hostCall is collective c, number seq, as the same-host engine knows it.
func hostCall(seq uint64, c call) samehost.Call {
	return samehost.Call{Seq: seq, FP: c.fingerprint()}
}

// reduction is op's kernels on dtype d for the same-host engine.
func (g *Group) reduction(op ReduceOp, d tensor.DType) samehost.Reduction {
	r := samehost.Reduction{Reduce: reduceFunc(op, d), Final: avgFinal(op, d, g.Size())}
	if op == Avg {
		n := g.Size()
		r.Scale = func(b []byte) { finishAvg(b, d, n) }
	}
	return r
}

// hostGroup is a Group as its same-host engine sees it
// (samehost.Group).
type hostGroup Group

var _ samehost.Group = (*hostGroup)(nil)

func (h *hostGroup) PeerErr(q int) error {
	g := (*Group)(h)
	return g.world.ep.PeerErr(g.ranks[q])
}

// Waiting tells the call's state machine that call seq waits on member
// q: its timeouts and probes apply from now on.
func (h *hostGroup) Waiting(seq uint64, q int) {
	g := (*Group)(h)
	now := time.Now()
	g.mu.Lock()
	out := g.mu.st.wait(g.mu.st.byseq[seq], g.ranks[q], now)
	g.armLocked(out.Arm, now)
	g.mu.Unlock()
}

func (h *hostGroup) Waited(seq uint64) {
	g := (*Group)(h)
	g.mu.Lock()
	g.mu.st.received(g.mu.st.byseq[seq])
	g.mu.Unlock()
}

// Exchange sends msg to every other member under tag of call c over the
// transport, and receives theirs into ins (by group rank): frames that
// carry the call's fingerprint, and whose waits the state machine hears
// of, as a schedule's.
func (h *hostGroup) Exchange(ctx context.Context, c samehost.Call, tag uint32, msg []byte, ins [][]byte) error {
	g := (*Group)(h)
	ep := g.world.ep
	size := g.Size()
	key := transport.Key{Group: g.id, Seq: c.Seq, Tag: tag}
	recvs := make([]*transport.Receive, size)
	for q := range size {
		if q != g.rank {
			peer := g.ranks[q]
			ins[q] = make([]byte, len(msg))
			recvs[q] = ep.Post(peer, transport.ExactMatch(peer, key), c.FP, ins[q])
		}
	}
	var err error
	for q := range size {
		if q != g.rank && err == nil {
			err = ep.Send(ctx, g.ranks[q], key, c.FP, msg)
		}
	}
	for q := range size {
		if q == g.rank {
			continue
		}
		if err == nil {
			err = g.await(ctx, recvs[q], g.ranks[q], c.Seq)
		} else {
			withdraw([]*transport.Receive{recvs[q]}, func(r *transport.Receive) *transport.Receive { return r })
		}
	}
	return err
}

// InitSmallCollectives makes g's control block of small collectives
// (samehost.go) when every member shares this host's memory; afterwards
// barriers and small all-reduces, broadcasts, all-gathers and
// reduce-scatters go through it. It is a collective: every member must
// call it, in the same order relative to its other calls. dist.Init does
// it for the groups it and their NewGroup and Split make
// (Options.SmallCollectives); groups from FromEndpoint have none unless
// this is called. Where the members do not all share memory it does
// nothing and returns nil.
func (g *Group) InitSmallCollectives(ctx context.Context) error {
	if g.Size() == 1 || g.host.Block() != nil {
		return nil
	}
	pm, ok := g.world.ep.PeerMemory()
	if !ok {
		return nil
	}
	for q, peer := range g.ranks {
		if q != g.rank && !pm.SharesMemoryWith(peer) {
			return nil
		}
	}
	_, st, err := g.newShared(ctx, tensor.Uint8, samehost.BlockBytes)
	if err != nil || st == nil {
		return err
	}
	return g.host.SetBlock(st)
}

// initCtl is InitSmallCollectives for the groups of a world that wants
// it (Options.SmallCollectives). With connections on demand, only for
// groups of at most maxCtlOnDemand members: the block needs every pair
// of members connected (a host of at most 8 ranks is at Init), and a
// larger group would make the full mesh that connecting on demand
// avoids. Every member judges by the group's size alike.
func (g *Group) initCtl(ctx context.Context) error {
	if g == nil || g.world.noCtl || (g.world.onDemand && g.Size() > maxCtlOnDemand) {
		return nil
	}
	return g.InitSmallCollectives(ctx)
}

// maxCtlOnDemand is the largest group initCtl gives a control block
// with connections on demand: the most ranks of a host that connect to
// each other at Init.
const maxCtlOnDemand = transport.MaxSharedLocals

// releaseShared releases g's shared tensors (Destroy) once no call is in
// flight on g, waiting at most wait: a call that outlives it (stuck in
// user code, say) keeps them mapped rather than meet unmapped memory.
func (g *Group) releaseShared(wait time.Duration) {
	if !g.waitIdle(wait) {
		return
	}
	g.host.Tensors.Release()
}

// SharedAllReduceApplies reports whether an all-reduce of t on g goes
// through shared memory: t is a piece of at least 128 KiB of a tensor from
// g's NewSharedTensor, and every member has mapped every other's copy. The
// same holds for a broadcast of t, and for an all-gather or a
// reduce-scatter whose input is t.
func SharedAllReduceApplies(g *Group, t *tensor.Tensor) bool {
	if !t.IsContiguous() {
		return false
	}
	return g.isShared(t.Bytes())
}

// sharedError is the error of call c through shared tensors, as dist
// reports it.
func (g *Group) sharedError(c call, err error) error {
	var oe *samehost.OffsetError
	if errors.As(err, &oe) {
		err = &OffsetMismatchError{Op: c.op.String(), Rank: g.world.rank, Peer: oe.Peer, Mine: oe.Mine, Theirs: oe.Theirs}
	}
	return explainShared(err, true)
}

// explainShared says what a frame of the wrong length at the start of a
// collective means when one side went through shared memory and the other
// did not (shared: this rank did): the first frame of a shared all-reduce
// carries 8 bytes, the piece's offset.
func explainShared(err error, shared bool) error {
	var le *transport.LengthError
	if err == nil || !errors.As(err, &le) || le.Key.Tag != 0 || (le.Got == 8) == shared {
		return err
	}
	if shared {
		return fmt.Errorf("%w: rank %d passed an ordinary tensor where this rank passed a piece of a shared one (Group.NewSharedTensor); every member must pass the same piece of its own shared tensor", err, le.Src)
	}
	return fmt.Errorf("%w: rank %d passed a piece of a shared tensor (Group.NewSharedTensor) where this rank passed an ordinary one; every member must pass the same piece of its own shared tensor", err, le.Src)
}

// OffsetMismatchError reports that members passed different pieces of a
// shared tensor to the same call (all_reduce and broadcast need the same
// piece everywhere), or a piece that does not fit in the tensor.
type OffsetMismatchError struct {
	Op           string // the collective, as PyTorch names it
	Rank, Peer   int    // global ranks
	Mine, Theirs int    // byte offsets in the shared tensor
}

func (e *OffsetMismatchError) Error() string {
	return fmt.Sprintf("dist: %s: rank %d passed the piece at byte %d of a shared tensor, rank %d the piece at byte %d; every member must pass the same piece of its copy", e.Op, e.Rank, e.Mine, e.Peer, e.Theirs)
}
