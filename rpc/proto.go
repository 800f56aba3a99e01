package rpc

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/godist/godist/transport"
)

// The agent's messages are transport KindMessage frames with
// Key{Group: rpcGroup, Seq: call id, Tag: one of the tags below}; the
// header's fingerprint carries the argument type's (requests) or the
// result type's (replies) wire fingerprint.
const rpcGroup = 0xFFFF_FF01

const (
	tagHello    = 1 // an agent is ready: its name and limits
	tagRequest  = 2 // a call
	tagReply    = 3 // a call's result or error
	tagRRef     = 4 // a message of the RRef protocol
	tagShutdown = 5 // graceful shutdown's rounds
)

// Operations of a request.
const (
	opCall     = 1 // run a function, reply with its result
	opRemote   = 2 // run a function, keep its result as an owner RRef
	opMethod   = 3 // run a method on an owned value, reply
	opMRemote  = 4 // run a method on an owned value, keep the result as an RRef
	opToHere   = 5 // reply with an owned value
	opRRefPing = 6 // nothing: the owner confirms it knows the RRef
)

// protoVersion is this build's RPC protocol; agents of other versions
// refuse each other at Init. Version 2: graceful shutdown's probes and
// aborts (shutdownMsg's Kind), and arguments refused (errRefused) apart
// from arguments that do not decode. Version 3: a type met twice in
// another, not in a cycle, is described in full in its wire fingerprint
// (it was rec(T), and a type's fingerprint depended on what the worker
// had built before it). Version 4: the head carries a note (CallNote),
// distributed autograd's context id, and is 80 bytes.
const protoVersion = 4

// A request starts with a fixed head, padded to 8 bytes so that the body
// after it (and the tensors in it) stay aligned:
//
//	off size
//	  0    1 op
//	  1    1 reserved (zero)
//	  2    2 length of the function's name
//	  4    4 reserved (zero)
//	  8    8 fingerprint of the result type the caller expects
//	 16    8 the caller's timeout in nanoseconds (0: none)
//	 24   16 the new RRef's id (worker, counter) for opRemote, opMRemote
//	 40   16 the caller's fork of it
//	 56   16 the RRef whose value is used: opMethod, opMRemote, opToHere
//	 72    8 the caller's note (CallNote; 0: none)
//	 80    . the name, then zeros to a multiple of 8
const headSize = 80

// maxName bounds a function's name.
const maxName = 1 << 10

type head struct {
	op       byte
	name     string
	resultFP uint64
	timeout  time.Duration
	rref     id     // the new RRef (remote ops)
	fork     id     // the caller's fork of it
	target   id     // the RRef whose value is used
	note     uint64 // the caller's note (CallNote), 0 for none
}

// id is an RRef or fork id: the worker that made it and its counter.
type id struct {
	Worker int32
	Local  uint64
}

func (i id) String() string { return fmt.Sprintf("%d.%d", i.Worker, i.Local) }

func (h *head) encode() []byte {
	n := headSize + (len(h.name)+7)&^7
	b := make([]byte, n)
	b[0] = h.op
	binary.LittleEndian.PutUint16(b[2:], uint16(len(h.name)))
	binary.LittleEndian.PutUint64(b[8:], h.resultFP)
	binary.LittleEndian.PutUint64(b[16:], uint64(max(h.timeout, 0)))
	putID(b[24:], h.rref)
	putID(b[40:], h.fork)
	putID(b[56:], h.target)
	binary.LittleEndian.PutUint64(b[72:], h.note)
	copy(b[headSize:], h.name)
	return b
}

func putID(b []byte, i id) {
	binary.LittleEndian.PutUint32(b, uint32(i.Worker))
	binary.LittleEndian.PutUint64(b[8:], i.Local)
}

func getID(b []byte) id {
	return id{Worker: int32(binary.LittleEndian.Uint32(b)), Local: binary.LittleEndian.Uint64(b[8:])}
}

// decodeHead parses a request's head; rest is the body after it. It
// works on a truncated message too (an oversized one's prefix), as long
// as the head and name are there.
func decodeHead(msg []byte) (h head, rest []byte, err error) {
	if len(msg) < headSize {
		return h, nil, fmt.Errorf("%w: request of %d bytes", ErrMalformed, len(msg))
	}
	h.op = msg[0]
	if h.op < opCall || h.op > opRRefPing {
		return h, nil, fmt.Errorf("%w: unknown operation %d", ErrMalformed, h.op)
	}
	nl := int(binary.LittleEndian.Uint16(msg[2:]))
	if nl > maxName {
		return h, nil, fmt.Errorf("%w: function name of %d bytes", ErrMalformed, nl)
	}
	end := headSize + (nl+7)&^7
	if len(msg) < end {
		return h, nil, fmt.Errorf("%w: request of %d bytes, its head needs %d", ErrMalformed, len(msg), end)
	}
	h.name = string(msg[headSize : headSize+nl])
	h.resultFP = binary.LittleEndian.Uint64(msg[8:])
	t := binary.LittleEndian.Uint64(msg[16:])
	if t > uint64(24*time.Hour) {
		t = uint64(24 * time.Hour)
	}
	h.timeout = time.Duration(t)
	h.rref = getID(msg[24:])
	h.fork = getID(msg[40:])
	h.target = getID(msg[56:])
	h.note = binary.LittleEndian.Uint64(msg[72:])
	return h, msg[end:], nil
}

