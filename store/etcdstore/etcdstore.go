package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/godist/godist/store"
)

// Options configure New.
type Options struct {
	// DialTimeout bounds New's first contact with the cluster, in
	// addition to its ctx (default 10 s).
	DialTimeout time.Duration
}

// DefaultPort is etcd's client port, used for an endpoint without one.
const DefaultPort = "2379"

// txnOps is the most operations New puts in one transaction: etcd's
// --max-txn-ops is 128 by default.
const txnOps = 64

type etcdStore struct {
	cli    *clientv3.Client
	prefix string
	name   string // "etcd 10.0.0.1:2379/godist/job42/", for errors

	life      context.Context // canceled, with cause store.ErrClosed, by Close
	kill      context.CancelCauseFunc
	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*etcdStore)(nil)

func init() {
	store.RegisterScheme("etcd", func(ctx context.Context, url string) (store.Store, error) {
		eps, prefix, err := ParseURL(url)
		if err != nil {
			return nil, err
		}
		return New(ctx, eps, prefix, Options{})
	})
}

// ParseURL splits an init method etcd://host:port[,host:port...]/prefix
// into its endpoints (a host without a port gets DefaultPort) and its
// key prefix, which ends with "/". The prefix is required: it keeps one
// job's keys (write-once ones among them) apart from another's.
func ParseURL(url string) (endpoints []string, prefix string, err error) {
	rest, ok := strings.CutPrefix(url, "etcd://")
	if !ok {
		return nil, "", fmt.Errorf("etcdstore: %q: want etcd://host:port[,host:port...]/prefix", url)
	}
	hosts, path, _ := strings.Cut(rest, "/")
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		return nil, "", fmt.Errorf("etcdstore: %q: no query or fragment is understood", url)
	}
	path = strings.Trim(path, "/")
	if path == "" {
		return nil, "", fmt.Errorf("etcdstore: %q has no key prefix: want etcd://host:port/prefix, with a prefix of its own for each job (etcd://10.0.0.1:2379/godist/job42)", url)
	}
	for h := range strings.SplitSeq(hosts, ",") {
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), DefaultPort)
		}
		endpoints = append(endpoints, h)
	}
	if len(endpoints) == 0 {
		return nil, "", fmt.Errorf("etcdstore: %q names no etcd endpoint", url)
	}
	return endpoints, path + "/", nil
}

// New connects to the etcd cluster at endpoints ("host:port") and returns
// a Store that keeps every key k at prefix+k there. It checks that a
// member answers (within ctx and Options.DialTimeout) before it returns.
// Close closes the connection; the keys stay in etcd.
func New(ctx context.Context, endpoints []string, prefix string, opt Options) (store.Store, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("etcdstore: no endpoints")
	}
	dial := opt.DialTimeout
	if dial <= 0 {
		dial = 10 * time.Second
	}
	name := "etcd " + strings.Join(endpoints, ",") + "/" + prefix
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: dial,
		// Leave room for a value of store.MaxValueLen; the server's own
		// --max-request-bytes is usually the tighter limit.
		MaxCallSendMsgSize: store.MaxValueLen + store.MaxKeyLen + 4096,
		MaxCallRecvMsgSize: 2*store.MaxValueLen + 4096,
		Logger:             zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcdstore: %s: %w", name, err)
	}
	cctx, cancel := context.WithTimeout(ctx, dial)
	defer cancel()
	if _, err := cli.Get(cctx, prefix, clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcdstore: cannot reach etcd at %s within %v: %w (is etcd running there, and is its client URL right?)", strings.Join(endpoints, ","), dial, err)
	}
	life, kill := context.WithCancelCause(context.Background())
	return &etcdStore{cli: cli, prefix: prefix, name: name, life: life, kill: kill}, nil
}

