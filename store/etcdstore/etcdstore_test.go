package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godist/godist/store"
	"github.com/godist/godist/store/etcdstore"
	"github.com/godist/godist/store/etcdstore/etcdtest"
	"github.com/godist/godist/store/storetest"
)

// TestConformance runs the store suite against a real etcd server, each
// case under a prefix of its own (so each sees an empty store).
func TestConformance(t *testing.T) {
	srv := etcdtest.Start(t)
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T) store.Store {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := etcdstore.New(ctx, []string{srv.Endpoint}, fmt.Sprintf("conformance/%d/", n.Add(1)), etcdstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestOpenURL: the etcd scheme is registered by the import, and two
// stores opened from the same URL share keys while another prefix does
// not see them.
func TestOpenURL(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !store.Registered("etcd") {
		t.Fatal("importing etcdstore did not register the etcd scheme")
	}
	open := func(url string) store.Store {
		t.Helper()
		s, err := store.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a := open("etcd://" + srv.Endpoint + "/job1")
	b := open("etcd://" + srv.Endpoint + ",127.0.0.1:1/job1/")
	other := open("etcd://" + srv.Endpoint + "/job10")
	if err := a.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("the same prefix through another store: %q, %v", v, err)
	}
	if ok, err := other.Check(ctx, "k"); err != nil || ok {
		t.Fatalf("prefix job10 sees job1's key: %v, %v", ok, err)
	}
	if n, err := other.NumKeys(ctx); err != nil || n != 0 {
		t.Fatalf("prefix job10 counts %d keys, %v", n, err)
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url    string
		eps    []string
		prefix string
		bad    string
	}{
		{url: "etcd://10.0.0.1:2379/godist/job42", eps: []string{"10.0.0.1:2379"}, prefix: "godist/job42/"},
		{url: "etcd://a,b:1234/p/", eps: []string{"a:2379", "b:1234"}, prefix: "p/"},
		{url: "etcd://[::1]:2379,[::2]/x", eps: []string{"[::1]:2379", "[::2]:2379"}, prefix: "x/"},
		{url: "etcd://10.0.0.1:2379", bad: "no key prefix"},
		{url: "etcd://10.0.0.1:2379/", bad: "no key prefix"},
		{url: "etcd:///job", bad: "no etcd endpoint"},
		{url: "tcp://10.0.0.1:2379/job", bad: "want etcd://"},
		{url: "etcd://h/job?x=1", bad: "no query"},
	} {
		eps, prefix, err := etcdstore.ParseURL(tc.url)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("ParseURL(%q) = %v, %q, %v; want an error saying %q", tc.url, eps, prefix, err, tc.bad)
			}
			continue
		}
		if err != nil || fmt.Sprint(eps) != fmt.Sprint(tc.eps) || prefix != tc.prefix {
			t.Errorf("ParseURL(%q) = %v, %q, %v; want %v, %q", tc.url, eps, prefix, err, tc.eps, tc.prefix)
		}
	}
}

// TestUnreachable: New fails within its dial timeout with an error that
// names the endpoint, rather than hanging. It needs no etcd server.
func TestUnreachable(t *testing.T) {
	start := time.Now() // no server needed
	_, err := etcdstore.New(context.Background(), []string{"127.0.0.1:1"}, "x/", etcdstore.Options{DialTimeout: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("New against a closed port: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("New took %v to fail", d)
	}
}

// TestTooLarge: a value over the server's request limit fails with
// ErrTooLarge, and the store goes on.
func TestTooLarge(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := etcdstore.New(ctx, []string{srv.Endpoint}, "big/", etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Set(ctx, "k", make([]byte, 2<<20)); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("Set of 2 MiB (server limit 1.5 MiB): %v, want ErrTooLarge", err)
	}
	if err := s.Set(ctx, "k", []byte("small")); err != nil {
		t.Fatal(err)
	}
}

// TestOutlivesClients: the keys live in etcd, not in a client: what a
// closed client set is read by a fresh one, and a write-once key it
// published cannot be replaced by another.
func TestOutlivesClients(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := etcdstore.New(ctx, []string{srv.Endpoint}, "outlive/", etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Set(ctx, "once/rank/0", []byte("addr0")); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b, err := etcdstore.New(ctx, []string{srv.Endpoint}, "outlive/", etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if v, err := b.Get(ctx, "once/rank/0"); err != nil || string(v) != "addr0" {
		t.Fatalf("a key set by a closed client: %q, %v", v, err)
	}
	if err := b.Set(ctx, "once/rank/0", []byte("hijack")); !errors.Is(err, store.ErrWriteOnce) {
		t.Fatalf("another client replacing a write-once key: %v", err)
	}
}
