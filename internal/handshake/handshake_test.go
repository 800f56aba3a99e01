package handshake

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

type result struct {
	peer Peer
	err  error
}

// pair runs Client and Server over a net.Pipe and returns both results.
func pair(t *testing.T, client, server Config) (c, s result) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan result, 1)
	go func() {
		p, err := Server(b, server)
		if err != nil {
			b.Close() // as a caller would; unblocks the client
		}
		done <- result{p, err}
	}()
	p, err := Client(a, client)
	if err != nil {
		a.Close()
	}
	c = result{p, err}
	select {
	case s = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("server handshake did not return")
	}
	return c, s
}

func cfg(rank int, token string) Config {
	c := Config{Proto: "store", JobID: "job1", Rank: rank, Timeout: 2 * time.Second}
	if token != "" {
		c.Token = []byte(token)
	}
	return c
}

func TestSuccess(t *testing.T) {
	for _, token := range []string{"", "s3cret"} {
		c, s := pair(t, cfg(3, token), cfg(-1, token))
		if c.err != nil || s.err != nil {
			t.Fatalf("token %q: client %v, server %v", token, c.err, s.err)
		}
		if c.peer != (Peer{Rank: -1, JobID: "job1"}) || s.peer != (Peer{Rank: 3, JobID: "job1"}) {
			t.Fatalf("token %q: peers %+v %+v", token, c.peer, s.peer)
		}
	}
}

