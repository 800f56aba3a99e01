package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/godist/godist/store"
)

func TestOpenUnregistered(t *testing.T) {
	ctx := context.Background()
	if _, err := store.Open(ctx, "nope://x/y"); err == nil || !strings.Contains(err.Error(), "nope://") {
		t.Fatalf("Open of an unregistered scheme: %v", err)
	}
	// This test binary does not link store/etcdstore: the error says
	// which import registers etcd.
	if _, err := store.Open(ctx, "etcd://127.0.0.1:2379/job"); err == nil || !strings.Contains(err.Error(), "store/etcdstore") {
		t.Fatalf("Open of etcd:// without the etcd store: %v", err)
	}
	if _, err := store.Open(ctx, "no-scheme"); err == nil {
		t.Fatal("Open of a string that is not a URL succeeded")
	}
}

func TestRegisterScheme(t *testing.T) {
	opened := ""
	store.RegisterScheme("test-scheme", func(ctx context.Context, url string) (store.Store, error) {
		opened = url
		return store.NewMem(), nil
	})
	s, err := store.Open(context.Background(), "test-scheme://a/b")
	if err != nil || opened != "test-scheme://a/b" {
		t.Fatalf("Open = %v, opener saw %q", err, opened)
	}
	s.Close()
	defer func() {
		if recover() == nil {
			t.Fatal("a second RegisterScheme of one scheme did not panic")
		}
	}()
	store.RegisterScheme("test-scheme", func(context.Context, string) (store.Store, error) { return nil, nil })
}
