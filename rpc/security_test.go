package rpc_test

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/internal/handshake"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/store"
	"github.com/godist/godist/transport"
)

// TestImpostorRunsNothing: while worker0 waits for its peer, an impostor
// without the job's token connects to it, fails the handshake, and sends
// a request anyway; it is dropped before a byte of the request is read,
// and the registered function does not run. The real worker1 then joins
// and its call runs once.
func TestImpostorRunsNothing(t *testing.T) {
	st := store.NewMem()
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ran atomic.Int64
	mk := func() (*rpc.Registry, rpc.Fn[string, int]) {
		reg := rpc.NewRegistry()
		fn, err := rpc.Register(reg, "launch", func(context.Context, string) (int, error) { return int(ran.Add(1)), nil })
		if err != nil {
			t.Fatal(err)
		}
		return reg, fn
	}
	agents := make([]*rpc.Agent, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	join := func(r int) {
		defer wg.Done()
		reg, _ := mk()
		ep, err := transport.NewTCP(ctx, transport.TCPOptions{Rank: r, Size: 2, Store: st, JobID: "job", Token: []byte("right")})
		if err != nil {
			errs[r] = err
			return
		}
		agents[r], errs[r] = rpc.Init(ctx, "", rpc.Options{Group: dist.FromEndpoint(ep, st, "tcp", 0), Functions: reg})
	}
	wg.Add(1)
	go join(0)
	addr, err := transport.RankAddr(ctx, st, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdh.X25519().GenerateKey(rand.Reader)
	_, herr := handshake.Client(c, handshake.Config{Proto: "transport", JobID: "job", Rank: 1, Token: []byte("wrong"),
		Identity: key, PeerKey: func(int) (*ecdh.PublicKey, error) { return key.PublicKey(), nil }})
	if !errors.Is(herr, handshake.ErrAuth) {
		t.Fatalf("impostor's handshake: %v, want ErrAuth", herr)
	}
	// A request as a member would frame it: never read.
	c.Write(append([]byte("GDTF\x01\x06"), make([]byte, 200)...))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	for {
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the impostor's connection was not dropped")
			}
			break
		}
	}
	c.Close()
	wg.Add(1)
	go join(1)
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer func() {
		for _, a := range agents {
			a.Shutdown(ctx, false)
			a.Group().Endpoint().Close()
		}
	}()
	if ran.Load() != 0 {
		t.Fatalf("the function ran %d times before any member called it", ran.Load())
	}
	_, fn := mk()
	if n, err := fn.Call(ctx, agents[1], "worker0", "go"); err != nil || n != 1 {
		t.Fatalf("the member's call: %d %v", n, err)
	}
}

// TestRefusedCallsRunNothing: calls refused by name or type run nothing.
func TestRefusedCallsRunNothing(t *testing.T) {
	var ran atomic.Int64
	c := startWith(t, 2, transport.Faults{}, rpc.Options{}, func(_ int, reg *rpc.Registry) {
		if _, err := rpc.Register(reg, "count", func(context.Context, int) (int, error) { return int(ran.Add(1)), nil }); err != nil {
			t.Fatal(err)
		}
	})
	ctx := ctx(t)
	a := c.agents[0]
	for _, err := range []error{
		func() error { _, err := rpc.Func[int, int]("counts").Call(ctx, a, "worker1", 1); return err }(),
		func() error { _, err := rpc.Func[string, int]("count").Call(ctx, a, "worker1", "1"); return err }(),
		func() error { _, err := rpc.Func[int, string]("count").Call(ctx, a, "worker1", 1); return err }(),
		func() error {
			_, err := rpc.MethodOf[int, int, int]("count").Call(ctx, a, rpc.NewRRef(a, 1), 1)
			return err
		}(),
	} {
		if err == nil {
			t.Fatal("a refused call succeeded")
		}
	}
	if ran.Load() != 0 {
		t.Fatalf("refused calls ran the function %d times", ran.Load())
	}
	if n, err := rpc.Func[int, int]("count").Call(ctx, a, "worker1", 1); err != nil || n != 1 {
		t.Fatalf("the right call: %d %v", n, err)
	}
}
