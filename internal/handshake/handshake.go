// Package handshake is the authenticated handshake every godist connection
// starts with: store clients talking to the store server, and ranks talking
// to each other through the transport.
//
// # Wire format
//
// Each side sends a hello:
//
//	magic   [4]byte  "GDHS"
//	version uint16   4 (big endian, as every integer here)
//	flags   uint16   bit 0: this side has a token; bit 1: it proves its rank
//	proto   uint8 length + bytes   ("store", "transport")
//	job id  uint8 length + bytes
//	rank    int32    -1 when the side has none
//	size    int32    the job's world size, 0 when the side does not state one
//	nonce   [32]byte from crypto/rand
//
// Both sides write their hello and then read the peer's, reading at most
// [MaxHelloSize] bytes. They check the magic, the version, the protocol, the
// job id, the world size (when both state one) and that both or neither
// have a token. When tokens are in use each side proves it with
//
//	MAC = HMAC-SHA256(token, "godist handshake v1" || client hello || server hello || role)
//
// with role "C" for the client's MAC and "S" for the server's, checking the
// peer's with hmac.Equal. The two nonces make every transcript fresh, so
// a recorded MAC is worth nothing in another handshake.
//
// When both sides prove their ranks (Config.Identity), each computes
// their static Diffie-Hellman secret from its own rank key and the public
// key of the rank the peer's hello claims (Config.PeerKey: in the
// transport, the key that rank published in the job's store under a
// write-once key), and proves it with
//
//	PROOF = HMAC-SHA256(X25519(own key, peer's key), "godist identity v2" || client hello || server hello || role)
//
// Only the holders of the two private keys can compute that secret, so a
// valid proof shows that the peer holds the key of the rank it claims (as
// the "ss" exchange of the Noise protocols authenticates). It costs each
// side one X25519 (about 75 µs) and a key costs one more to make, where
// Ed25519 signatures (version 3) cost a signature and a verification a
// handshake and 2.5 ms of tables a process: 128 processes starting on two
// CPUs felt it.
//
// The proofs take one round trip after the hellos: the client sends its
// MAC, then its PROOF; the server checks them in that order and answers
// with its own. A server that finds the client's MAC wrong answers with
// its MAC alone, so that the client learns that the tokens differ, and
// computes no secret for a peer without the token.
//
// # Threat model
//
// The token keeps processes that are not part of the job (a stray job on
// the same port range, a port scanner, a user on a shared cluster) from
// reading or changing a job's state. The rank keys keep a process that has
// the token but is not the rank it claims (a second process started with
// the same RANK, a stale worker of an earlier attempt) from taking a
// member's place: it cannot prove a key it did not publish, and the
// published key cannot be replaced. (A process that could read a rank's
// private key from its memory could also pass as any rank to that one:
// it already owns that rank.) A peer without the token is dropped
// after this side has read at most one hello and one MAC ([MaxHelloSize] +
// 32 bytes); nothing the peer sends is read beyond that, no allocation
// depends on a length it sent, and since the caller reads nothing else
// before the handshake succeeds, nothing changes state. The whole handshake
// runs under one deadline, so a silent peer costs at most Config.Timeout.
// The handshake does not encrypt: anyone on the path can read the traffic
// that follows, and an active attacker on the path can hijack a connection
// after it is authenticated. Use a private network (or a tunnel) for that.
package handshake

