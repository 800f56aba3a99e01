package store

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/godist/godist/internal/handshake"
)

// TestServerUnauthenticatedFramesIgnored has a peer fail the handshake and
// then send a SET anyway: the server must drop it unread.
func TestServerUnauthenticatedFramesIgnored(t *testing.T) {
	srv, err := NewServer(context.Background(), "127.0.0.1:0", ServerOptions{Token: []byte("right"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = handshake.Client(conn, handshake.Config{Proto: "store", Rank: -1, Token: []byte("wrong"), Timeout: 2 * time.Second})
	if !errors.Is(err, handshake.ErrAuth) {
		t.Fatalf("handshake: %v, want ErrAuth", err)
	}
	conn.Write(encodeRequest(nil, &request{id: 1, kind: kindSet, keys: []string{"evil"}, value: []byte("x")}))
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	// The server closes without reading the SET: an EOF, or a reset since
	// unread data was pending.
	if n, err := io.Copy(io.Discard, conn); (err != nil && !errors.Is(err, syscall.ECONNRESET)) || n != 0 {
		t.Fatalf("server answered %d bytes (%v); want the connection closed", n, err)
	}
	if n := srv.t.numKeys(); n != 0 {
		t.Fatalf("server holds %d keys after an unauthenticated SET", n)
	}
}

// TestServerCancelUnparks checks that a client's canceled Get and Wait
// leave no waiter on the server.
func TestServerCancelUnparks(t *testing.T) {
	srv, err := NewServer(context.Background(), "127.0.0.1:0", ServerOptions{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, srv.Addr(), DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waiters := func() int {
		srv.t.mu.Lock()
		defer srv.t.mu.Unlock()
		return len(srv.t.mu.waiters)
	}
	short, scancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer scancel()
	errs := make(chan error, 2)
	go func() { _, err := c.Get(short, "a"); errs <- err }()
	go func() { errs <- c.Wait(short, "b", "c") }()
	for range 2 {
		if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v", err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for waiters() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := waiters(); n != 0 {
		t.Fatalf("%d keys still have waiters after the calls were canceled", n)
	}
}