func TestSuccessTCPDeadlineCleared(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer conn.Close()
		c := cfg(0, "tok")
		c.Timeout = 100 * time.Millisecond
		if _, err := Server(conn, c); err != nil {
			done <- err
			return
		}
		time.Sleep(200 * time.Millisecond) // past the handshake deadline
		_, err = conn.Write([]byte("x"))
		done <- err
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := cfg(1, "tok")
	c.Timeout = 100 * time.Millisecond
	if _, err := Client(conn, c); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		t.Fatalf("read after handshake: %v (deadline not cleared?)", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWrongToken(t *testing.T) {
	c, s := pair(t, cfg(1, "alpha"), cfg(0, "beta"))
	if !errors.Is(c.err, ErrAuth) {
		t.Errorf("client: got %v, want ErrAuth", c.err)
	}
	if !errors.Is(s.err, ErrAuth) {
		t.Errorf("server: got %v, want ErrAuth", s.err)
	}
}

func TestMissingToken(t *testing.T) {
	for _, tc := range []struct{ client, server string }{{"", "tok"}, {"tok", ""}} {
		c, s := pair(t, cfg(1, tc.client), cfg(0, tc.server))
		for _, r := range []result{c, s} {
			var me *MismatchError
			if !errors.As(r.err, &me) || me.Field != "authentication" {
				t.Errorf("client token %q server token %q: got %v, want authentication mismatch", tc.client, tc.server, r.err)
			}
		}
	}
}

func TestMismatch(t *testing.T) {
	job := cfg(1, "")
	job.JobID = "job2"
	proto := cfg(1, "")
	proto.Proto = "transport"
	for _, tc := range []struct {
		client Config
		field  string
	}{{job, "job id"}, {proto, "proto"}} {
		c, s := pair(t, tc.client, cfg(0, ""))
		for _, r := range []result{c, s} {
			var me *MismatchError
			if !errors.As(r.err, &me) || me.Field != tc.field {
				t.Fatalf("got %v, want %s mismatch", r.err, tc.field)
			}
			if !strings.Contains(r.err.Error(), "job1") && tc.field == "job id" {
				t.Errorf("error does not name the job: %v", r.err)
			}
		}
	}
}

// TestWorldSizeMismatch: two ranks started with different WORLD_SIZE
// find out at their first connection, naming both sizes (issue 19, item
// 8: one side hung in its first collective); a side that states no size
// (a store client) is not checked.
func TestWorldSizeMismatch(t *testing.T) {
	a, b := cfg(0, ""), cfg(1, "")
	a.Size, b.Size = 2, 3
	c, s := pair(t, a, b)
	for _, r := range []result{c, s} {
		var me *MismatchError
		if !errors.As(r.err, &me) || me.Field != "world size" || !strings.Contains(r.err.Error(), "WORLD_SIZE") {
			t.Fatalf("got %v, want a world size mismatch", r.err)
		}
	}
	b.Size = 0
	c, s = pair(t, a, b)
	if c.err != nil || s.err != nil {
		t.Fatalf("a side stating no size: %v / %v", c.err, s.err)
	}
}

func TestVersionMismatch(t *testing.T) {
	h, err := encodeHello(cfg(1, ""))
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint16(h[4:], version+1)
	err = serveBytes(t, h, cfg(0, ""))
	var me *MismatchError
	if !errors.As(err, &me) || me.Field != "version" || me.Remote != strconv.Itoa(version+1) {
		t.Fatalf("got %v, want version mismatch", err)
	}
}

// serveBytes runs Server against a peer that writes data and then closes
// its side after draining what the server sends.
func serveBytes(t *testing.T, data []byte, c Config) error {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		a.Write(data)
		a.Close()
	}()
	go io.Copy(io.Discard, a)
	_, err := Server(b, c)
	b.Close()
	return err
}

func TestGarbage(t *testing.T) {
	valid, _ := encodeHello(cfg(1, ""))
	inputs := [][]byte{
		nil,
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		[]byte("GD"),
		[]byte("GDHS"),
		valid[:len(valid)-1],
		valid[:10],
		bytes.Repeat([]byte{0xff}, 2000),
	}
	for _, in := range inputs {
		if err := serveBytes(t, in, cfg(0, "")); err == nil {
			t.Errorf("input %q: handshake succeeded", in)
		}
	}
	err := serveBytes(t, []byte("GET / HTTP/1.1\r\n"), cfg(0, ""))
	var me *MismatchError
	if !errors.As(err, &me) || me.Field != "magic" || !strings.Contains(err.Error(), "not a godist") {
		t.Errorf("http input: got %v, want a magic mismatch", err)
	}
}

// countingConn counts the bytes read through it.
type countingConn struct {
	net.Conn
	n atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// TestBoundedRead has a peer stream junk without end, and checks that the
// server reads no more than one hello (and one MAC) before giving up.
func TestBoundedRead(t *testing.T) {
	for _, token := range []string{"", "tok"} {
		// A hello that passes the magic and version checks and claims the
		// longest strings, followed by endless junk.
		head := []byte("GDHS\x00\x01\x00\x01\xff")
		if token == "" {
			head[7] = 0
		}
		a, b := net.Pipe()
		stop := make(chan struct{})
		go func() {
			junk := bytes.Repeat([]byte{'j'}, 64<<10)
			a.Write(head)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := a.Write(junk); err != nil {
					return
				}
			}
		}()
		go io.Copy(io.Discard, a)
		cc := &countingConn{Conn: b}
		c := cfg(0, token)
		c.Timeout = 500 * time.Millisecond
		_, err := Server(cc, c)
		close(stop)
		b.Close()
		a.Close()
		if err == nil {
			t.Fatal("handshake with junk succeeded")
		}
		max := int64(MaxHelloSize)
		if token != "" {
			max += macLen
		}
		if n := cc.n.Load(); n > max {
			t.Errorf("token %q: read %d bytes, want ≤ %d", token, n, max)
		}
	}
}

func TestSilentPeerTimesOut(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go io.Copy(io.Discard, a) // reads but never writes
	c := cfg(0, "")
	c.Timeout = 50 * time.Millisecond
	start := time.Now()
	_, err := Server(b, c)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestBadConfig(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := cfg(0, "")
	c.JobID = strings.Repeat("x", 256)
	if _, err := Client(a, c); err == nil {
		t.Fatal("accepted a 256-byte job id")
	}
}

func FuzzServer(f *testing.F) {
	valid, _ := encodeHello(cfg(1, ""))
	tok, _ := encodeHello(cfg(1, "tok"))
	f.Add(valid)
	f.Add(tok)
	f.Add(append(tok, bytes.Repeat([]byte{1}, 32)...))
	f.Add([]byte("GDHS\x00\x01\x00\x00\x05store"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, token := range []string{"", "tok"} {
			c := cfg(0, token)
			c.Timeout = 50 * time.Millisecond // a safety net: the peer below never goes silent
			a, b := net.Pipe()
			// The fake client drains what the server sends, writes data
			// (net.Pipe's Write returns once the server has read all of it
			// or closed its end) and then closes, so the server sees EOF
			// at once instead of waiting for its deadline.
			drained := make(chan struct{})
			go func() {
				io.Copy(io.Discard, a)
				close(drained)
			}()
			wrote := make(chan struct{})
			go func() {
				a.Write(data)
				a.Close()
				close(wrote)
			}()
			done := make(chan struct{})
			go func() {
				Server(b, c)
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Server hung")
			}
			b.Close()
			<-wrote
			<-drained
		}
	})
}

// keys makes rank keys for ranks 0..n-1 and a PeerKey over them.
func keys(t *testing.T, n int) ([]*ecdh.PrivateKey, func(int) (*ecdh.PublicKey, error)) {
	t.Helper()
	privs := make([]*ecdh.PrivateKey, n)
	for i := range n {
		priv, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		privs[i] = priv
	}
	return privs, func(r int) (*ecdh.PublicKey, error) {
		if r < 0 || r >= n {
			return nil, errors.New("no such rank")
		}
		return privs[r].PublicKey(), nil
	}
}

// TestIdentity: ranks that prove their published keys connect; a process
// that has the token but another key than the one the rank it claims
// published is refused by the side it connects to (ErrIdentity), whichever
// side it is; so is one that sends back the proof it was sent, and a rank
// whose published key is a low-order point.
func TestIdentity(t *testing.T) {
	privs, peerKey := keys(t, 3)
	with := func(rank int, priv *ecdh.PrivateKey) Config {
		c := cfg(rank, "secret")
		c.Identity, c.PeerKey = priv, peerKey
		return c
	}
	c, s := pair(t, with(1, privs[1]), with(0, privs[0]))
	if c.err != nil || s.err != nil || c.peer.Rank != 0 || s.peer.Rank != 1 {
		t.Fatalf("honest ranks: client %+v, server %+v", c, s)
	}
	impostor, _ := ecdh.X25519().GenerateKey(rand.Reader)
	c, s = pair(t, with(2, impostor), with(0, privs[0])) // claims rank 2
	if !errors.Is(s.err, ErrIdentity) || !strings.Contains(s.err.Error(), "rank 2") {
		t.Fatalf("an impostor dialing as rank 2: the server got %v, want ErrIdentity naming rank 2", s.err)
	}
	c, s = pair(t, with(1, privs[1]), with(0, impostor)) // answers as rank 0
	if !errors.Is(c.err, ErrIdentity) {
		t.Fatalf("an impostor answering as rank 0: the client got %v, want ErrIdentity", c.err)
	}

	// A reflector: a server that has the token, claims rank 0, and sends
	// back the client's own rank proof (the client's role is in it).
	a, b := net.Pipe()
	defer b.Close()
	go func() {
		defer b.Close()
		c := with(0, impostor)
		hello, _ := encodeHello(c)
		if _, err := b.Write(hello); err != nil {
			return
		}
		theirs, _, err := readHello(b)
		if err != nil {
			return
		}
		got := make([]byte, 2*macLen) // the client's token proof, then its rank proof
		if _, err := io.ReadFull(b, got); err != nil {
			return
		}
		b.Write(append(proof(c.Token, macLabel, theirs, hello, "S"), got[macLen:]...))
	}()
	if _, err := Client(a, with(1, privs[1])); !errors.Is(err, ErrIdentity) {
		t.Fatalf("a server sending back the client's rank proof: %v, want ErrIdentity", err)
	}
	a.Close()

	// A published key that is a low-order point (all zeros): refused, no
	// secret computed from it.
	zero, err := ecdh.X25519().NewPublicKey(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	low := with(1, privs[1])
	low.PeerKey = func(int) (*ecdh.PublicKey, error) { return zero, nil }
	if c, _ := pair(t, low, with(0, privs[0])); !errors.Is(c.err, ErrIdentity) {
		t.Fatalf("a low-order published key: %v, want ErrIdentity", c.err)
	}
	// One side without rank keys: a mismatch, named.
	c, s = pair(t, with(1, privs[1]), cfg(0, "secret"))
	var me *MismatchError
	if !errors.As(c.err, &me) || me.Field != "identity" {
		t.Fatalf("one side without rank keys: %v", c.err)
	}
}