// begin returns a context for one call that also ends when the store
// closes, after checking the store, ctx and the keys.
func (s *etcdStore) begin(ctx context.Context, op string, start time.Time, keys ...string) (context.Context, func(), error) {
	if s.life.Err() != nil {
		return nil, nil, s.closedErr(op)
	}
	if ctx.Err() != nil {
		return nil, nil, &store.TimeoutError{Op: op, Keys: keys, Store: s.name, Waited: time.Since(start), Err: ctx.Err()}
	}
	if err := checkKeys(keys); err != nil {
		return nil, nil, err
	}
	c, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.life, func() { cancel(store.ErrClosed) })
	return c, func() { stop(); cancel(nil) }, nil
}

func (s *etcdStore) closedErr(op string) error {
	return fmt.Errorf("store %s: %s: %w", s.name, op, store.ErrClosed)
}

// fail turns the error of a call into the Store contract's: ErrClosed
// after Close, a *TimeoutError when ctx ended, ErrTooLarge for a request
// the server or the client refused for its size.
func (s *etcdStore) fail(ctx context.Context, op string, start time.Time, keys []string, err error) error {
	switch {
	case err == nil:
		return nil
	case s.life.Err() != nil:
		return s.closedErr(op)
	case ctx.Err() != nil:
		return &store.TimeoutError{Op: op, Keys: keys, Store: s.name, Waited: time.Since(start), Err: ctx.Err()}
	case errors.Is(err, rpctypes.ErrRequestTooLarge) || status.Code(err) == codes.ResourceExhausted:
		return fmt.Errorf("store %s: %s %q: %w: %v (the etcd server's --max-request-bytes bounds a value)", s.name, op, keys, store.ErrTooLarge, err)
	}
	return fmt.Errorf("store %s: %s %q: %w", s.name, op, keys, err)
}

// Set implements store.Store.
func (s *etcdStore) Set(ctx context.Context, key string, value []byte) error {
	start := time.Now()
	c, done, err := s.begin(ctx, "set", start, key)
	if err != nil {
		return err
	}
	defer done()
	if err := checkValue(value); err != nil {
		return err
	}
	k := s.prefix + key
	if !store.WriteOnce(key) {
		_, err := s.cli.Put(c, k, string(value))
		return s.fail(ctx, "set", start, []string{key}, err)
	}
	resp, err := s.cli.Txn(c).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(value))).
		Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return s.fail(ctx, "set", start, []string{key}, err)
	}
	if !resp.Succeeded {
		if cur := resp.Responses[0].GetResponseRange().Kvs; len(cur) > 0 && !bytes.Equal(cur[0].Value, value) {
			return onceErr("set", key)
		}
	}
	return nil
}

// Get implements store.Store.
func (s *etcdStore) Get(ctx context.Context, key string) ([]byte, error) {
	start := time.Now()
	c, done, err := s.begin(ctx, "get", start, key)
	if err != nil {
		return nil, err
	}
	defer done()
	keys := []string{key}
	for {
		resp, err := s.cli.Get(c, s.prefix+key)
		if err != nil {
			return nil, s.fail(ctx, "get", start, keys, err)
		}
		if len(resp.Kvs) > 0 {
			return clone(resp.Kvs[0].Value), nil
		}
		v, err := s.watchPuts(c, keys, resp.Header.Revision+1)
		if errors.Is(err, errCompacted) {
			continue // read again
		}
		if err != nil {
			return nil, s.fail(ctx, "get", start, keys, err)
		}
		return v, nil
	}
}

// Wait implements store.Store.
func (s *etcdStore) Wait(ctx context.Context, keys ...string) error {
	start := time.Now()
	c, done, err := s.begin(ctx, "wait", start, keys...)
	if err != nil {
		return err
	}
	defer done()
	for {
		missing, rev, err := s.missing(c, keys)
		if err != nil {
			return s.fail(ctx, "wait", start, keys, err)
		}
		if len(missing) == 0 {
			return nil
		}
		// Once every missing key has been written since rev, read again:
		// one may have been deleted meanwhile.
		if _, err := s.watchPuts(c, missing, rev+1); err != nil && !errors.Is(err, errCompacted) {
			return s.fail(ctx, "wait", start, keys, err)
		}
	}
}

// errCompacted: a watch's start revision was compacted away; the caller
// reads again and watches from a newer one.
var errCompacted = errors.New("etcdstore: watch revision compacted")