// A reply starts with 8 bytes: a status, then zeros; the body follows
// (the result, or a wireError).
const (
	replyOK    = 0
	replyError = 1
)

// wireError is an error as it crosses the wire.
type wireError struct {
	Kind     uint8 // one of the errKind constants
	Worker   string
	Function string
	Message  string
}

const (
	errRemote   = 1  // the function returned an error
	errPanic    = 2  // the function panicked
	errUnknown  = 3  // no such function
	errMismatch = 4  // type fingerprints differ
	errTooLarge = 5  // request over the limit
	errBadArgs  = 6  // arguments did not decode
	errNoRRef   = 7  // the RRef is not (or no longer) owned there
	errShutdown = 8  // the callee is shutting down
	errDeadline = 9  // the call's deadline passed while it ran
	errRefused  = 10 // the arguments decoded, but the callee refused them
)

// Error implements error for the agent's own wire errors so that they
// pass through done unchanged.
func (w *wireError) Error() string { return w.Message }

func (w *wireError) err() error {
	switch w.Kind {
	case errRemote:
		return &RemoteError{Worker: w.Worker, Function: w.Function, Message: w.Message}
	case errPanic:
		return &RemoteError{Worker: w.Worker, Function: w.Function, Message: w.Message, Panic: true}
	case errUnknown:
		return fmt.Errorf("%w: %s", ErrUnknownFunction, w.Message)
	case errMismatch:
		return fmt.Errorf("%w: %s", ErrTypeMismatch, w.Message)
	case errTooLarge:
		return fmt.Errorf("%w: %s", ErrTooLarge, w.Message)
	case errBadArgs:
		return fmt.Errorf("%w: %s", ErrMalformed, w.Message)
	case errRefused:
		return fmt.Errorf("%w: %s", ErrRefused, w.Message)
	case errNoRRef:
		return fmt.Errorf("%w: %s", ErrNoRRef, w.Message)
	case errShutdown:
		return fmt.Errorf("%w: %s", ErrShutdown, w.Message)
	case errDeadline:
		return fmt.Errorf("the call's deadline passed while %s ran on %s: %w", w.Function, w.Worker, context.DeadlineExceeded)
	}
	return fmt.Errorf("%w: error of kind %d: %s", ErrMalformed, w.Kind, w.Message)
}

// shutdownMsg is one message of graceful shutdown's agreement
// (tagShutdown; shutdown.go has the protocol): a report, a verdict, a
// probe and its answer, or an abort.
type shutdownMsg struct {
	Kind       uint8  // one of the shut constants
	Round      uint64 // report, verdict
	Idle       bool   // report: nothing pending or being served
	Sent, Recv int64  // report: the worker's message counts
	Done       bool   // verdict: the job is quiet
	// An abort names the worker that kept the agreement from completing
	// (Culprit, a rank), the worker that found it (Finder), how (Cause),
	// in words (Reason), and the error underneath (Detail).
	Culprit int64
	Finder  int64
	Cause   uint8
	Reason  string
	Detail  string
}

const (
	shutReport  = 1 // worker to leader: its state at the end of a round
	shutVerdict = 2 // leader to every worker: the round's outcome
	shutProbe   = 3 // a waiting worker to one it waits on: answer
	shutAck     = 4 // the answer to a probe
	shutAbort   = 5 // the agreement cannot complete (worker to leader, leader to every worker)
)

// An abort's causes: what the error underneath was.
const (
	causeOther    = 0
	causeDown     = 1 // the culprit died or left (*WorkerDownError)
	causeDeadline = 2 // no answer within Options.Timeout, or a ctx's deadline passed
	causeCanceled = 3 // a ctx was canceled
)

// hello is what an agent tells every peer when it is ready.
type hello struct {
	Version    int
	Name       string
	MaxMessage int64
}

func key(tag uint32, seq uint64) transport.Key {
	return transport.Key{Group: rpcGroup, Seq: seq, Tag: tag}
}
