package store

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// table is the in-memory key-value map shared by the Mem store and the TCP
// server, with waiters parked on missing keys. It never blocks and never
// polls: a waiter's fire function runs, without the lock held, in the
// goroutine whose Set made the last of its keys exist.
type table struct {
	// limit bounds the bytes of keys and values held (0: no limit); a
	// write that would pass it fails with ErrFull.
	limit int64
	mu    struct {
		sync.Mutex
		data    map[string][]byte               // owned by the table: never handed out without a copy
		waiters map[string]map[*waiter]struct{} // waiters parked on each missing key
		bytes   int64                           // of keys and values in data
	}
}

// ErrFull is wrapped by the error of a write that would take a server
// past its quota (ServerOptions.MaxBytes).
var ErrFull = errors.New("store: full")

// ErrWriteOnce is wrapped by the error of a write that would change or
// delete a write-once key (see WriteOnce).
var ErrWriteOnce = errors.New("store: write-once key")

// WriteOnce reports whether key is write-once: a key with a path segment
// "once" ("transport/once/rank/3"). Once it exists, every implementation
// refuses to change it (Set of another value, Add, a CompareAndSet that
// would replace it) or to delete it, so that a value published there (a
// rank's address and public key) cannot be replaced by another client of
// the store afterwards. Setting the same value again is allowed.
func WriteOnce(key string) bool {
	return strings.HasPrefix(key, "once/") || strings.Contains(key, "/once/")
}

// onceErr is the error of a refused write to the write-once key.
func onceErr(op, key string) error {
	return fmt.Errorf("%w: %s of %q, which exists and may not change", ErrWriteOnce, op, key)
}

// roomLocked says whether key may hold n bytes within the limit.
func (t *table) roomLocked(key string, n int) error {
	if t.limit <= 0 {
		return nil
	}
	old, ok := t.mu.data[key]
	delta := int64(n - len(old))
	if !ok {
		delta += int64(len(key))
	}
	if t.mu.bytes+delta > t.limit {
		return fmt.Errorf("%w: %d bytes for key %q would take it past its quota of %d bytes (%d held)", ErrFull, n, key, t.limit, t.mu.bytes)
	}
	return nil
}

// waiter waits for all of keys to exist. fire runs once, when they do.
type waiter struct {
	keys []string
	fire func()
	done bool // fired or canceled; guarded by table.mu
}

func newTable() *table {
	t := &table{}
	t.mu.data = make(map[string][]byte)
	t.mu.waiters = make(map[string]map[*waiter]struct{})
	return t
}

// get returns a copy of key's value.
func (t *table) get(key string) ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.mu.data[key]
	if !ok {
		return nil, false
	}
	return append(make([]byte, 0, len(v)), v...), true
}

// set stores v (which the table now owns) and fires the waiters it
// releases, or fails with ErrFull.
func (t *table) set(key string, v []byte) error {
	t.mu.Lock()
	if old, ok := t.mu.data[key]; ok && WriteOnce(key) {
		t.mu.Unlock()
		if bytes.Equal(old, v) {
			return nil
		}
		return onceErr("set", key)
	}
	if err := t.roomLocked(key, len(v)); err != nil {
		t.mu.Unlock()
		return err
	}
	fired := t.setLocked(key, v)
	t.mu.Unlock()
	fireAll(fired)
	return nil
}

func (t *table) setLocked(key string, v []byte) []*waiter {
	if v == nil {
		v = []byte{}
	}
	old, ok := t.mu.data[key]
	t.mu.bytes += int64(len(v) - len(old))
	if !ok {
		t.mu.bytes += int64(len(key))
	}
	t.mu.data[key] = v
	ws := t.mu.waiters[key]
	if len(ws) == 0 {
		return nil
	}
	delete(t.mu.waiters, key)
	var fired []*waiter
	for w := range ws {
		if t.parkLocked(w) {
			w.done = true
			fired = append(fired, w)
		}
	}
	return fired
}

func fireAll(ws []*waiter) {
	for _, w := range ws {
		w.fire()
	}
}

// parkLocked parks w on each of its keys that is missing, and reports
// whether none is (w should fire).
func (t *table) parkLocked(w *waiter) bool {
	ready := true
	for _, k := range w.keys {
		if _, ok := t.mu.data[k]; ok {
			continue
		}
		ready = false
		ws := t.mu.waiters[k]
		if ws == nil {
			ws = make(map[*waiter]struct{})
			t.mu.waiters[k] = ws
		}
		ws[w] = struct{}{}
	}
	return ready
}

// wait parks w until its keys exist. It reports true, without parking, if
// they already do; w.fire is then never called.
func (t *table) wait(w *waiter) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.parkLocked(w) {
		w.done = true
		return true
	}
	return false
}

// cancel unparks w and reports whether it was still parked (so fire will
// not run).
func (t *table) cancel(w *waiter) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w.done {
		return false
	}
	w.done = true
	for _, k := range w.keys {
		if ws := t.mu.waiters[k]; ws != nil {
			delete(ws, w)
			if len(ws) == 0 {
				delete(t.mu.waiters, k)
			}
		}
	}
	return true
}

func (t *table) add(key string, delta int64) (int64, error) {
	t.mu.Lock()
	if _, ok := t.mu.data[key]; ok && WriteOnce(key) {
		t.mu.Unlock()
		return 0, onceErr("add", key)
	}
	n, err := addTo(key, t.mu.data[key], delta)
	if err != nil {
		t.mu.Unlock()
		return 0, err
	}
	v := strconv.AppendInt(nil, n, 10)
	if err := t.roomLocked(key, len(v)); err != nil {
		t.mu.Unlock()
		return 0, err
	}
	fired := t.setLocked(key, v)
	t.mu.Unlock()
	fireAll(fired)
	return n, nil
}

// cas implements CompareAndSet; desired is owned by the table afterwards.
func (t *table) cas(key string, expected, desired []byte) ([]byte, error) {
	t.mu.Lock()
	cur, ok := t.mu.data[key]
	var fired []*waiter
	switch {
	case ok && WriteOnce(key):
		// Never replaced: the caller learns the value it lost to.
	case !ok && len(expected) == 0, ok && bytes.Equal(cur, expected):
		if err := t.roomLocked(key, len(desired)); err != nil {
			t.mu.Unlock()
			return nil, err
		}
		fired = t.setLocked(key, desired)
		cur = t.mu.data[key]
	case !ok:
		t.mu.Unlock()
		return nil, nil
	}
	out := append(make([]byte, 0, len(cur)), cur...)
	t.mu.Unlock()
	fireAll(fired)
	return out, nil
}

func (t *table) check(keys []string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		if _, ok := t.mu.data[k]; !ok {
			return false
		}
	}
	return true
}

func (t *table) del(key string) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.mu.data[key]
	if ok && WriteOnce(key) {
		return false, onceErr("delete", key)
	}
	if ok {
		t.mu.bytes -= int64(len(v) + len(key))
	}
	delete(t.mu.data, key)
	return ok, nil
}

func (t *table) numKeys() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return int64(len(t.mu.data))
}
