package main

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godist/godist/store"
	"github.com/godist/godist/store/etcdstore/etcdtest"
)

// testRunEtcdLauncherKilled is issue 19's etcd case: two launchers
// ("nodes" a and b, --nnodes 1:2) meet through an etcd server, and their
// workers keep their store in etcd too. Node a, which joined first and is
// node rank 0 (under the store backend it would host the store), is
// SIGKILLed mid-run. Node b's worker loses its peer and fails; b restarts
// its group (--max-restarts 1) after a rendezvous round in etcd that a
// dead launcher cannot disturb, as a world of one, and finishes.
func testRunEtcdLauncherKilled(t *testing.T, bb bins) {
	srv := etcdtest.Start(t)
	godist, worker := bb.godist, bb.worker
	const steps = 40
	// A last call of 3 s: b's launcher starts, connects to etcd and joins
	// round 0 within it on a loaded machine too (at 1 s a slow start left
	// a alone in round 0).
	args := []string{"run", "--nnodes", "1:2", "--rdzv-backend", "etcd", "--rdzv-endpoint", srv.Endpoint, "--rdzv-id", "etcd-kill",
		"--rdzv-conf", "last_call_timeout=3,keep_alive_timeout=3", "--max-restarts", "1", "--stop-timeout", "1s",
		worker, "--steps", strconv.Itoa(steps), "--step-sleep", "100ms", "--progress"}
	env := cleanEnv("GODIST_TOKEN=00112233445566778899aabbccddeeff")
	a := start(t, 60*time.Second, env, godist, args...)
	waitFor(t, a, "etcd rendezvous via etcd://"+srv.Endpoint+"/godist/etcd-kill/", 20*time.Second)
	b := start(t, 60*time.Second, env, godist, args...)
	// Both workers are in round 0 together, a few all-reduces in.
	waitFor(t, a, "[rank 0] STEP 3 WORLD_SIZE 2", 30*time.Second)
	waitFor(t, b, "[rank 1] STEP 3 WORLD_SIZE 2", 30*time.Second)
	if !strings.Contains(a.stderr.String(), "round 0: node rank 0 of 2 nodes") {
		t.Fatalf("node a is not node rank 0 of round 0: %v", a)
	}
	if s := a.stderr.String() + b.stderr.String(); strings.Contains(s, "serving the rendezvous store") {
		t.Fatalf("a launcher serves a store under the etcd backend:\n%s", s)
	}
	killed := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.wait()
	b.wait()
	t.Logf("node b finished %v after node a's SIGKILL", time.Since(killed).Round(time.Millisecond))
	if b.code != 0 {
		t.Fatalf("node b failed after node a's death:\n%v\nnode a:\n%v", b, a)
	}
	out, errs := b.stdout.String(), b.stderr.String()
	for _, want := range []string{
		"restarting the worker group (restart 1 of 1)",
		"round 1: node rank 0 of 1 nodes, ranks 0..0 of world size 1",
	} {
		if !strings.Contains(errs, want) {
			t.Fatalf("node b's launcher did not say %q:\n%v", want, b)
		}
	}
	// The new group ran from the start, as a world of one, with its store
	// in etcd (no rank serves one), and finished.
	if !strings.Contains(out, "[rank 0] STEP "+strconv.Itoa(steps-1)+" WORLD_SIZE 1") || !strings.Contains(out, "[rank 0] "+wantResult(1, steps)) {
		t.Fatalf("node b's restarted worker did not finish as a world of one (want %q):\n%v", wantResult(1, steps), b)
	}
	if strings.Contains(out, wantResult(2, steps)) {
		t.Fatalf("the two-node group finished although node a was killed:\n%v", b)
	}
	// Everything was in etcd: the rendezvous state, now at round 1, and
	// round 0's workers' records (round 1's single rank publishes none).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdzv, err := store.Open(ctx, "etcd://"+srv.Endpoint+"/godist/etcd-kill/rdzv")
	if err != nil {
		t.Fatal(err)
	}
	defer rdzv.Close()
	if v, err := rdzv.Get(ctx, "state"); err != nil || !strings.Contains(string(v), `"round":1,`) {
		t.Fatalf("rendezvous state in etcd: %.200q, %v", v, err)
	}
	round0, err := store.Open(ctx, "etcd://"+srv.Endpoint+"/godist/etcd-kill/round0")
	if err != nil {
		t.Fatal(err)
	}
	defer round0.Close()
	if n, err := round0.NumKeys(ctx); err != nil || n == 0 {
		t.Fatalf("round 0's workers kept %d keys in etcd (%v); want their store there", n, err)
	}
	// A later job with the same id on the same etcd starts afresh after
	// the old one's rounds (its nodes are done or gone).
	again := start(t, 30*time.Second, env, godist, "run", "--nnodes", "1", "--rdzv-backend", "etcd", "--rdzv-endpoint", srv.Endpoint,
		"--rdzv-id", "etcd-kill", "--rdzv-conf", "keep_alive_timeout=3", worker, "--steps", "3").wait()
	if again.code != 0 || !strings.Contains(again.stderr.String(), "round 2: node rank 0 of 1 nodes") || !strings.Contains(again.stdout.String(), "[rank 0] "+wantResult(1, 3)) {
		t.Fatalf("a second job with the same --rdzv-id:\n%v", again)
	}
}

// testRunEtcdTokenOffLoopback: as with the store backend, launchers that
// meet in an etcd cluster off loopback need GODIST_TOKEN (for the
// workers' connections; etcd's own auth is not used) or --insecure; they
// refuse before contacting etcd.
func testRunEtcdTokenOffLoopback(t *testing.T, bb bins) {
	p := start(t, 20*time.Second, cleanEnv(), bb.godist, "run", "--nnodes", "2", "--rdzv-backend", "etcd",
		"--rdzv-endpoint", "192.0.2.1:2379", "/usr/bin/env").wait()
	if p.code != exitUsage || !strings.Contains(p.stderr.String(), "GODIST_TOKEN") || !strings.Contains(p.stderr.String(), "--insecure") {
		t.Fatalf("etcd off loopback without a token: %v", p)
	}
}
