// Package disttest runs many ranks of a process group as goroutines in one
// test process (STYLE.md item 8), over the in-process transport (optionally
// faulty) or over loopback TCP.
package disttest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/store"
	"github.com/godist/godist/transport"
)

// Options choose the transport of a spawned job.
type Options struct {
	// TCP runs over loopback TCP with an in-memory store; otherwise the
	// in-process transport with Faults.
	TCP bool
	// SharedMemory lets the TCP ranks (all on this host) move large
	// payloads through shared memory, as dist.Init does by default.
	SharedMemory bool
	// ShmRing (with SharedMemory) sends the same-host frames through the
	// shared-memory frame ring (transport.TCPOptions.ShmRing).
	ShmRing bool
	// SmallCollectives (with SharedMemory) makes each group's control
	// block of small collectives (Group.InitSmallCollectives), as
	// dist.Init does by default.
	SmallCollectives bool
	// OnDemand (with TCP) makes the connections on first use
	// (transport.TCPOptions.OnDemand).
	OnDemand bool
	Faults   transport.Faults
	// Hosts, in-process only, places the ranks on hosts: Hosts[r] is rank
	// r's host label (transport.Mesh.SetHosts), so that the groups'
	// topologies span hosts while the frames still go through memory.
	Hosts []string
	// Timeout bounds the whole job (default 60s) and is the groups'
	// collective timeout.
	Timeout time.Duration
}

// Job is a spawned set of ranks.
type Job struct {
	Groups []*dist.Group
	// Kill makes a rank die as a crashed process would (in-process only).
	Kill func(rank int)
}

// Spawn runs fn on world ranks over the in-process transport and fails t
// with every rank's error. It returns when all ranks have returned.
func Spawn(t testing.TB, world int, fn func(g *dist.Group) error) {
	t.Helper()
	SpawnWith(t, world, Options{}, func(_ *Job, g *dist.Group) error { return fn(g) })
}

// SpawnWith is Spawn with options; fn also gets the Job (to kill a rank).
func SpawnWith(t testing.TB, world int, opt Options, fn func(j *Job, g *dist.Group) error) {
	t.Helper()
	if opt.Timeout == 0 {
		opt.Timeout = 60 * time.Second
	}
	j := &Job{Groups: make([]*dist.Group, world)}
	var cleanup func()
	if opt.TCP {
		st := store.NewMem()
		eps := make([]*transport.Endpoint, world)
		errs := make([]error, world)
		ctx, cancel := context.WithTimeout(context.Background(), opt.Timeout)
		var wg sync.WaitGroup
		for r := range world {
			wg.Add(1)
			go func() {
				defer wg.Done()
				eps[r], errs[r] = transport.NewTCP(ctx, transport.TCPOptions{Rank: r, Size: world, Store: st, JobID: "disttest", Token: []byte("t"), SharedMemory: opt.SharedMemory, ShmRing: opt.ShmRing, OnDemand: opt.OnDemand})
			}()
		}
		wg.Wait()
		cancel()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for r, ep := range eps {
			j.Groups[r] = dist.FromEndpoint(ep, st, "tcp", opt.Timeout)
		}
		j.Kill = func(r int) { eps[r].Close() }
		cleanup = func() { st.Close() }
	} else {
		m := transport.NewInProc(world, opt.Faults)
		if opt.Hosts != nil {
			m.SetHosts(opt.Hosts)
		}
		for r, ep := range m.Endpoints {
			j.Groups[r] = dist.FromEndpoint(ep, nil, "inproc", opt.Timeout)
		}
		j.Kill = m.Kill
		cleanup = func() {}
	}
	errs := make([]error, world)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("panic: %v", p)
				}
			}()
			if opt.SmallCollectives {
				ctx, cancel := context.WithTimeout(context.Background(), opt.Timeout)
				err := j.Groups[r].InitSmallCollectives(ctx)
				cancel()
				if err != nil {
					errs[r] = fmt.Errorf("rank %d: InitSmallCollectives: %w", r, err)
					j.Kill(r)
					return
				}
			}
			errs[r] = fn(j, j.Groups[r])
			if errs[r] != nil {
				// The others would wait for this rank until the timeout:
				// make it die so that they fail at once.
				j.Kill(r)
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(opt.Timeout + 5*time.Second):
		t.Fatalf("job of %d ranks did not finish within %v (seed %d)", world, opt.Timeout, opt.Faults.Seed)
	}
	for _, g := range j.Groups {
		g.Destroy()
	}
	cleanup()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d (seed %d): %v", r, opt.Faults.Seed, err)
		}
	}
}
