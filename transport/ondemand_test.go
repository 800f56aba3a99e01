package transport_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/transport"
)

func connectedCount(e *transport.Endpoint) int {
	n := 0
	for p := range e.Size() {
		if e.Connected(p) {
			n++
		}
	}
	return n
}

// TestOnDemandHostConnectsAtInit: the ranks of a host with shared memory
// and at most 8 ranks connect to each other at NewTCP, with their
// segments; without shared memory they do not.
func TestOnDemandHostConnectsAtInit(t *testing.T) {
	for _, shm := range []bool{true, false} {
		const size = 4
		m := newTCPMeshWith(t, size, transport.TCPOptions{OnDemand: true, SharedMemory: shm})
		for r, e := range m.Endpoints {
			want := 0
			if shm {
				want = size - 1
			}
			if n := connectedCount(e); n != want {
				t.Errorf("shared memory %v: rank %d is connected to %d ranks after NewTCP, want %d", shm, r, n, want)
			}
			for p := range size {
				if shm && p != r && !transport.UsesSharedMemory(e, p) {
					t.Errorf("rank %d does not share memory with rank %d of its host", r, p)
				}
			}
		}
		m.Close()
	}
}

// TestOnDemandRingConnectsNeighbours: over TCP with connections on
// demand, ranks that exchange frames around a ring hold two connections
// each (and, sharing the host, two pairs of segments), not size-1. Nine
// ranks: a host of at most 8 connects at NewTCP; the host may hold 16
// for its pairs to share memory (on a machine of 16 CPUs, say), and then
// only 8 (crowded: the pairs connect without it).
func TestOnDemandRingConnectsNeighbours(t *testing.T) {
	for _, limit := range []int{16, 8} {
		t.Run(fmt.Sprintf("host of at most %d", limit), func(t *testing.T) {
			defer transport.SetCrowdedHost(limit)()
			ringConnectsNeighbours(t, limit >= 9)
		})
	}
}

