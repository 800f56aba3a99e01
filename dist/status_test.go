package dist

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/store"
	"github.com/godist/godist/tensor"
)

func TestRankStatusRoundTrip(t *testing.T) {
	now := time.Unix(1700000000, 123456789).UTC()
	s := RankStatus{Rank: 2, WorldSize: 3, Host: "10.0.0.2", PID: 42, State: StatusWaiting, Group: 0, Op: "all_reduce",
		Seq: 1043, Bytes: 8, Since: now.Add(-5 * time.Second), WaitingOn: 1, InFlight: 1, Calls: 1043, Updated: now, HeartbeatMS: 2000, IntervalMS: 500}
	b := s.Encode()
	if len(b) > MaxStatusLen {
		t.Fatalf("%d bytes", len(b))
	}
	got, err := DecodeRankStatus(b)
	if err != nil || got != s {
		t.Fatalf("round trip: %+v, %v\nwant %+v", got, err, s)
	}
	// Waiting, it publishes every interval (500 ms by default): stale
	// after two and a second.
	if got.Stale(now.Add(2 * time.Second)) {
		t.Errorf("waiting: stale after 2s with a 500ms interval")
	}
	if !got.Stale(now.Add(2*time.Second + time.Millisecond)) {
		t.Errorf("waiting: not stale after two intervals and a second")
	}
	got.IntervalMS = 5000 // but never beyond two heartbeats
	if got.Stale(now.Add(4*time.Second)) || !got.Stale(now.Add(4*time.Second+time.Millisecond)) {
		t.Errorf("waiting, with a 5s interval: not stale after two heartbeats")
	}
	got.State = StatusIdle
	if got.Stale(now.Add(4 * time.Second)) {
		t.Errorf("idle: stale after 4s with a 2s heartbeat")
	}
	if !got.Stale(now.Add(4*time.Second + time.Millisecond)) {
		t.Errorf("idle: not stale after two heartbeats")
	}
	got.State = StatusExited
	if got.Stale(now.Add(time.Hour)) {
		t.Errorf("an exited rank is never stale")
	}
}

// TestDecodeRankStatusBounds: a record is data anyone in the job can
// write; what is out of bounds is refused, not used.
func TestDecodeRankStatusBounds(t *testing.T) {
	ok := `{"rank":1,"world_size":3,"host":"h","pid":1,"state":"idle","since":"2024-01-01T00:00:00Z","waiting_on":-1,"in_flight":0,"calls":0,"updated":"2024-01-01T00:00:00Z","heartbeat_ms":2000}`
	if _, err := DecodeRankStatus([]byte(ok)); err != nil {
		t.Fatalf("valid record refused: %v", err)
	}
	for _, c := range []struct{ name, rec string }{
		{"too long", `{"rank":1,"world_size":3,"state":"idle","host":"` + strings.Repeat("x", MaxStatusLen) + `"}`},
		{"rank out of range", strings.Replace(ok, `"rank":1`, `"rank":3`, 1)},
		{"negative rank", strings.Replace(ok, `"rank":1`, `"rank":-1`, 1)},
		{"huge world", strings.Replace(ok, `"world_size":3`, `"world_size":100000000000`, 1)},
		{"zero world", strings.Replace(ok, `"world_size":3`, `"world_size":0`, 1)},
		{"waiting on outsider", strings.Replace(ok, `"waiting_on":-1`, `"waiting_on":7`, 1)},
		{"unknown state", strings.Replace(ok, `"state":"idle"`, `"state":"\u001b[2J"`, 1)},
		{"long host", strings.Replace(ok, `"host":"h"`, `"host":"`+strings.Repeat("h", 300)+`"`, 1)},
		{"negative bytes", strings.Replace(ok, `"pid":1`, `"pid":1,"bytes":-5`, 1)},
		{"bad heartbeat", strings.Replace(ok, `"heartbeat_ms":2000`, `"heartbeat_ms":-1`, 1)},
		{"bad interval", strings.Replace(ok, `"heartbeat_ms":2000`, `"heartbeat_ms":2000,"interval_ms":-1`, 1)},
		{"trailing data", ok + `{}`},
		{"not json", `rank=1`},
		{"wrong type", strings.Replace(ok, `"pid":1`, `"pid":"1"`, 1)},
	} {
		if s, err := DecodeRankStatus([]byte(c.rec)); err == nil {
			t.Errorf("%s: accepted as %+v", c.name, s)
		}
	}
}

func FuzzDecodeRankStatus(f *testing.F) {
	s := RankStatus{Rank: 0, WorldSize: 2, State: StatusRunning, Op: "barrier", WaitingOn: 1, HeartbeatMS: 2000}
	f.Add(s.Encode())
	f.Add([]byte(`{"rank":0,"world_size":1,"state":"idle","waiting_on":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeRankStatus(b)
		if err != nil {
			return
		}
		if s.Rank < 0 || s.Rank >= s.WorldSize || s.WaitingOn < -1 || s.WaitingOn >= s.WorldSize || len(s.Host) > maxStatusStr {
			t.Fatalf("accepted out of bounds: %+v", s)
		}
		again, err := DecodeRankStatus(s.Encode())
		if err != nil || again.Rank != s.Rank || again.State != s.State {
			t.Fatalf("re-encoded record: %+v, %v", again, err)
		}
	})
}

// TestStatusSnapshot: a rank blocked in a call reports the call, its
// sequence number, its size and the peer it waits on; then it publishes
// it to the store, and says it exited at Destroy.
func TestStatusSnapshot(t *testing.T) {
	gs := inprocGroups(2, time.Minute)
	st := store.NewMem()
	w := gs[0].world
	w.store, w.host = st, "h0"
	w.startStatus(20 * time.Millisecond)
	defer func() {
		for _, g := range gs {
			g.Destroy()
		}
	}()
	// Rank 0 enters a broadcast from rank 1, which never comes (yet).
	done := make(chan error, 1)
	x := tensor.Zeros(4)
	go func() { done <- gs[0].Broadcast(context.Background(), x, 1) }()
	var s RankStatus
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		b, err := st.Get(ctx, StatusKey(0))
		cancel()
		if err == nil {
			if s, err = DecodeRankStatus(b); err != nil {
				t.Fatal(err)
			}
			if s.State == StatusWaiting {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank 0 never published that it waits: %+v", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s.Op != "broadcast" || s.Seq != 1 || s.Bytes != 16 || s.WaitingOn != 1 || s.InFlight != 1 || s.Host != "h0" || s.WorldSize != 2 || s.Updated.IsZero() {
		t.Errorf("status %+v", s)
	}
	if err := gs[1].Broadcast(context.Background(), tensor.Zeros(4), 1); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w.stopStatus()
	b, _ := st.Get(context.Background(), StatusKey(0))
	if s, err := DecodeRankStatus(b); err != nil || s.State != StatusExited || s.Calls != 1 {
		t.Errorf("after stop: %+v, %v", s, err)
	}
}
