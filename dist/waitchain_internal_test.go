package dist

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/internal/launch/errorfile"
	"github.com/godist/godist/store"
)

// silentStore is the store of a host that was stopped (SIGSTOP): every
// call waits until its context ends.
type silentStore struct{ store.Store }

func (silentStore) Check(ctx context.Context, _ ...string) (bool, error) {
	<-ctx.Done()
	return false, &store.TimeoutError{Op: "check", Err: ctx.Err()}
}

func (silentStore) Get(ctx context.Context, _ string) ([]byte, error) {
	<-ctx.Done()
	return nil, &store.TimeoutError{Op: "get", Err: ctx.Err()}
}

// TestExplainTimeoutStoreHostSilent (issue 27, item 5): when the store
// that rank 0 serves does not answer, a timeout's chain ends at rank 0 and
// says that it stopped responding, whichever peer the call waited on; the
// error file blames rank 0. When this rank's status publisher has
// reached the store lately, it reads the store for a second first; when
// not, it does not wait.
func TestExplainTimeoutStoreHostSilent(t *testing.T) {
	for _, c := range []struct {
		name    string
		waiting int
		lastOK  time.Duration // since the publisher last reached the store; 0: no publisher
		chain   []int
		quick   bool
	}{
		{"waiting on a neighbour", 1, 0, []int{1, 0}, false},
		{"waiting on the host", 0, 0, []int{0}, false},
		{"the publisher lost the store", 1, 10 * time.Second, []int{1, 0}, true},
		{"the publisher reached it lately", 1, time.Second, []int{1, 0}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &world{rank: 2, size: 3, store: silentStore{}, storeHost: 0}
			if c.lastOK > 0 {
				w.statusEvery = 500 * time.Millisecond
				w.statusOK.Store(time.Now().Add(-c.lastOK).UnixNano())
			}
			te := &TimeoutError{Op: "all_reduce", Timeout: "7s", Waiting: []int{c.waiting}}
			start := time.Now()
			w.explainTimeout(te)
			took := time.Since(start)
			if !slices.Equal(te.Chain, c.chain) || !te.StoreSilent || !strings.Contains(te.Cause, "rank 0 serves, does not answer: rank 0 stopped responding") {
				t.Fatalf("chain %v, store silent %v, cause %q; want %v and the store's host", te.Chain, te.StoreSilent, te.Cause, c.chain)
			}
			if c.quick != (took < 500*time.Millisecond) {
				t.Errorf("took %v", took)
			}
			msg := te.Error()
			if strings.Contains(msg, "which waits on") || !strings.Contains(msg, "waiting on ranks ["+string(rune('0'+c.waiting))+"]") {
				t.Errorf("message %q", msg)
			}
			if r := errorRecord(te, 2); r.Kind != errorfile.Timeout || r.Peer != 0 {
				t.Errorf("error record %+v, want a timeout blaming rank 0", r)
			}
		})
	}
	// A store nobody in the job serves (etcd): no rank to name.
	w := &world{rank: 2, size: 3, store: silentStore{}, storeHost: -1}
	te := &TimeoutError{Op: "all_reduce", Timeout: "7s", Waiting: []int{1}}
	w.explainTimeout(te)
	if te.StoreSilent || te.Cause != "" || !slices.Equal(te.Chain, []int{1}) {
		t.Errorf("no store host: %+v", te)
	}
}
