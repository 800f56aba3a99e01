package store_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/godist/godist/store"
	"github.com/godist/godist/store/storetest"
)

func TestMem(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s := store.NewMem()
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestFile(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := store.NewFile(filepath.Join(t.TempDir(), "store"), store.FileOptions{JobID: "job"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestPrefix(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		base := store.NewMem()
		t.Cleanup(func() { base.Close() })
		return store.NewPrefix("pg0", base)
	})
}

func TestTCP(t *testing.T) {
	for _, tc := range []struct {
		name  string
		token []byte
	}{{"NoToken", nil}, {"Token", []byte("s3cret")}} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store {
				_, c := newTCP(t, store.ServerOptions{JobID: "job", Token: tc.token},
					store.DialOptions{JobID: "job", Token: tc.token})
				return c
			})
		})
	}
}

// newTCP starts a server on a free local port and dials it; both are
// closed when the test ends.
func newTCP(t *testing.T, so store.ServerOptions, do store.DialOptions) (*store.Server, store.Store) {
	t.Helper()
	so.Logf = t.Logf
	srv, err := store.NewServer(context.Background(), "127.0.0.1:0", so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := store.Dial(ctx, srv.Addr(), do)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return srv, c
}
