package transport

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godist/godist/internal/handshake"
	"github.com/godist/godist/store"
)

// maxPendingHandshakes bounds the handshakes a listener runs at once.
const maxPendingHandshakes = 128

// DuplicateRankError reports that another process published itself as
// this rank first: two processes were started with the same RANK, or a
// process of an earlier attempt of the job is still running.
type DuplicateRankError struct {
	Rank  int
	Addr  string // this process's address
	Other string // the address of the process that holds the rank
}

func (e *DuplicateRankError) Error() string {
	return fmt.Sprintf("transport: rank %d is taken: the process at %s registered as rank %d before this one (at %s); two processes were started with RANK=%d, or one of an earlier attempt of this job still runs, or the store holds an earlier job's records (use a fresh store or job id); give every process its own RANK",
		e.Rank, e.Other, e.Rank, e.Addr, e.Rank)
}

// rankRecord is what a rank publishes: its address and public key.
type rankRecord struct {
	addr string
	key  ed25519.PublicKey
}

func (r rankRecord) encode() []byte {
	return []byte(r.addr + " " + hex.EncodeToString(r.key))
}

func decodeRankRecord(b []byte) (rankRecord, error) {
	addr, k, ok := strings.Cut(string(b), " ")
	key, err := hex.DecodeString(k)
	if !ok || err != nil || len(key) != ed25519.PublicKeySize {
		return rankRecord{addr: string(b)}, fmt.Errorf("malformed rank record %q", b)
	}
	return rankRecord{addr: addr, key: key}, nil
}

// rankRecords reads the ranks' records from the store, once each.
type rankRecords struct {
	store      store.Store
	prefix     string
	ctx        context.Context
	rank, size int // this rank's, and the world's
	mu         sync.Mutex
	cache      map[int]rankRecord
}

func (rs *rankRecords) key(r int) string {
	return rs.prefix + "transport/once/rank/" + strconv.Itoa(r)
}

// get waits for rank r's record.
func (rs *rankRecords) get(ctx context.Context, r int) (rankRecord, error) {
	rs.mu.Lock()
	rec, ok := rs.cache[r]
	rs.mu.Unlock()
	if ok {
		return rec, nil
	}
	b, err := rs.store.Get(ctx, rs.key(r))
	if err != nil {
		return rankRecord{}, fmt.Errorf("address of rank %d: %w", r, err)
	}
	if rec, err = decodeRankRecord(b); err != nil {
		return rankRecord{}, fmt.Errorf("rank %d: %w", r, err)
	}
	rs.mu.Lock()
	if rs.cache == nil {
		rs.cache = map[int]rankRecord{}
	}
	rs.cache[r] = rec
	rs.mu.Unlock()
	return rec, nil
}

// peerKey is the handshake's PeerKey: rank r's published key, waited for
// at most as long as a handshake.
func (rs *rankRecords) peerKey(r int) (ed25519.PublicKey, error) {
	if r < 0 || r >= rs.size || r == rs.rank {
		return nil, fmt.Errorf("no rank %d to connect with (world size %d, this is rank %d)", r, rs.size, rs.rank)
	}
	ctx, cancel := context.WithTimeout(rs.ctx, handshake.DefaultTimeout)
	defer cancel()
	rec, err := rs.get(ctx, r)
	return rec.key, err
}

// dialPeer waits for rank r's record in the store, connects with retry
// and performs the handshake.
func dialPeer(ctx context.Context, records *rankRecords, r int, hs handshake.Config) (net.Conn, error) {
	rec, err := records.get(ctx, r)
	if err != nil {
		return nil, err
	}
	addr := rec.addr
	var d net.Dialer
	backoff := 10 * time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "tcp", string(addr))
		if err == nil {
			peer, herr := handshake.Client(conn, hs)
			if herr == nil {
				if peer.Rank != r {
					conn.Close()
					return nil, fmt.Errorf("%s answered as rank %d, expected rank %d", addr, peer.Rank, r)
				}
				return conn, nil
			}
			conn.Close()
			if !isConnDrop(herr) {
				return nil, fmt.Errorf("handshake with rank %d at %s: %w", r, addr, herr)
			}
			// Dropped mid-handshake: r died, or its listener had too many
			// handshakes under way. A refused connection tells which; an
			// open listener is tried again.
			c, perr := d.DialContext(ctx, "tcp", addr)
			if perr == nil {
				c.Close()
			} else if errors.Is(perr, syscall.ECONNREFUSED) {
				return nil, &goneError{rank: r, why: fmt.Sprintf("it dropped the handshake (%v) and its listener at %s now refuses connections: the process exited", herr, addr)}
			}
			err = herr
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			// r published its address after it began listening, and
			// listens until it has connected to every rank, this one
			// included: a refusal means its process is gone.
			return nil, &goneError{rank: r, why: fmt.Sprintf("its listener at %s refuses connections: the process exited", addr)}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to rank %d at %s: %w (last error: %v)", r, addr, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// isConnDrop reports whether err is a connection the peer ended (closed
// or reset) rather than a refusal in the handshake's protocol.
func isConnDrop(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