// watchPuts blocks until every one of keys (unprefixed) has been put at or
// after revision rev, and returns the value last put for keys[0]. One key
// is watched alone; several are watched through one watch on the store's
// prefix.
func (s *etcdStore) watchPuts(ctx context.Context, keys []string, rev int64) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[s.prefix+k] = true
	}
	var ch clientv3.WatchChan
	if len(keys) == 1 {
		ch = s.cli.Watch(ctx, s.prefix+keys[0], clientv3.WithRev(rev))
	} else {
		ch = s.cli.Watch(ctx, s.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithFilterDelete())
	}
	var first []byte
	for wr := range ch {
		if wr.CompactRevision != 0 {
			return nil, errCompacted
		}
		if err := wr.Err(); err != nil {
			return nil, err
		}
		for _, ev := range wr.Events {
			if ev.Type != mvccpb.PUT {
				continue
			}
			k := string(ev.Kv.Key)
			if k == s.prefix+keys[0] {
				first = ev.Kv.Value
			}
			delete(want, k)
		}
		if len(want) == 0 {
			return clone(first), nil
		}
	}
	// The channel closes when ctx ends or the client closes.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, store.ErrClosed
}

// missing returns which of keys do not exist, read at one revision, and
// that revision.
func (s *etcdStore) missing(ctx context.Context, keys []string) ([]string, int64, error) {
	var out []string
	rev := int64(0)
	for i := 0; i < len(keys); i += txnOps {
		chunk := keys[i:min(i+txnOps, len(keys))]
		ops := make([]clientv3.Op, len(chunk))
		for j, k := range chunk {
			opts := []clientv3.OpOption{clientv3.WithCountOnly()}
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev)) // the first chunk's revision
			}
			ops[j] = clientv3.OpGet(s.prefix+k, opts...)
		}
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for j, r := range resp.Responses {
			if r.GetResponseRange().Count == 0 {
				out = append(out, chunk[j])
			}
		}
	}
	if rev == 0 { // no keys: any revision will do
		resp, err := s.cli.Get(ctx, s.prefix, clientv3.WithCountOnly())
		if err != nil {
			return nil, 0, err
		}
		rev = resp.Header.Revision
	}
	return out, rev, nil
}

// read returns key's value, whether it exists, and its modification
// revision (0 when missing).
func (s *etcdStore) read(ctx context.Context, key string) ([]byte, bool, int64, error) {
	resp, err := s.cli.Get(ctx, s.prefix+key)
	if err != nil {
		return nil, false, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, false, 0, nil
	}
	return resp.Kvs[0].Value, true, resp.Kvs[0].ModRevision, nil
}

// putIf writes value at key if key's modification revision is still mod
// (0: still missing), and reports whether it did.
func (s *etcdStore) putIf(ctx context.Context, key string, mod int64, value []byte) (bool, error) {
	k := s.prefix + key
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(k), "=", mod)).
		Then(clientv3.OpPut(k, string(value))).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// Add implements store.Store.
func (s *etcdStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	start := time.Now()
	c, done, err := s.begin(ctx, "add", start, key)
	if err != nil {
		return 0, err
	}
	defer done()
	keys := []string{key}
	for {
		cur, ok, mod, err := s.read(c, key)
		if err != nil {
			return 0, s.fail(ctx, "add", start, keys, err)
		}
		if ok && store.WriteOnce(key) {
			return 0, onceErr("add", key)
		}
		var n int64
		if ok {
			if n, err = strconv.ParseInt(string(cur), 10, 64); err != nil {
				return 0, fmt.Errorf("%w: add %q: current value %.40q", store.ErrNotInteger, key, cur)
			}
		}
		n += delta
		won, err := s.putIf(c, key, mod, strconv.AppendInt(nil, n, 10))
		if err != nil {
			return 0, s.fail(ctx, "add", start, keys, err)
		}
		if won {
			return n, nil
		}
	}
}

