package dist

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
	"unicode/utf8"
)

// The live view: every rank made by Init publishes, from a goroutine of
// its own, a small RankStatus to the job's store under StatusKey(rank):
// the call it is in (the oldest, when several are in flight), since
// when, and the peer it waits on, or that it is idle and since when.
// godist top reads them. A rank publishes every StatusInterval while its
// status changes or a call has been in flight that long, and every
// StatusHeartbeat otherwise; so a record of a call in flight older than
// two intervals and a second, or any other record older than two
// heartbeats, belongs to a rank that stopped (SIGSTOP, a hang outside Go,
// a lost host), and the ranks that wait on it say so in their records.

// DefaultStatusInterval is Options.StatusInterval's default.
const DefaultStatusInterval = 500 * time.Millisecond

// StatusHeartbeat is how often a rank whose status has not changed
// publishes it again.
const StatusHeartbeat = 2 * time.Second

// StatusPrefix is the store prefix of the ranks' status records.
const StatusPrefix = "godist/top/"

// StatusKey is the store key of rank's status record.
func StatusKey(rank int) string { return StatusPrefix + strconv.Itoa(rank) }

// MaxStatusLen bounds an encoded RankStatus: DecodeRankStatus refuses a
// longer value (anyone in the job can write the store).
const MaxStatusLen = 2048

// The states of a RankStatus.
const (
	StatusIdle    = "idle"    // no call in flight
	StatusRunning = "running" // in a call, not blocked on a peer
	StatusWaiting = "waiting" // in a call, blocked on a receive from WaitingOn
	StatusFailed  = "failed"  // the default group failed (Error says why)
	StatusExited  = "exited"  // Destroy was called
)

// RankStatus is what one rank publishes for godist top.
type RankStatus struct {
	Rank      int    `json:"rank"` // global rank
	WorldSize int    `json:"world_size"`
	Host      string `json:"host"`
	PID       int    `json:"pid"`
	State     string `json:"state"`
	// The call in flight (the oldest, when there are several): its group,
	// operation, sequence number and payload.
	Group uint32 `json:"group,omitempty"`
	Op    string `json:"op,omitempty"`
	Seq   uint64 `json:"seq,omitempty"`
	Bytes int64  `json:"bytes,omitempty"`
	// Since is when that call began, or when the rank became idle (its
	// last call ended), by the rank's clock.
	Since time.Time `json:"since"`
	// WaitingOn is the global rank the call is blocked on, or -1.
	WaitingOn int    `json:"waiting_on"`
	InFlight  int    `json:"in_flight"` // calls in flight, all groups
	Calls     uint64 `json:"calls"`     // calls begun so far, all groups
	Error     string `json:"error,omitempty"`
	// Updated is when the record was published, by the rank's clock;
	// HeartbeatMS the longest it goes without publishing while it runs,
	// and IntervalMS how often it publishes while a call is in flight (0
	// in an older record: DefaultStatusInterval).
	Updated     time.Time `json:"updated"`
	HeartbeatMS int64     `json:"heartbeat_ms"`
	IntervalMS  int64     `json:"interval_ms,omitempty"`
}

// Stale reports whether the record, read at now, is older than its rank
// would have let it grow, had it run: two intervals and a second for a
// call in flight (running or waiting: it publishes every interval then),
// two heartbeats otherwise (StaleAfter). Its rank stopped publishing
// while it should not have, and what the record says of the rank's call
// and of the peer it waits on is no longer so: a stopped rank's record
// says that it waits on a peer that is itself waiting, which is no cycle.
func (s *RankStatus) Stale(now time.Time) bool {
	if s.State == StatusExited {
		return false
	}
	return now.Sub(s.Updated) > s.StaleAfter()
}

// StaleAfter is the age past which the record is stale (see Stale).
func (s *RankStatus) StaleAfter() time.Duration {
	hb := time.Duration(s.HeartbeatMS) * time.Millisecond
	if hb <= 0 {
		hb = StatusHeartbeat
	}
	if s.State != StatusRunning && s.State != StatusWaiting {
		return 2 * hb
	}
	every := time.Duration(s.IntervalMS) * time.Millisecond
	if every <= 0 {
		every = DefaultStatusInterval
	}
	return min(2*hb, 2*every+time.Second)
}

// Encode returns s as it is stored.
func (s *RankStatus) Encode() []byte {
	b, _ := json.Marshal(s) // plain fields: cannot fail
	return b
}

// Field bounds of a decoded RankStatus.
const (
	maxStatusWorld = 1 << 24
	maxStatusStr   = 256
	maxStatusErr   = 512
)