func ringConnectsNeighbours(t *testing.T, shm bool) {
	const size = 9
	m := newTCPMeshWith(t, size, transport.TCPOptions{OnDemand: true, SharedMemory: true})
	defer m.Close()
	for r, e := range m.Endpoints {
		if n := connectedCount(e); n != 0 {
			t.Fatalf("rank %d is connected to %d ranks after NewTCP, want none", r, n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := transport.Key{Group: 1, Seq: 1}
	payload := make([]byte, 1<<20) // large: through the pair's shared memory
	var wg sync.WaitGroup
	errs := make([]error, size)
	for r, e := range m.Endpoints {
		wg.Go(func() {
			next, prev := (r+1)%size, (r+size-1)%size
			buf := make([]byte, len(payload))
			rcv := e.Post(prev, transport.ExactMatch(prev, key), 7, buf)
			if err := e.Send(ctx, next, key, 7, payload); err != nil {
				errs[r] = err
				return
			}
			_, errs[r] = rcv.Wait(ctx)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r, e := range m.Endpoints {
		deadline := time.Now().Add(5 * time.Second)
		for connectedCount(e) != 2 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // the receive's dial runs in the background
		}
		if n := connectedCount(e); n != 2 {
			t.Errorf("rank %d is connected to %d ranks after a ring exchange, want 2", r, n)
		}
		for _, p := range []int{(r + 1) % size, (r + size - 1) % size} {
			if got := transport.UsesSharedMemory(e, p); got != shm {
				t.Errorf("rank %d shares memory with its neighbour %d: %v, want %v", r, p, got, shm)
			}
		}
		if _, ok := e.PeerMemory(); ok != shm {
			t.Errorf("rank %d: PeerMemory says %v, want %v", r, ok, shm)
		}
	}
}

// TestOnDemandCrossingDials: two ranks that first send to each other at
// the same moment end with one connection, and both frames arrive.
func TestOnDemandCrossingDials(t *testing.T) {
	for i := range 20 {
		m := newTCPMeshWith(t, 2, transport.TCPOptions{OnDemand: true, SharedMemory: i%2 == 1})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		key := transport.Key{Group: 1, Seq: uint64(i + 1)}
		for r, e := range m.Endpoints {
			wg.Go(func() {
				peer := 1 - r
				if err := e.Send(ctx, peer, key, 1, []byte{byte(r)}); err != nil {
					errs[r] = err
					return
				}
				buf := make([]byte, 1)
				if _, err := e.Recv(ctx, peer, transport.ExactMatch(peer, key), 1, buf); err != nil {
					errs[r] = err
				} else if buf[0] != byte(peer) {
					errs[r] = fmt.Errorf("got %d from rank %d", buf[0], peer)
				}
			})
		}
		wg.Wait()
		cancel()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("round %d, rank %d: %v", i, r, err)
			}
		}
		for r, e := range m.Endpoints {
			if err := e.PeerErr(1 - r); err != nil {
				t.Fatalf("round %d: rank %d sees its peer down: %v", i, r, err)
			}
		}
		m.Close()
	}
}

// TestOnDemandDialAfterAccept: a rank whose send to a peer began dialing
// just as the peer's own connection came up (accepted, its pair done)
// uses that connection; it does not dial a peer already connected to it,
// which would refuse the dial (CI saw a 20 s wait and a failed barrier).
func TestOnDemandDialAfterAccept(t *testing.T) {
	m := newTCPMeshWith(t, 2, transport.TCPOptions{OnDemand: true})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := m.Endpoints[0], m.Endpoints[1]
	held := make(chan struct{})
	transport.HoldConnect(a, func(int) {
		close(held)
		for !a.Connected(1) || transport.PairsUnderWay(a) != 0 {
			time.Sleep(time.Millisecond)
		}
	})
	key := transport.Key{Group: 1, Seq: 1}
	sent := make(chan error, 1)
	go func() { sent <- a.Send(ctx, 1, key, 1, []byte{7}) }()
	<-held
	if err := b.Send(ctx, 0, key, 1, []byte{8}); err != nil {
		t.Fatalf("rank 1's send: %v", err)
	}
	start := time.Now()
	if err := <-sent; err != nil {
		t.Fatalf("rank 0's send, begun before rank 1 connected: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("rank 0's send took %v after rank 1 connected", d)
	}
	for r, e := range m.Endpoints {
		buf := make([]byte, 1)
		if _, err := e.Recv(ctx, 1-r, transport.ExactMatch(1-r, key), 1, buf); err != nil || buf[0] != byte(8-r) {
			t.Fatalf("rank %d received %d (%v), want %d", r, buf[0], err, 8-r)
		}
	}
}

// TestOnDemandPeerNeverConnected: a rank that died before anyone
// connected to it is named when a rank first sends to it (its listener
// refuses the dial), as a death; one that closed its endpoint is named
// with ErrPeerClosed.
func TestOnDemandPeerNeverConnected(t *testing.T) {
	m := newTCPMeshWith(t, 4, transport.TCPOptions{OnDemand: true})
	defer m.Close()
	m.Endpoints[2].Crash()
	m.Endpoints[3].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := m.Endpoints[0]
	err := e.Send(ctx, 2, transport.Key{Group: 1, Seq: 1}, 1, []byte("x"))
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Rank != 2 || errors.Is(err, transport.ErrPeerClosed) || !strings.Contains(err.Error(), "refuses connections") {
		t.Fatalf("send to the crashed rank 2: %v, want a PeerError naming it, its listener refusing", err)
	}
	err = e.Send(ctx, 3, transport.Key{Group: 1, Seq: 1}, 1, []byte("x"))
	if !errors.As(err, &pe) || pe.Rank != 3 || !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("send to the closed rank 3: %v, want a PeerError naming it with ErrPeerClosed", err)
	}
	// A receive from the crashed rank fails too, without a send.
	r := m.Endpoints[1].Post(2, transport.ExactMatch(2, transport.Key{Group: 1, Seq: 2}), 1, make([]byte, 1))
	if _, err := r.Wait(ctx); !errors.As(err, &pe) || pe.Rank != 2 {
		t.Fatalf("receive from the crashed rank 2: %v, want a PeerError naming it", err)
	}
}

// TestOnDemandPeerUp: the handlers hear of each connection, on both
// sides, once.
func TestOnDemandPeerUp(t *testing.T) {
	m := newTCPMeshWith(t, 3, transport.TCPOptions{OnDemand: true})
	defer m.Close()
	var mu sync.Mutex
	ups := map[[2]int]int{}
	for r, e := range m.Endpoints {
		e.SetHandlers(transport.Handlers{PeerUp: func(p int) {
			mu.Lock()
			ups[[2]int{r, p}]++
			mu.Unlock()
		}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := transport.Key{Group: 1, Seq: 1}
	if err := m.Endpoints[0].Send(ctx, 2, key, 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Endpoints[2].Recv(ctx, 0, transport.ExactMatch(0, key), 1, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[[2]int]int{{0, 2}: 1, {2, 0}: 1}
	if fmt.Sprint(ups) != fmt.Sprint(want) {
		t.Fatalf("PeerUp calls %v, want %v", ups, want)
	}
}