// CompareAndSet implements store.Store.
func (s *etcdStore) CompareAndSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	start := time.Now()
	c, done, err := s.begin(ctx, "compare-and-set", start, key)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := checkValue(expected); err != nil {
		return nil, err
	}
	if err := checkValue(desired); err != nil {
		return nil, err
	}
	keys := []string{key}
	for {
		cur, ok, mod, err := s.read(c, key)
		if err != nil {
			return nil, s.fail(ctx, "compare-and-set", start, keys, err)
		}
		switch {
		case ok && store.WriteOnce(key):
			return nonNil(cur), nil // never replaced
		case !ok && len(expected) == 0, ok && bytes.Equal(cur, expected):
			won, err := s.putIf(c, key, mod, desired)
			if err != nil {
				return nil, s.fail(ctx, "compare-and-set", start, keys, err)
			}
			if won {
				return nonNil(clone(desired)), nil
			}
			// Another client wrote in between: compare again.
		case !ok:
			return nil, nil
		default:
			return nonNil(cur), nil
		}
	}
}

// Check implements store.Store.
func (s *etcdStore) Check(ctx context.Context, keys ...string) (bool, error) {
	start := time.Now()
	c, done, err := s.begin(ctx, "check", start, keys...)
	if err != nil {
		return false, err
	}
	defer done()
	if len(keys) == 0 {
		return true, nil
	}
	missing, _, err := s.missing(c, keys)
	if err != nil {
		return false, s.fail(ctx, "check", start, keys, err)
	}
	return len(missing) == 0, nil
}

// Delete implements store.Store.
func (s *etcdStore) Delete(ctx context.Context, key string) (bool, error) {
	start := time.Now()
	c, done, err := s.begin(ctx, "delete", start, key)
	if err != nil {
		return false, err
	}
	defer done()
	k := s.prefix + key
	if !store.WriteOnce(key) {
		resp, err := s.cli.Delete(c, k)
		if err != nil {
			return false, s.fail(ctx, "delete", start, []string{key}, err)
		}
		return resp.Deleted > 0, nil
	}
	// A write-once key that exists stays; one that does not has nothing
	// to delete. The comparison makes the answer hold at one revision.
	resp, err := s.cli.Txn(c).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Commit()
	if err != nil {
		return false, s.fail(ctx, "delete", start, []string{key}, err)
	}
	if !resp.Succeeded {
		return false, onceErr("delete", key)
	}
	return false, nil
}

// NumKeys implements store.Store: the keys under the store's prefix.
func (s *etcdStore) NumKeys(ctx context.Context) (int64, error) {
	start := time.Now()
	c, done, err := s.begin(ctx, "num-keys", start)
	if err != nil {
		return 0, err
	}
	defer done()
	resp, err := s.cli.Get(c, s.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, s.fail(ctx, "num-keys", start, nil, err)
	}
	return resp.Count, nil
}

// Close implements store.Store: it ends blocked calls with ErrClosed and
// closes the connection to etcd. The keys stay in etcd.
func (s *etcdStore) Close() error {
	s.closeOnce.Do(func() {
		s.kill(store.ErrClosed)
		if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			s.closeErr = err
		}
	})
	return s.closeErr
}

func onceErr(op, key string) error {
	return fmt.Errorf("%w: %s of %q, which exists and may not change", store.ErrWriteOnce, op, key)
}

func checkKeys(keys []string) error {
	if len(keys) > store.MaxWaitKeys {
		return fmt.Errorf("%w: %d keys in one call exceed the limit of %d", store.ErrTooLarge, len(keys), store.MaxWaitKeys)
	}
	for _, k := range keys {
		if len(k) > store.MaxKeyLen {
			return fmt.Errorf("%w: key of %d bytes exceeds the %d-byte limit", store.ErrTooLarge, len(k), store.MaxKeyLen)
		}
	}
	return nil
}

func checkValue(v []byte) error {
	if len(v) > store.MaxValueLen {
		return fmt.Errorf("%w: value of %d bytes exceeds the %d-byte limit", store.ErrTooLarge, len(v), store.MaxValueLen)
	}
	return nil
}

func clone(b []byte) []byte { return append(make([]byte, 0, len(b)), b...) }

// nonNil returns b, or an empty slice for nil: CompareAndSet answers
// "exists, empty" with a non-nil slice and "missing" with nil.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
