package transport

import (
	"errors"
	"fmt"
)

// PeerError reports that the connection to a rank failed or was closed:
// every pending and later transfer with that rank fails with it.
type PeerError struct {
	Rank int   // the peer
	Err  error // what happened (io.EOF: the peer's process ended)
}

func (e *PeerError) Error() string {
	if errors.Is(e.Err, ErrPeerClosed) {
		return fmt.Sprintf("transport: rank %d closed its connections (it called Destroy or exited cleanly)", e.Rank)
	}
	if errors.Is(e.Err, ErrSilent) {
		return fmt.Sprintf("transport: rank %d lost: %v", e.Rank, e.Err)
	}
	if errors.Is(e.Err, ErrFrame) {
		return fmt.Sprintf("transport: connection to rank %d dropped: it sent a malformed frame: %v (the stream was corrupted, or the ranks run different godist builds; the process may well be alive)", e.Rank, e.Err)
	}
	return fmt.Sprintf("transport: connection to rank %d lost: %v (the process probably died; check its log)", e.Rank, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// ErrPeerClosed is a PeerError's cause when the peer said goodbye first.
var ErrPeerClosed = errors.New("peer closed")

// ErrClosed is returned by an Endpoint that has been closed.
var ErrClosed = errors.New("transport: endpoint closed")

// FingerprintError reports a receive that found a frame from a different
// call than the one it expected: the ranks have issued collectives in
// different orders (a desync).
//
// The transport does not interpret fingerprints; dist decodes them into
// the two calls' descriptions.
type FingerprintError struct {
	Src  int
	Key  Key
	Got  uint64 // the sender's fingerprint
	Want uint64 // the receiver's
}

func (e *FingerprintError) Error() string {
	return fmt.Sprintf("transport: %v from rank %d has fingerprint %#x, the receive expects %#x", e.Key, e.Src, e.Got, e.Want)
}

// LengthError reports a frame whose payload length differs from the
// receive buffer's.
type LengthError struct {
	Src       int
	Key       Key
	Got, Want int64
}

func (e *LengthError) Error() string {
	return fmt.Sprintf("transport: %v from rank %d carries %d bytes, the receive expects %d", e.Key, e.Src, e.Got, e.Want)
}

// DuplicateRankError reports that another process published itself as
// this rank first: two processes were started with the same RANK, or a
// process of an earlier attempt of the job is still running.
type DuplicateRankError struct {
	Rank  int
	Addr  string // this process's address
	Other string // the address of the process that holds the rank
}

func (e *DuplicateRankError) Error() string {
	return fmt.Sprintf("transport: rank %d is taken: the process at %s registered as rank %d before this one (at %s); two processes were started with RANK=%d, or one of an earlier attempt of this job still runs, or the store holds an earlier job's records (use a fresh store or job id); give every process its own RANK",
		e.Rank, e.Other, e.Rank, e.Addr, e.Rank)
}
