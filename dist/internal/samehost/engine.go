package samehost

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/godist/godist/internal/cpuyield"
)

// Group is what the engine needs of its process group (package dist's
// Group). Its methods may be called from any goroutine, and must not
// block except Exchange.
type Group interface {
	// PeerErr returns why member q's connection ended, or nil while it
	// lasts. A member that closed cleanly has an error here too: the
	// calls that wait on it fail, though its group does not.
	PeerErr(q int) error
	// Waiting tells the group that call seq waits on member q, once per
	// call, after a brief poll: from then on the group's timeouts and
	// probes apply to the call as to a receive. Waited tells it that the
	// call's waits ended with every member heard from (a call that fails
	// does not say so: the group learns it from the error).
	Waiting(seq uint64, q int)
	Waited(seq uint64)
	// Exchange sends msg (the caller's, read before Exchange returns) to
	// every other member under tag in call c, and receives each one's
	// message of the same length into ins[q], which it allocates
	// (ins[rank] is left alone). It blocks until all have arrived or the
	// exchange failed (ctx ended, a member died, a desync).
	Exchange(ctx context.Context, c Call, tag uint32, msg []byte, ins [][]byte) error
}

// Regions is how a member reaches the others' memory
// (transport.PeerMemory has these methods). PeerRegion returns global
// rank peer's region id as mapped here, or nil; its memory stays mapped
// between LockPeerRegions and UnlockPeerRegions, or while
// UsePeerRegions's fn runs, and may be unmapped at any other time.
type Regions interface {
	LockPeerRegions()
	UnlockPeerRegions()
	PeerRegion(peer int, id uint8) []byte
	UsePeerRegions(fn func(region func(peer int, id uint8) []byte) error) error
}

// Call is one collective call: its sequence number in the group, and
// its fingerprint (what the call is: package dist's, which its frames
// carry too). Members that find different fingerprints in one call are
// out of step.
type Call struct {
	Seq, FP uint64
}

// Reduction is how a call combines the members' inputs: the kernels of
// its reduce op and dtype, each combining src into dst elementwise (raw
// bytes, same length).
type Reduction struct {
	Reduce func(dst, src []byte)
	// Final, when not nil, replaces Reduce for the last input an
	// all-reduce combines (AVG of float32: the last sum and the scaling
	// in one pass). Reduce-scatters do not use it.
	Final func(dst, src []byte)
	// Scale, when not nil (AVG), divides a reduced buffer by the group's
	// size; an all-reduce with a Final does not call it.
	Scale func(b []byte)
}

// Config is what a group tells its engine when it is made.
type Config struct {
	ID    uint32 // the group's id, in the keys of the errors
	Ranks []int  // the members' global ranks, by group rank
	Rank  int    // this member's group rank
	// Yield makes waits yield the CPU to other threads of the host
	// between polls (sched_yield), instead of spinning tightly first:
	// more ranks than CPUs, where the member waited for may need this
	// CPU to get there.
	Yield bool
	Group Group
}

// Engine is a group's same-host engine: its control block, once the
// group has made one, and its shared tensors. A group of one member, or
// one whose members do not share memory, has an engine with neither.
type Engine struct {
	id    uint32
	ranks []int
	rank  int
	yield bool
	// yieldHold: the block's waits lost yields to other work's whole
	// slices lately (cpuyield.YieldLost), and sleep at once. Its own,
	// not the transport's: the readers of a process's shared-memory
	// rings do not sleep after the block's lost yields, which the job's
	// own ranks cause too.
	yieldHold cpuyield.Hold
	g         Group

	calls atomic.Int64          // calls run through the block or shared tensors
	block atomic.Pointer[Block] // nil until SetBlock

	// Tensors are the group's shared tensors.
	Tensors Tensors
}

// New returns the engine of a group of members c.Ranks.
func New(c Config) *Engine {
	e := &Engine{id: c.ID, ranks: c.Ranks, rank: c.Rank, yield: c.Yield, g: c.Group}
	e.Tensors.e = e
	return e
}

// Calls counts the calls that went through the block or shared tensors.
func (e *Engine) Calls() int64 { return e.calls.Load() }

// Block returns the group's control block, or nil.
func (e *Engine) Block() *Block { return e.block.Load() }

// SetBlock makes t, a shared tensor of at least BlockBytes (zeroed on
// every member), the group's control block. Every member must call it
// with its copy before issuing any call through the block, and at most
// once; the block is never unset (t must outlive the calls through it).
func (e *Engine) SetBlock(t *Tensor) error {
	if len(t.mem) < BlockBytes {
		return fmt.Errorf("samehost: a control block of %d bytes, want %d", len(t.mem), BlockBytes)
	}
	if !e.block.CompareAndSwap(nil, &Block{e: e, mine: t.mem, regions: t.regions, ids: t.ids}) {
		return fmt.Errorf("samehost: the group has a control block already")
	}
	return nil
}

// BlockFits reports whether a call whose largest input, of any member,
// is n bytes goes through the control block: there is one, and n is at
// most MaxInput.
func (e *Engine) BlockFits(n int) bool { return n <= MaxInput && e.block.Load() != nil }

// OffsetError reports that members passed different pieces of a shared
// tensor to a call that needs the same piece everywhere (all-reduce,
// broadcast), or a piece that does not fit in the tensor.
type OffsetError struct {
	Peer         int // the global rank whose piece differs
	Mine, Theirs int // byte offsets in the shared tensor
}

func (e *OffsetError) Error() string {
	return fmt.Sprintf("samehost: this member passed the piece at byte %d of a shared tensor, rank %d the piece at byte %d", e.Mine, e.Peer, e.Theirs)
}

type errorString string

func (e errorString) Error() string { return string(e) }

var (
	errBlockUnmapped  = errorString("its control block is no longer mapped (connection ended)")
	errTensorUnmapped = errorString("its shared tensor is no longer mapped (connection ended)")
	// ErrReleased is the error of a call on a piece of a shared tensor
	// that was released after the call was issued.
	ErrReleased = errorString("samehost: the shared tensor was released while a call on it was in flight")
)
