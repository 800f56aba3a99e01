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
)

var opNames = [...]string{"", "broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter",
	"reduce_scatter", "all_to_all", "barrier", "monitored_barrier", "send/recv", "object collective", "new_group"}

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
}

const noRoot = 0x7ff

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

// DesyncError reports that two ranks issued different collectives as the
// same call of a group: collectives must be called in the same order, with
// the same dtype, count, root and reduce op, on every member.
type DesyncError struct {
	Group        uint32
	Seq          uint64
	Rank, Peer   int    // global ranks
	Mine, Theirs string // the two calls
}

func (e *DesyncError) Error() string {
	return fmt.Sprintf("dist: collectives out of step in group %d at call %d: rank %d called %s, rank %d called %s; every member must issue the same collectives in the same order",
		e.Group, e.Seq, e.Rank, e.Mine, e.Peer, e.Theirs)
}

// RankError reports that a peer failed (its process died, or its
// connection broke): the group is unusable.
type RankError struct {
	Rank int // global rank of the failed peer
	Op   string
	Err  error
}

func (e *RankError) Error() string {
	return fmt.Sprintf("dist: %s failed: rank %d is gone: %v; the group cannot continue: restart the job (godist run --max-restarts) or build a new group", e.Op, e.Rank, e.Err)
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

	seq uint64 // the call's sequence number, for the group timeout's own
}

func (e *TimeoutError) Error() string {
	s := fmt.Sprintf("dist: %s timed out after %s", e.Op, e.Timeout)
	if len(e.Waiting) > 0 {
		s += fmt.Sprintf(" waiting on ranks %v", e.Waiting)
	}
	return s + "; a peer is stuck or behind (use MonitoredBarrier to find it)"
}

// asDesync turns a transport fingerprint error into a DesyncError.
func asDesync(g *Group, err error) error {
	var fe *transport.FingerprintError
	if !errors.As(err, &fe) {
		return err
	}
	return &DesyncError{Group: fe.Key.Group, Seq: fe.Key.Seq, Rank: g.world.rank, Peer: fe.Src,
		Mine: decodeCall(fe.Want).String(), Theirs: decodeCall(fe.Got).String()}
}

// ErrDestroyed is the failure of a group after Destroy.
var ErrDestroyed = errors.New("dist: group destroyed")
