package rref

// The RRef control protocol's wire format. This file is all of it.
//
// The agent carries these messages in whatever frames its transport uses;
// a Msg is a fixed 40-byte record, all integers big endian:
//
//	 0  4  magic/version  protoMagic ("GRR" + version byte)
//	 4  1  kind           ForkRequest .. UserDelete
//	 5  1  flags          bit 0: Forked (UserDelete only); others zero
//	 6  2  zero           reserved, must be zero
//	 8  4  from           sending worker
//	12  4  to             receiving worker
//	16  4  rref creator   RRefID.Creator
//	20  8  rref local     RRefID.Local
//	28  4  fork creator   ForkID.Creator
//	32  8  fork local     ForkID.Local
//
// The remote call that creates an RRef, its reply, and the RPCs that carry
// RRefs as arguments or results are not control messages: they travel in
// the agent's own RPC frames with (owner, RRefID, ForkID) beside the
// payload, and reach the Table through AcceptRemote, ConfirmRemote and
// ReceiveFork.

import (
	"encoding/binary"
	"fmt"
)

const (
	protoVersion = 1
	protoMagic   = uint32('G')<<24 | uint32('R')<<16 | uint32('R')<<8 | protoVersion

	// MsgSize is the encoded size of every Msg, in bytes.
	MsgSize = 40
)

// WorkerID names a worker (an RPC rank).
type WorkerID int32

func (w WorkerID) String() string { return fmt.Sprintf("worker%d", int32(w)) }

// RRefID names an RRef globally: the worker that created it and a counter
// local to that worker. The creator is the caller of remote() (or the owner
// itself for an RRef made from a local value), not necessarily the owner.
// Counters start at 1, so the zero RRefID names nothing.
type RRefID struct {
	Creator WorkerID
	Local   uint64
}

// IsZero reports whether id is the zero RRefID, which names nothing.
func (id RRefID) IsZero() bool { return id.Local == 0 }

func (id RRefID) String() string { return fmt.Sprintf("rref(%d.%d)", int32(id.Creator), id.Local) }

// ForkID names one reference (one handle) to an RRef globally: the worker
// that minted it and a counter local to that worker. Each UserRRef has its
// own ForkID, and so does each local handle the owner holds. The zero
// ForkID names nothing.
type ForkID struct {
	Creator WorkerID
	Local   uint64
}

// IsZero reports whether f is the zero ForkID, which names nothing.
func (f ForkID) IsZero() bool { return f.Local == 0 }

func (f ForkID) String() string { return fmt.Sprintf("fork(%d.%d)", int32(f.Creator), f.Local) }

// Kind is a control message kind.
type Kind uint8

const (
	// ForkRequest (user → owner): "I received fork Fork of RRef; count it."
	// Sent by a user that received an RRef from a worker other than the
	// owner. The owner answers with ForkAccept.
	ForkRequest Kind = iota + 1
	// ForkAccept (owner → user): "fork Fork of RRef is counted." The user's
	// reference is now confirmed by the owner.
	ForkAccept
	// ChildAccept (child → parent): "the owner knows my fork Fork; stop
	// holding yours for me." Sent by the receiver of an RRef to the worker
	// that sent it, once the owner has counted the new fork (or at once by
	// the owner when the RRef was sent to the owner).
	ChildAccept
	// UserDelete (user → owner): "fork Fork of RRef is released." Sent only
	// once the fork is confirmed and its own pending children are accepted.
	UserDelete

	numKinds
)

var kindNames = [...]string{
	ForkRequest: "RREF_FORK_REQUEST",
	ForkAccept:  "RREF_FORK_ACCEPT",
	ChildAccept: "RREF_CHILD_ACCEPT",
	UserDelete:  "RREF_USER_DELETE",
}

func (k Kind) String() string {
	if k == 0 || k >= numKinds {
		return fmt.Sprintf("Kind(%d)", uint8(k))
	}
	return kindNames[k]
}

