package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Store is the small key-value service that ranks use to find each other.
//
// All methods are safe for concurrent use. Keys are at most [MaxKeyLen]
// bytes and values at most [MaxValueLen] bytes. A Store never keeps or
// modifies a slice it is given, and the caller owns every slice it
// returns. Every call honours ctx: when ctx ends before the call completes,
// the error is a *TimeoutError that wraps ctx.Err() (context.DeadlineExceeded
// or context.Canceled) and names the operation, the keys and the store.
// After Close, every call fails with an error wrapping ErrClosed.
type Store interface {
	// Set stores a copy of value under key, replacing any value there.
	Set(ctx context.Context, key string, value []byte) error

	// Get blocks until key exists or ctx ends, and returns a copy of its
	// value.
	Get(ctx context.Context, key string) ([]byte, error)

	// Add adds delta to the counter at key and returns the new value. The
	// counter is stored as decimal text (as in PyTorch's TCPStore), so Get
	// reads it as, for example, "42"; a missing key counts as 0. Add on a
	// value that is not a decimal integer fails with an error wrapping
	// ErrNotInteger.
	Add(ctx context.Context, key string, delta int64) (int64, error)

	// CompareAndSet stores desired at key if the current value equals
	// expected, or if key is missing and expected is empty. It returns the
	// value stored afterwards: desired when it swapped, the current value
	// when it did not, and nil when key is missing and expected is not
	// empty (PyTorch returns expected there; godist returns what is
	// stored, which is nothing). Callers learn whether they won by
	// comparing the result with desired.
	CompareAndSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error)

	// Wait blocks until every key exists or ctx ends. Wait with no keys
	// returns at once.
	Wait(ctx context.Context, keys ...string) error

	// Check reports, without blocking, whether every key exists.
	Check(ctx context.Context, keys ...string) (bool, error)

	// Delete removes key and reports whether it existed.
	Delete(ctx context.Context, key string) (bool, error)

	// NumKeys returns the number of keys in the store.
	NumKeys(ctx context.Context) (int64, error)

	// Close releases the store's resources. Calls blocked in Get or Wait
	// return an error wrapping ErrClosed, and so does every later call.
	// Close is idempotent.
	Close() error
}

// ErrClosed is returned (wrapped) by calls on a closed Store.
var ErrClosed = errors.New("store: closed")

// ErrNotInteger is returned (wrapped) by Add when the value at the key is
// not a decimal integer.
var ErrNotInteger = errors.New("store: value is not a decimal integer")

// ErrTooLarge is returned (wrapped) for a key longer than MaxKeyLen, a value
// longer than MaxValueLen, or more than MaxWaitKeys keys in one call.
var ErrTooLarge = errors.New("store: too large")

// TimeoutError is returned when a call's context ends before the call
// completes. It unwraps to Err, which is context.DeadlineExceeded or
// context.Canceled.
type TimeoutError struct {
	Op     string        // "get", "wait", "set", ...
	Keys   []string      // the keys the call was about, if any
	Store  string        // which store: "mem", "file /tmp/x", "tcp 10.0.0.1:29500"
	Waited time.Duration // how long the call ran
	Err    error         // ctx.Err()
}

func (e *TimeoutError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "store %s: %s", e.Store, e.Op)
	for _, k := range e.Keys {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(k))
	}
	what := "deadline exceeded"
	if errors.Is(e.Err, context.Canceled) {
		what = "canceled"
	}
	fmt.Fprintf(&b, ": %s after %v", what, e.Waited.Round(time.Millisecond))
	if (e.Op == "get" || e.Op == "wait") && errors.Is(e.Err, context.DeadlineExceeded) {
		b.WriteString("; is the process that sets it running?")
	}
	return b.String()
}

func (e *TimeoutError) Unwrap() error { return e.Err }

// Timeout reports whether the call ran out of time (rather than being
// canceled).
func (e *TimeoutError) Timeout() bool { return errors.Is(e.Err, context.DeadlineExceeded) }

// ConnError means the connection to a TCP store server failed or could not
// be made. Every call pending on the connection fails with it at once, and
// so does every later call on the client: build a new one with Dial.
type ConnError struct {
	Addr string // the server's address
	Op   string // "dial" or "call"
	Err  error  // the cause
}

func (e *ConnError) Error() string {
	if e.Op == "dial" {
		return fmt.Sprintf("store tcp %s: cannot connect: %v; is the store server (rank 0 or the launcher) running, and are MASTER_ADDR and MASTER_PORT right?", e.Addr, e.Err)
	}
	if errors.Is(e.Err, ErrUnresponsive) {
		return fmt.Sprintf("store tcp %s: connection dead: %v; is the store's host (rank 0 or the launcher) stopped, hung or cut off from this one?", e.Addr, e.Err)
	}
	return fmt.Sprintf("store tcp %s: connection lost: %v; did the store server (rank 0 or the launcher) exit?", e.Addr, e.Err)
}

func (e *ConnError) Unwrap() error { return e.Err }

// timeoutErr builds the error for a call whose ctx ended.
func timeoutErr(ctx context.Context, name, op string, start time.Time, keys ...string) error {
	return &TimeoutError{Op: op, Keys: keys, Store: name, Waited: time.Since(start), Err: ctx.Err()}
}

func checkKey(key string) error {
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes exceeds the %d-byte limit", ErrTooLarge, len(key), MaxKeyLen)
	}
	return nil
}

func checkValue(v []byte) error {
	if len(v) > MaxValueLen {
		return fmt.Errorf("%w: value of %d bytes exceeds the %d-byte limit", ErrTooLarge, len(v), MaxValueLen)
	}
	return nil
}

func checkKeys(keys []string) error {
	if len(keys) > MaxWaitKeys {
		return fmt.Errorf("%w: %d keys in one call exceed the limit of %d", ErrTooLarge, len(keys), MaxWaitKeys)
	}
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	return nil
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// addTo parses cur (nil: missing, counts as 0) as a decimal integer and
// returns cur+delta.
func addTo(key string, cur []byte, delta int64) (int64, error) {
	var n int64
	if cur != nil {
		var err error
		n, err = strconv.ParseInt(string(cur), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: add %q: current value %.40q", ErrNotInteger, key, cur)
		}
	}
	return n + delta, nil
}
