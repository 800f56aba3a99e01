package dist

import (
	"errors"
	"fmt"
	"strings"

	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// opKind names a collective or point-to-point call.
type opKind uint8

const (
	opBroadcast opKind = iota + 1
	opReduce
	opAllReduce
	opGather
	opAllGather
	opScatter
	opReduceScatter
	opAllToAll
	opBarrier
	opMonitoredBarrier
	opSend
	opObject
	opNewGroup
	opAllToAllEqual // all_to_all_single with equal splits: count is the block
)

var opNames = [...]string{"", "broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter",
	"reduce_scatter", "all_to_all", "barrier", "monitored_barrier", "send/recv", "object collective", "new_group",
	"all_to_all_single (equal splits)"}

func (o opKind) String() string {
	if int(o) < len(opNames) && o > 0 {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// call describes one collective call; its fingerprint rides in every frame
// the call sends, so a rank that receives a frame from a different call
// knows the ranks have fallen out of step.
type call struct {
	op    opKind
	dtype tensor.DType
	count int // elements (per rank, where the op has a per-rank count)
	root  int // -1 when the op has none
	rop   ReduceOp
	// via is the engine that runs the call (samehost.go), decided when
	// it is issued (route). Not part of the fingerprint.
	via engine
}

const noRoot = 0x7ff

// bulk reports whether the call moves at least bulkBytes a rank: work
// that keeps ranks sharing a CPU busy for milliseconds at a time
// (cpuyield.BulkBegan).
func (c call) bulk() bool { return int64(c.count)*int64(c.dtype.Size()) >= bulkBytes }

// bulkBytes is the size from which a call is bulk work: an all-reduce of
// 1 MiB copies and reduces for about a millisecond on each rank of a
// host, the time in which a lost yield (cpuyield.LostYield, 2 ms)
// becomes possible.
const bulkBytes = 1 << 20

// fingerprint packs the call into 64 bits: op 5, dtype 4, reduce op 4,
// root 11, count 40. It is decodable, so a desync error can say what the
// other rank was doing.
func (c call) fingerprint() uint64 {
	root := uint64(noRoot)
	if c.root >= 0 && c.root < noRoot {
		root = uint64(c.root)
	}
	return uint64(c.op)&0x1f<<59 | uint64(c.dtype)&0xf<<55 | uint64(c.rop)&0xf<<51 | root<<40 | uint64(c.count)&(1<<40-1)
}

func decodeCall(fp uint64) call {
	c := call{
		op:    opKind(fp >> 59),
		dtype: tensor.DType(fp >> 55 & 0xf),
		rop:   ReduceOp(fp >> 51 & 0xf),
		root:  int(fp >> 40 & noRoot),
		count: int(fp & (1<<40 - 1)),
	}
	if c.root == noRoot {
		c.root = -1
	}
	return c
}

func (c call) String() string {
	if c.op == opNewGroup {
		return fmt.Sprintf("new_group(rank list #%x)", c.count)
	}
	var parts []string
	if c.dtype != tensor.Invalid {
		parts = append(parts, c.dtype.String())
	}
	parts = append(parts, fmt.Sprintf("%d elements", c.count))
	if c.root >= 0 {
		parts = append(parts, fmt.Sprintf("root %d", c.root))
	}
	if c.rop != 0 {
		parts = append(parts, c.rop.String())
	}
	return fmt.Sprintf("%v(%s)", c.op, strings.Join(parts, ", "))
}

// DesyncError reports that two ranks issued different calls where they
// had to match: different collectives as the same call of a group
// (collectives must be called in the same order, with the same dtype,
// count, root and reduce op, on every member), or a point-to-point
// message unlike the receive it met (a Recv must match its Send's dtype
// and element count).
type DesyncError struct {
	Group        uint32
	Seq          uint64 // the collective's sequence number, or the message's number in its stream
	Rank, Peer   int    // global ranks: Rank found that Peer's call was unlike its own
	Mine, Theirs string // Rank's call and Peer's
	// P2P marks a point-to-point message, of the stream with Tag.
	P2P bool
	Tag int
}

func (e *DesyncError) Error() string {
	if e.P2P {
		return fmt.Sprintf("dist: point-to-point message out of step in group %d: message %d with tag %d between ranks %d and %d: rank %d called %s, rank %d called %s; a Recv must match its Send's dtype and element count",
			e.Group, e.Seq, e.Tag, e.Peer, e.Rank, e.Rank, e.Mine, e.Peer, e.Theirs)
	}
	return fmt.Sprintf("dist: collectives out of step in group %d at call %d: rank %d called %s, rank %d called %s; every member must issue the same collectives in the same order",
		e.Group, e.Seq, e.Rank, e.Mine, e.Peer, e.Theirs)
}

// AbortError reports that another member failed the group for a reason
// of its own (a size mismatch in a call, say), and told this one.
type AbortError struct {
	Rank   int // global rank of the member that failed the group
	Reason string
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("dist: rank %d failed the group: %s", e.Rank, e.Reason)
}

// RankError reports that a peer failed (its process died, or its
// connection broke): the group is unusable.
type RankError struct {
	Rank int // global rank of the failed peer
	Op   string
	Err  error
}

func (e *RankError) Error() string {
	what := "is gone"
	if errors.Is(e.Err, transport.ErrFrame) {
		what = "broke the protocol"
	}
	return fmt.Sprintf("dist: %s failed: rank %d %s: %v; the group cannot continue: restart the job (godist run --max-restarts) or build a new group", e.Op, e.Rank, what, e.Err)
}

func (e *RankError) Unwrap() error { return e.Err }

// ErrGroupFailed is wrapped by the errors of calls on a group that failed
// earlier.
var ErrGroupFailed = errors.New("dist: group failed earlier")

// TimeoutError reports a call that did not finish within the group's
// timeout: some peer stopped taking part without its process dying.
type TimeoutError struct {
	Op      string
	Timeout string
	Waiting []int // global ranks the call was waiting on when it timed out, if known
	// Chain and Cause, when the ranks publish their status (Init's
	// default), follow the waits from Waiting[0] to the rank they all
	// wait for, and say why it does not answer (see WaitChain).
	Chain []int
	Cause string
	// StoreSilent: the job's store did not answer, so the records could
	// not be read (all of them); the last of Chain is the rank that
	// serves the store, which every rank waits on.
	StoreSilent bool

	call callID // the call that timed out, which reports this error itself
}

func (e *TimeoutError) Error() string {
	s := fmt.Sprintf("dist: %s timed out after %s", e.Op, e.Timeout)
	if len(e.Waiting) > 0 {
		s += fmt.Sprintf(" waiting on ranks %v", e.Waiting)
	}
	followed := e.Chain
	if e.StoreSilent && len(followed) > 0 {
		followed = followed[:len(followed)-1] // the store's host, not a wait
	}
	if len(followed) > 1 {
		s += fmt.Sprintf(", which waits on %s in turn", joinRanks(followed[1:]))
	}
	if e.Cause != "" {
		return s + "; " + e.Cause
	}
	if len(e.Chain) > 1 {
		return s + fmt.Sprintf("; rank %d's status could not be read: look at it first", e.Chain[len(e.Chain)-1])
	}
	return s + "; a peer is stuck or behind (use MonitoredBarrier or godist top to find it)"
}

// ErrDestroyed is the failure of a group after Destroy.
var ErrDestroyed = errors.New("dist: group destroyed")
