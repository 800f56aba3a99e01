package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// prefixStore namespaces another Store.
type prefixStore struct {
	prefix string // with the trailing "/"
	s      Store
	life   context.Context // canceled by Close
	kill   context.CancelFunc
	once   sync.Once
}

var _ Store = (*prefixStore)(nil)

// NewPrefix returns a Store that stores every key k as prefix + "/" + k in
// s, so that several users (process groups, rendezvous rounds) can share one
// store without their keys meeting.
//
// NumKeys delegates to s and so counts every key in s, not only those under
// the prefix (as PyTorch's PrefixStore does). Close makes this view unusable
// (blocked calls return ErrClosed) but does not close s: its owner does.
// Errors name the full, prefixed keys.
func NewPrefix(prefix string, s Store) Store {
	life, kill := context.WithCancel(context.Background())
	return &prefixStore{prefix: prefix + "/", s: s, life: life, kill: kill}
}

// ctx returns a context that also ends, with cause ErrClosed, when p closes.
func (p *prefixStore) ctx(ctx context.Context) (context.Context, func(), error) {
	if p.life.Err() != nil {
		return nil, nil, fmt.Errorf("store prefix %q: %w", p.prefix, ErrClosed)
	}
	c, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(p.life, func() { cancel(ErrClosed) })
	return c, func() { stop(); cancel(nil) }, nil
}

// fix turns the error of a call cut short by Close into ErrClosed.
func (p *prefixStore) fix(ctx, inner context.Context, err error) error {
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(inner), ErrClosed) {
		return fmt.Errorf("store prefix %q: %w", p.prefix, ErrClosed)
	}
	return err
}

func (p *prefixStore) keys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = p.prefix + k
	}
	return out
}

func (p *prefixStore) Set(ctx context.Context, key string, value []byte) error {
	c, done, err := p.ctx(ctx)
	if err != nil {
		return err
	}
	defer done()
	return p.fix(ctx, c, p.s.Set(c, p.prefix+key, value))
}

func (p *prefixStore) Get(ctx context.Context, key string) ([]byte, error) {
	c, done, err := p.ctx(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	v, err := p.s.Get(c, p.prefix+key)
	return v, p.fix(ctx, c, err)
}

func (p *prefixStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	c, done, err := p.ctx(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	n, err := p.s.Add(c, p.prefix+key, delta)
	return n, p.fix(ctx, c, err)
}

func (p *prefixStore) CompareAndSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	c, done, err := p.ctx(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	v, err := p.s.CompareAndSet(c, p.prefix+key, expected, desired)
	return v, p.fix(ctx, c, err)
}

func (p *prefixStore) Wait(ctx context.Context, keys ...string) error {
	c, done, err := p.ctx(ctx)
	if err != nil {
		return err
	}
	defer done()
	return p.fix(ctx, c, p.s.Wait(c, p.keys(keys)...))
}

func (p *prefixStore) Check(ctx context.Context, keys ...string) (bool, error) {
	c, done, err := p.ctx(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	ok, err := p.s.Check(c, p.keys(keys)...)
	return ok, p.fix(ctx, c, err)
}

func (p *prefixStore) Delete(ctx context.Context, key string) (bool, error) {
	c, done, err := p.ctx(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	ok, err := p.s.Delete(c, p.prefix+key)
	return ok, p.fix(ctx, c, err)
}

func (p *prefixStore) NumKeys(ctx context.Context) (int64, error) {
	c, done, err := p.ctx(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	n, err := p.s.NumKeys(c)
	return n, p.fix(ctx, c, err)
}

// Close ends this view; it does not close the underlying store.
func (p *prefixStore) Close() error {
	p.once.Do(p.kill)
	return nil
}
