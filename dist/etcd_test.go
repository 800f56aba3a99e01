package dist_test

import (
	"context"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/store"
	_ "github.com/godist/godist/store/etcdstore" // registers etcd://
	"github.com/godist/godist/store/etcdstore/etcdtest"
)

// TestInitEtcd: three ranks meet through etcd://host:port/prefix (no rank
// serves a store) and run collectives.
func TestInitEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	initRanks(t, 3, "etcd://"+srv.Endpoint+"/godist/init-test/round0")
}

// TestInitEtcdFromEnv: GODIST_INIT_METHOD gives the init method (as godist
// run --rdzv-backend etcd sets it) with RANK and WORLD_SIZE and no
// MASTER_ADDR, and the ranks' records are in etcd under the prefix.
func TestInitEtcdFromEnv(t *testing.T) {
	srv := etcdtest.Start(t)
	clearLauncherEnv(t)
	t.Setenv("GODIST_TOKEN", "")
	method := "etcd://" + srv.Endpoint + "/godist/env-test/round3/"
	t.Setenv("GODIST_INIT_METHOD", method)
	t.Setenv("RANK", "0")
	t.Setenv("WORLD_SIZE", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	peer := make(chan error, 1)
	go func() { // rank 1 names everything itself
		g, err := dist.Init(ctx, dist.Options{InitMethod: method, Rank: 1, WorldSize: 2})
		if err == nil {
			err = g.Barrier(ctx)
			g.Destroy()
		}
		peer <- err
	}()
	g, err := dist.Init(ctx, dist.Options{}) // rank 0: all from the environment
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	if g.Rank() != 0 || g.Size() != 2 {
		t.Fatalf("rank %d of %d", g.Rank(), g.Size())
	}
	if err := g.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-peer; err != nil {
		t.Fatalf("rank 1: %v", err)
	}
	s, err := store.Open(ctx, method)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.NumKeys(ctx); err != nil || n == 0 {
		t.Fatalf("keys under %s: %d, %v; want rank 0's records there", method, n, err)
	}
}
