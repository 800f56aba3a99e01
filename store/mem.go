package store

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// memStore is a Store held in the memory of one process: for tests, and for
// ranks that run as goroutines of one program. Blocked Get and Wait calls
// park on the key and wake when it is set; nothing polls.
type memStore struct {
	t         *table
	closed    chan struct{}
	closeOnce sync.Once
}

var _ Store = (*memStore)(nil)

// NewMem returns an empty in-memory Store.
func NewMem() Store { return newMem() }

func newMem() *memStore { return &memStore{t: newTable(), closed: make(chan struct{})} }

const memName = "mem"

// begin checks the store and ctx before a call.
func (m *memStore) begin(ctx context.Context, op string, start time.Time, keys ...string) error {
	select {
	case <-m.closed:
		return fmt.Errorf("store %s: %s: %w", memName, op, ErrClosed)
	default:
	}
	if ctx.Err() != nil {
		return timeoutErr(ctx, memName, op, start, keys...)
	}
	return checkKeys(keys)
}

// Set implements Store.
func (m *memStore) Set(ctx context.Context, key string, value []byte) error {
	if err := m.begin(ctx, "set", time.Now(), key); err != nil {
		return err
	}
	if err := checkValue(value); err != nil {
		return err
	}
	return m.t.set(key, clone(value)) // no limit: fails only on a write-once key
}

// Get implements Store.
func (m *memStore) Get(ctx context.Context, key string) ([]byte, error) {
	start := time.Now()
	if err := m.begin(ctx, "get", start, key); err != nil {
		return nil, err
	}
	for {
		if v, ok := m.t.get(key); ok {
			return v, nil
		}
		if err := m.block(ctx, "get", start, []string{key}); err != nil {
			return nil, err
		}
		// The key existed when the waiter fired but may have been deleted
		// since: look again.
	}
}

// Wait implements Store.
func (m *memStore) Wait(ctx context.Context, keys ...string) error {
	start := time.Now()
	if err := m.begin(ctx, "wait", start, keys...); err != nil {
		return err
	}
	return m.block(ctx, "wait", start, keys)
}

// block returns when all keys exist, ctx ends or the store closes.
func (m *memStore) block(ctx context.Context, op string, start time.Time, keys []string) error {
	ch := make(chan struct{})
	w := &waiter{keys: keys, fire: func() { close(ch) }}
	if m.t.wait(w) {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		if !m.t.cancel(w) {
			return nil // fired just now
		}
		return timeoutErr(ctx, memName, op, start, keys...)
	case <-m.closed:
		m.t.cancel(w)
		return fmt.Errorf("store %s: %s: %w", memName, op, ErrClosed)
	}
}

// Add implements Store.
func (m *memStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := m.begin(ctx, "add", time.Now(), key); err != nil {
		return 0, err
	}
	return m.t.add(key, delta)
}

// CompareAndSet implements Store.
func (m *memStore) CompareAndSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	if err := m.begin(ctx, "compare-and-set", time.Now(), key); err != nil {
		return nil, err
	}
	if err := checkValue(expected); err != nil {
		return nil, err
	}
	if err := checkValue(desired); err != nil {
		return nil, err
	}
	return m.t.cas(key, expected, clone(desired))
}

// Check implements Store.
func (m *memStore) Check(ctx context.Context, keys ...string) (bool, error) {
	if err := m.begin(ctx, "check", time.Now(), keys...); err != nil {
		return false, err
	}
	return m.t.check(keys), nil
}

// Delete implements Store.
func (m *memStore) Delete(ctx context.Context, key string) (bool, error) {
	if err := m.begin(ctx, "delete", time.Now(), key); err != nil {
		return false, err
	}
	return m.t.del(key)
}

// NumKeys implements Store.
func (m *memStore) NumKeys(ctx context.Context) (int64, error) {
	if err := m.begin(ctx, "num-keys", time.Now()); err != nil {
		return 0, err
	}
	return m.t.numKeys(), nil
}

// Close implements Store.
func (m *memStore) Close() error {
	m.closeOnce.Do(func() { close(m.closed) })
	return nil
}