import (
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

const (
	magic   = "GDHS"
	version = 4

	flagToken    = 1 << 0
	flagIdentity = 1 << 1

	nonceLen = 32
	macLen   = sha256.Size

	// fixedLen is the hello without the two variable-length strings.
	fixedLen = 4 + 2 + 2 + 1 + 1 + 4 + 4 + nonceLen

	// MaxHelloSize is the most bytes a hello can take, and so the most this
	// side reads before it has checked the peer's hello.
	MaxHelloSize = fixedLen + 255 + 255

	// DefaultTimeout bounds a handshake whose Config.Timeout is zero.
	DefaultTimeout = 10 * time.Second

	macLabel = "godist handshake v1"
	idLabel  = "godist identity v2"
)

// Config describes this side of a handshake.
type Config struct {
	Proto   string        // what the connection is for: "store" or "transport"; both sides must agree (≤ 255 bytes)
	JobID   string        // both sides must agree (≤ 255 bytes)
	Rank    int           // this side's rank; -1 when it has none (a store client, a tool)
	Size    int           // the job's world size as this side knows it; 0 states none
	Token   []byte        // shared job secret; nil or empty means no authentication
	Timeout time.Duration // bound on the whole handshake; 0 means DefaultTimeout
	// Identity, when set, proves this side's rank: an X25519 key whose
	// secret with PeerKey(peer's rank), which must then be set, keys both
	// sides' proofs. Both sides must use it or neither.
	Identity *ecdh.PrivateKey
	PeerKey  func(rank int) (*ecdh.PublicKey, error)
}

// ErrIdentity means the peer could not prove the rank it claims: its
// proof does not match the secret of this side's key and that rank's
// published key.
var ErrIdentity = errors.New("handshake: the peer cannot prove the rank it claims (another process holds that rank's key: two processes started with the same RANK, or a stale process of an earlier attempt)")

// Peer is what the handshake learned about the other side.
type Peer struct {
	Rank  int    // the peer's rank; -1 when it has none
	JobID string // equal to Config.JobID after a successful handshake
}

// ErrAuth means the token proof failed: the peer has a different token, or
// sent a MAC that does not verify. Errors returned for it satisfy
// errors.Is(err, ErrAuth).
var ErrAuth = errors.New("handshake: authentication failed: the peer does not know this job's token (give both sides the same job token)")

// MismatchError means the two sides disagree on something they must share:
// Field is "magic", "version", "proto", "job id", "world size" or
// "authentication".
type MismatchError struct {
	Field  string // what differs
	Local  string // this side's value
	Remote string // the peer's value
}

func (e *MismatchError) Error() string {
	var hint string
	switch e.Field {
	case "magic":
		hint = "the peer is not a godist process; check the address and port"
	case "version":
		hint = "run the same godist version on both sides"
	case "proto":
		hint = "the address belongs to another kind of godist service; check the address and port"
	case "job id":
		hint = "the peer belongs to another job; check the address or give both sides the same job id"
	case "world size":
		hint = "start every rank with the same WORLD_SIZE (and every rank of it exactly once)"
	case "authentication":
		hint = "give both sides the same job token, or none to both"
	case "identity":
		hint = "run the same godist version on both sides"
	default:
		hint = "configure both sides alike"
	}
	return fmt.Sprintf("handshake: %s mismatch: this side has %s, the peer has %s; %s",
		e.Field, e.Local, e.Remote, hint)
}

// Client runs the handshake on conn as the side that dialed. It returns the
// peer's rank and job id, or an error: a *MismatchError, an error wrapping
// ErrAuth, or an I/O error (wrapping os.ErrDeadlineExceeded when the peer
// was silent past the timeout). On error the caller must close conn.
func Client(conn net.Conn, cfg Config) (Peer, error) { return run(conn, cfg, true) }

// Server runs the handshake on conn as the side that accepted it. It
// returns the same results as Client.
func Server(conn net.Conn, cfg Config) (Peer, error) { return run(conn, cfg, false) }

type hello struct {
	version uint16
	flags   uint16
	proto   string
	jobID   string
	rank    int32
	size    int32
}

func run(conn net.Conn, cfg Config, isClient bool) (Peer, error) {
	if len(cfg.Proto) > 255 {
		return Peer{}, fmt.Errorf("handshake: proto of %d bytes exceeds 255", len(cfg.Proto))
	}
	if len(cfg.JobID) > 255 {
		return Peer{}, fmt.Errorf("handshake: job id of %d bytes exceeds 255", len(cfg.JobID))
	}
	if cfg.Rank < -1 || cfg.Rank > 1<<31-1 {
		return Peer{}, fmt.Errorf("handshake: rank %d out of range", cfg.Rank)
	}
	if cfg.Size < 0 || cfg.Size > 1<<31-1 {
		return Peer{}, fmt.Errorf("handshake: world size %d out of range", cfg.Size)
	}
	if cfg.Identity != nil && (cfg.Identity.Curve() != ecdh.X25519() || cfg.PeerKey == nil) {
		return Peer{}, errors.New("handshake: Identity needs an X25519 private key and PeerKey")
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return Peer{}, fmt.Errorf("handshake: %w", err)
	}

	mine, err := encodeHello(cfg)
	if err != nil {
		return Peer{}, err
	}
	var theirs []byte
	var h hello
	err = exchange(conn, mine, func() error {
		var err error
		theirs, h, err = readHello(conn)
		return err
	})
	if err != nil {
		return Peer{}, err
	}
	if err := check(cfg, h); err != nil {
		return Peer{}, err
	}

	// Both proofs cover the transcript in one order, the client's hello
	// first, and say whose they are.
	clientHello, serverHello := mine, theirs
	myRole, theirRole := "C", "S"
	if !isClient {
		clientHello, serverHello = theirs, mine
		myRole, theirRole = "S", "C"
	}
	hasToken, hasID := len(cfg.Token) > 0, cfg.Identity != nil
	tokenProof := func(role string) []byte { return proof(cfg.Token, macLabel, clientHello, serverHello, role) }
	var secret []byte // the two rank keys' X25519 secret
	rankProof := func(role string) []byte { return proof(secret, idLabel, clientHello, serverHello, role) }
	// findSecret computes secret from this side's key and the key of the
	// rank the peer claims.
	findSecret := func() error {
		key, err := cfg.PeerKey(int(h.rank))
		if err != nil {
			return fmt.Errorf("handshake: the key of rank %d: %w", h.rank, err)
		}
		if key == nil || key.Curve() != ecdh.X25519() {
			return fmt.Errorf("handshake: the key of rank %d is not an X25519 key", h.rank)
		}
		if secret, err = cfg.Identity.ECDH(key); err != nil { // a low-order point: no rank publishes one
			return fmt.Errorf("%w (it claims rank %d, whose published key is unusable: %v)", ErrIdentity, h.rank, err)
		}
		return nil
	}
	readProof := func(what string) ([]byte, error) {
		got := make([]byte, macLen)
		if _, err := io.ReadFull(conn, got); err != nil {
			return nil, fmt.Errorf("handshake: reading the peer's %s: %w", what, err)
		}
		return got, nil
	}

	// The proofs take one round trip: the client sends its own (the
	// token's, then the rank's), the server checks them and answers with
	// its own. A server that finds the token proof wrong answers with its
	// token proof alone (so that the client can tell it has the wrong
	// token), computing no secret for a peer without the token.
	if isClient {
		if hasID {
			if err := findSecret(); err != nil {
				return Peer{}, err
			}
		}
		var out []byte
		if hasToken {
			out = append(out, tokenProof(myRole)...)
		}
		if hasID {
			out = append(out, rankProof(myRole)...)
		}
		if len(out) > 0 {
			// Written while the server's answer is read: a server that
			// stops reading early still answers.
			err := exchange(conn, out, func() error {
				if hasToken {
					got, err := readProof("token proof")
					if err != nil {
						return err
					}
					if !hmac.Equal(got, tokenProof(theirRole)) {
						return ErrAuth
					}
				}
				if hasID {
					got, err := readProof("rank proof")
					if err != nil {
						return err
					}
					if !hmac.Equal(got, rankProof(theirRole)) {
						return fmt.Errorf("%w (it claims rank %d)", ErrIdentity, h.rank)
					}
				}
				return nil
			})
			if err != nil {
				return Peer{}, err
			}
		}
	} else {
		var out []byte
		var refused error
		if hasToken {
			got, err := readProof("token proof")
			if err != nil {
				return Peer{}, err
			}
			if !hmac.Equal(got, tokenProof(theirRole)) {
				refused = ErrAuth
			}
			out = tokenProof(myRole)
		}
		if hasID && refused == nil {
			if err := findSecret(); err != nil {
				return Peer{}, err
			}
			got, err := readProof("rank proof")
			if err != nil {
				return Peer{}, err
			}
			if !hmac.Equal(got, rankProof(theirRole)) {
				refused = fmt.Errorf("%w (it claims rank %d)", ErrIdentity, h.rank)
			}
			out = append(out, rankProof(myRole)...)
		}
		if len(out) > 0 {
			if _, err := conn.Write(out); err != nil && refused == nil {
				return Peer{}, fmt.Errorf("handshake: writing to the peer: %w", err)
			}
		}
		if refused != nil {
			return Peer{}, refused
		}
	}

	if err := conn.SetDeadline(time.Time{}); err != nil {
		return Peer{}, fmt.Errorf("handshake: %w", err)
	}
	return Peer{Rank: int(h.rank), JobID: h.jobID}, nil
}

// exchange writes out while read runs, so that two sides that both write
// first cannot deadlock on an unbuffered connection (net.Pipe). When read
// fails, the write is cut short by a past write deadline so that no
// goroutine outlives the call.
func exchange(conn net.Conn, out []byte, read func() error) error {
	werr := make(chan error, 1)
	go func() {
		_, err := conn.Write(out)
		werr <- err
	}()
	rerr := read()
	if rerr != nil {
		_ = conn.SetWriteDeadline(time.Now())
		<-werr
		return rerr
	}
	if err := <-werr; err != nil {
		return fmt.Errorf("handshake: writing to the peer: %w", err)
	}
	return nil
}

func encodeHello(cfg Config) ([]byte, error) {
	b := make([]byte, 0, fixedLen+len(cfg.Proto)+len(cfg.JobID))
	b = append(b, magic...)
	b = binary.BigEndian.AppendUint16(b, version)
	var flags uint16
	if len(cfg.Token) > 0 {
		flags |= flagToken
	}
	if cfg.Identity != nil {
		flags |= flagIdentity
	}
	b = binary.BigEndian.AppendUint16(b, flags)
	b = append(b, byte(len(cfg.Proto)))
	b = append(b, cfg.Proto...)
	b = append(b, byte(len(cfg.JobID)))
	b = append(b, cfg.JobID...)
	b = binary.BigEndian.AppendUint32(b, uint32(int32(cfg.Rank)))
	b = binary.BigEndian.AppendUint32(b, uint32(int32(cfg.Size)))
	var nonce [nonceLen]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("handshake: making a nonce: %w", err)
	}
	return append(b, nonce[:]...), nil
}