// Msg is one control message. Table methods return the messages to send;
// the agent delivers each to Handle on the Table of worker To. Messages may
// be delayed, reordered and duplicated; they may be lost only when From or
// To goes down (see Table.PeerDown).
type Msg struct {
	Kind Kind
	From WorkerID
	To   WorkerID
	RRef RRefID
	Fork ForkID
	// Forked is set on a UserDelete whose fork was sent on to other
	// workers: ForkRequests descending from it may still be in flight or
	// duplicated, so the owner remembers the RRef's deletion.
	Forked bool
}

func (m Msg) String() string {
	s := fmt.Sprintf("%v %v→%v %v %v", m.Kind, m.From, m.To, m.RRef, m.Fork)
	if m.Forked {
		s += " forked"
	}
	return s
}

const flagForked = 1

// AppendBinary appends the MsgSize-byte encoding of m to b. It never fails;
// the error is there for encoding.BinaryAppender.
func (m Msg) AppendBinary(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint32(b, protoMagic)
	var flags byte
	if m.Forked {
		flags |= flagForked
	}
	b = append(b, byte(m.Kind), flags, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(m.From))
	b = binary.BigEndian.AppendUint32(b, uint32(m.To))
	b = binary.BigEndian.AppendUint32(b, uint32(m.RRef.Creator))
	b = binary.BigEndian.AppendUint64(b, m.RRef.Local)
	b = binary.BigEndian.AppendUint32(b, uint32(m.Fork.Creator))
	b = binary.BigEndian.AppendUint64(b, m.Fork.Local)
	return b, nil
}

// MarshalBinary returns the MsgSize-byte encoding of m.
func (m Msg) MarshalBinary() ([]byte, error) {
	return m.AppendBinary(make([]byte, 0, MsgSize))
}

// UnmarshalBinary decodes one message from exactly MsgSize bytes. It
// checks the length, the magic and version, the kind, the flags and
// reserved bytes, and that both IDs are non-zero, and fails with an error wrapping
// ErrMalformed otherwise; it never panics. It does not check that To is
// the receiving worker: Handle ignores misrouted messages.
func (m *Msg) UnmarshalBinary(b []byte) error {
	if len(b) != MsgSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(b), MsgSize)
	}
	if got := binary.BigEndian.Uint32(b); got != protoMagic {
		if got>>8 == protoMagic>>8 {
			return fmt.Errorf("%w: protocol version %d, this build speaks %d (mixed godist versions in one job?)", ErrMalformed, got&0xff, protoVersion)
		}
		return fmt.Errorf("%w: bad magic %#x (not an RRef control message)", ErrMalformed, got)
	}
	k := Kind(b[4])
	if k == 0 || k >= numKinds {
		return fmt.Errorf("%w: unknown kind %d", ErrMalformed, b[4])
	}
	if b[6]|b[7] != 0 {
		return fmt.Errorf("%w: reserved bytes %#x %#x are not zero", ErrMalformed, b[6], b[7])
	}
	if f := b[5]; f&^flagForked != 0 || f != 0 && k != UserDelete {
		return fmt.Errorf("%w: flags %#x on %v", ErrMalformed, f, k)
	}
	d := Msg{
		Kind:   k,
		From:   WorkerID(binary.BigEndian.Uint32(b[8:])),
		To:     WorkerID(binary.BigEndian.Uint32(b[12:])),
		RRef:   RRefID{WorkerID(binary.BigEndian.Uint32(b[16:])), binary.BigEndian.Uint64(b[20:])},
		Fork:   ForkID{WorkerID(binary.BigEndian.Uint32(b[28:])), binary.BigEndian.Uint64(b[32:])},
		Forked: b[5]&flagForked != 0,
	}
	if d.RRef.IsZero() || d.Fork.IsZero() {
		return fmt.Errorf("%w: %v names the zero RRef or fork", ErrMalformed, d)
	}
	*m = d
	return nil
}