// DecodeRankStatus decodes a status record read from the store, checking
// its size and fields: anything in the job can write the store, so a
// record is data to check, not to trust.
func DecodeRankStatus(b []byte) (RankStatus, error) {
	var s RankStatus
	if len(b) > MaxStatusLen {
		return s, fmt.Errorf("dist: status record of %d bytes (at most %d)", len(b), MaxStatusLen)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&s); err != nil {
		return RankStatus{}, fmt.Errorf("dist: status record: %w", err)
	}
	if d.More() {
		return RankStatus{}, errors.New("dist: status record: data after the record")
	}
	bad := func(what string, v any) (RankStatus, error) {
		return RankStatus{}, fmt.Errorf("dist: status record: bad %s %v", what, v)
	}
	switch {
	case s.WorldSize < 1 || s.WorldSize > maxStatusWorld:
		return bad("world size", s.WorldSize)
	case s.Rank < 0 || s.Rank >= s.WorldSize:
		return bad("rank", s.Rank)
	case s.WaitingOn < -1 || s.WaitingOn >= s.WorldSize:
		return bad("waiting_on", s.WaitingOn)
	case s.PID < 0:
		return bad("pid", s.PID)
	case s.Bytes < 0:
		return bad("bytes", s.Bytes)
	case s.InFlight < 0:
		return bad("in_flight", s.InFlight)
	case s.HeartbeatMS < 0 || s.HeartbeatMS > int64(time.Hour/time.Millisecond):
		return bad("heartbeat_ms", s.HeartbeatMS)
	case s.IntervalMS < 0 || s.IntervalMS > int64(time.Hour/time.Millisecond):
		return bad("interval_ms", s.IntervalMS)
	}
	switch s.State {
	case StatusIdle, StatusRunning, StatusWaiting, StatusFailed, StatusExited:
	default:
		return bad("state", strconv.Quote(s.State))
	}
	for _, f := range []struct {
		name string
		v    string
		max  int
	}{{"host", s.Host, maxStatusStr}, {"op", s.Op, maxStatusStr}, {"error", s.Error, maxStatusErr}} {
		if len(f.v) > f.max || !utf8.ValidString(f.v) {
			return bad(f.name, strconv.Quote(f.v))
		}
	}
	return s, nil
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// status is this rank's status now (Updated left zero); started is
// when it joined the job.
func (w *world) status(started time.Time) RankStatus {
	st := RankStatus{Rank: w.rank, WorldSize: w.size, Host: truncate(w.host, maxStatusStr), PID: os.Getpid(),
		State: StatusIdle, WaitingOn: -1, Since: started, HeartbeatMS: int64(StatusHeartbeat / time.Millisecond),
		IntervalMS: w.statusEvery.Milliseconds()}
	var (
		oldest   *callRec
		oldestID callID
		oldestG  uint32
		oldestAt time.Time
		failed   error
	)
	for _, g := range w.groups() {
		g.mu.Lock()
		s := g.mu.st
		st.Calls += uint64(s.next)
		st.InFlight += len(s.calls)
		if s.lastEnd.After(st.Since) {
			st.Since = s.lastEnd
		}
		if g.id == 0 && s.err != nil {
			failed = s.err
		}
		for id, r := range s.calls {
			start := s.started(id, r)
			if oldest == nil || start.Before(oldestAt) || start.Equal(oldestAt) && id < oldestID {
				c := *r
				oldest, oldestID, oldestG, oldestAt = &c, id, g.id, start
			}
		}
		g.mu.Unlock()
	}
	switch {
	case failed != nil:
		st.State, st.Error = StatusFailed, truncate(failed.Error(), maxStatusErr)
		if errors.Is(failed, ErrDestroyed) {
			st.State, st.Error = StatusExited, ""
		}
		var te *TimeoutError
		if errors.As(failed, &te) && len(te.Waiting) > 0 && te.Waiting[0] < w.size {
			// It gave up waiting on that rank: the other ranks' timeouts
			// follow the chain through it (WaitChain).
			st.WaitingOn = te.Waiting[0]
		}
	case oldest != nil:
		st.State, st.Group, st.Seq, st.Since = StatusRunning, oldestG, oldest.seq, oldestAt
		st.Op = oldest.c.op.String()
		switch oldest.kind {
		case kindSend:
			st.Op = "send"
		case kindRecv:
			st.Op = "recv"
		}
		if oldest.c.op != opNewGroup {
			st.Bytes = int64(oldest.c.count) * int64(oldest.c.dtype.Size())
		}
		if oldest.waitPeer >= 0 {
			st.State, st.WaitingOn = StatusWaiting, oldest.waitPeer
		}
	}
	return st
}

// startStatus starts publishing this rank's status every interval (see
// the top of this file); stopStatus stops it and publishes that the rank
// has exited.
func (w *world) startStatus(every time.Duration) {
	if w.store == nil {
		return
	}
	w.statusEvery = every
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	started := time.Now()
	go func() {
		defer close(done)
		w.publishStatus(ctx, every, started)
	}()
	w.stopStatus = func() {
		cancel()
		<-done
		st := w.status(started)
		// Exited, with why the job failed here if it did (and the rank
		// it gave up waiting on).
		st.State, st.Updated = StatusExited, time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_ = w.store.Set(ctx, StatusKey(w.rank), st.Encode())
	}
}

func (w *world) publishStatus(ctx context.Context, every time.Duration, started time.Time) {
	t := time.NewTicker(every)
	defer t.Stop()
	var (
		last    RankStatus
		lastPub time.Time
		key     = StatusKey(w.rank)
	)
	for {
		now := time.Now()
		st := w.status(started)
		if st != last || st.InFlight > 0 && now.Sub(st.Since) >= every || now.Sub(lastPub) >= StatusHeartbeat {
			last = st
			st.Updated = now
			sctx, cancel := context.WithTimeout(ctx, max(every, time.Second))
			if err := w.store.Set(sctx, key, st.Encode()); err == nil {
				lastPub = now
				w.statusOK.Store(time.Now().UnixNano())
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