// readHello reads one hello, at most MaxHelloSize bytes, and returns its
// raw bytes and fields. It checks the magic before reading further.
func readHello(r io.Reader) ([]byte, hello, error) {
	var h hello
	buf := make([]byte, 0, MaxHelloSize)
	read := func(n int, what string) ([]byte, error) {
		start := len(buf)
		buf = buf[:start+n] // within capacity: the sum of all reads is ≤ MaxHelloSize
		if _, err := io.ReadFull(r, buf[start:]); err != nil {
			return nil, fmt.Errorf("handshake: reading the peer's hello (%s): %w", what, err)
		}
		return buf[start:], nil
	}
	p, err := read(4+2+2+1, "header")
	if err != nil {
		return nil, h, err
	}
	if string(p[:4]) != magic {
		return nil, h, &MismatchError{Field: "magic", Local: strconv.Quote(magic), Remote: strconv.Quote(string(p[:4]))}
	}
	h.version = binary.BigEndian.Uint16(p[4:])
	if h.version != version {
		return nil, h, &MismatchError{Field: "version", Local: strconv.Itoa(version), Remote: strconv.Itoa(int(h.version))}
	}
	h.flags = binary.BigEndian.Uint16(p[6:])
	protoLen := int(p[8])
	if p, err = read(protoLen+1, "proto"); err != nil {
		return nil, h, err
	}
	h.proto = string(p[:protoLen])
	jobLen := int(p[protoLen])
	if p, err = read(jobLen+4+4+nonceLen, "job id"); err != nil {
		return nil, h, err
	}
	h.jobID = string(p[:jobLen])
	h.rank = int32(binary.BigEndian.Uint32(p[jobLen:]))
	h.size = int32(binary.BigEndian.Uint32(p[jobLen+4:]))
	return buf, h, nil
}

