package rpc

import (
	"errors"
	"fmt"

	"github.com/godist/godist/rpc/internal/wire"
	"github.com/godist/godist/rpc/rref"
)

// The causes a *CallError wraps; test for them with errors.Is.
var (
	// ErrUnknownWorker: no worker of the job has the name called.
	ErrUnknownWorker = errors.New("no worker of that name")
	// ErrUnknownFunction: the callee has no function of that name
	// registered. Nothing ran.
	ErrUnknownFunction = errors.New("no function of that name is registered there")
	// ErrTypeMismatch: caller and callee disagree on the function's
	// argument or result type. Nothing ran.
	ErrTypeMismatch = errors.New("argument or result type differs between caller and callee")
	// ErrTooLarge: the request or reply is longer than the receiver
	// accepts (Options.MaxMessage). Nothing ran, for a request.
	ErrTooLarge = errors.New("message larger than the receiver accepts")
	// ErrShutdown: the agent was shut down.
	ErrShutdown = errors.New("rpc agent shut down")
	// ErrMalformed: a message did not decode (its bytes are not a value
	// of the type both sides agreed on).
	ErrMalformed = errors.New("malformed message")
	// ErrRefused: a message decoded, but its receiver would not take what
	// it says: a policy of the receiver's, such as distautograd's refusal
	// of a Var that needs gradients arriving outside the context its
	// gradient would have to flow back through. The error it wraps says
	// why and what to do. An error of a value's DecodeWire is a refusal
	// unless it wraps ErrMalformed (or the wire codec's) or
	// ErrTypeMismatch; one may wrap ErrRefused to say so. For a request,
	// nothing ran.
	ErrRefused = errors.New("message refused")
)

// CallError is the error of one call: the worker and function it named,
// and what went wrong (a *RemoteError, a *WorkerDownError, a context's
// error, or one of the sentinel errors above, with details).
type CallError struct {
	Worker   string
	Function string
	Err      error
}

func (e *CallError) Error() string {
	return fmt.Sprintf("rpc: %s on %s: %v", e.Function, e.Worker, e.Err)
}

func (e *CallError) Unwrap() error { return e.Err }

// RemoteError is an error the called function returned (or a panic it
// raised) on the worker that ran it. Its type does not cross the wire;
// its message does.
type RemoteError struct {
	Worker   string
	Function string
	Message  string
	Panic    bool // the function panicked; Message holds the value and stack
}

func (e *RemoteError) Error() string {
	if e.Panic {
		return fmt.Sprintf("%s panicked on %s: %s", e.Function, e.Worker, e.Message)
	}
	return fmt.Sprintf("%s failed on %s: %s", e.Function, e.Worker, e.Message)
}

// WorkerDownError says that the worker a call was waiting on died or
// left before it answered.
type WorkerDownError struct {
	Worker string
	Rank   int
	Err    error
}

func (e *WorkerDownError) Error() string {
	return fmt.Sprintf("worker %s (rank %d) is gone: %v; every call pending on it failed (restart the job, or let the launcher do it with --max-restarts)", e.Worker, e.Rank, e.Err)
}

func (e *WorkerDownError) Unwrap() error { return e.Err }

// ShutdownError is the error of a graceful Shutdown that could not
// complete: the worker whose Shutdown failed, the worker that kept the
// job from agreeing it was quiet, and why. Err is a *WorkerDownError
// when that worker died or left; context.DeadlineExceeded when it
// answered nothing for Options.Timeout (a stopped or hung process, a
// partition) or the wait for it outlived a ctx's deadline; or
// context.Canceled. The agent stops all the same, and every other
// worker's graceful Shutdown fails too, naming the same worker.
type ShutdownError struct {
	Self   string // the worker whose Shutdown failed
	Worker string // the worker it could not agree with (Self when its own calls kept it busy)
	Rank   int    // Worker's rank
	Reason string // what Worker did or did not do, and what to do about it
	Err    error

	finder     string // the worker that found the failure, when another did
	finderRank int
}

func (e *ShutdownError) Error() string {
	found := ""
	if e.finder != "" {
		found = e.finder + " found that "
	}
	return fmt.Sprintf("rpc: graceful shutdown of %s failed: %s%s (rank %d) %s: %v", e.Self, found, e.Worker, e.Rank, e.Reason, e.Err)
}

func (e *ShutdownError) Unwrap() error { return e.Err }

// isRefusal reports whether err, the error of decoding a value, is its
// receiver's refusal rather than bytes that did not decode (see
// ErrRefused).
func isRefusal(err error) bool {
	if errors.Is(err, ErrRefused) {
		return true
	}
	return !errors.Is(err, ErrMalformed) && !errors.Is(err, wire.ErrMalformed) && !errors.Is(err, rref.ErrMalformed) && !errors.Is(err, ErrTypeMismatch)
}