func check(cfg Config, h hello) error {
	if h.proto != cfg.Proto {
		return &MismatchError{Field: "proto", Local: strconv.Quote(cfg.Proto), Remote: strconv.Quote(h.proto)}
	}
	if h.jobID != cfg.JobID {
		return &MismatchError{Field: "job id", Local: strconv.Quote(cfg.JobID), Remote: strconv.Quote(h.jobID)}
	}
	if cfg.Size > 0 && h.size > 0 && int32(cfg.Size) != h.size {
		return &MismatchError{Field: "world size", Local: strconv.Itoa(cfg.Size), Remote: strconv.Itoa(int(h.size))}
	}
	mine := len(cfg.Token) > 0
	theirs := h.flags&flagToken != 0
	if mine != theirs {
		have := func(b bool) string {
			if b {
				return "a token"
			}
			return "no token"
		}
		return &MismatchError{Field: "authentication", Local: have(mine), Remote: have(theirs)}
	}
	if (cfg.Identity != nil) != (h.flags&flagIdentity != 0) {
		have := func(b bool) string {
			if b {
				return "rank keys"
			}
			return "no rank keys"
		}
		return &MismatchError{Field: "identity", Local: have(cfg.Identity != nil), Remote: have(h.flags&flagIdentity != 0)}
	}
	return nil
}

// proof is HMAC-SHA256(key, label || client hello || server hello || role).
func proof(key []byte, label string, clientHello, serverHello []byte, role string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	m.Write(clientHello)
	m.Write(serverHello)
	m.Write([]byte(role))
	return m.Sum(nil)
}
