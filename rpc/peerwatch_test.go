package rpc

import (
	"slices"
	"testing"
	"time"
)

// TestPeerWatchSilent: a watched worker is silent once it has sent
// nothing for the limit; a check that comes late (this worker was kept
// off its CPU) starts the count again, so a stall of the watcher's own
// does not blame a peer, and a peer that stays quiet is blamed a limit
// after the stall.
func TestPeerWatchSilent(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	heardOne := at(0) // worker 1 answers; worker 2 never does after the start
	w := &peerWatch{peers: []int{1, 2}, since: t0, limit: 400 * time.Millisecond, every: 100 * time.Millisecond}
	heard := func(r int) time.Time {
		if r == 1 {
			return heardOne
		}
		return time.Time{}
	}
	check := func(ms int, want ...int) {
		t.Helper()
		if ms <= 1300 {
			heardOne = at(ms - 50) // worker 1 answers until 1250 ms
		}
		if got := w.silent(at(ms), heard); !slices.Equal(got, want) {
			t.Errorf("at %d ms: silent %v, want %v", ms, got, want)
		}
	}
	check(100)
	check(200)
	check(300)
	// Starved from 300 to 900 ms: without the restart worker 2 (and the
	// answers of worker 1 left unread) would be past the limit.
	check(900)
	check(1000)
	check(1100)
	check(1200)
	check(1300)
	check(1400, 2) // 500 ms after the restart: worker 2 is silent
	check(1500, 2)
	check(1600, 2)
	check(1700, 1, 2) // worker 1 stopped answering at 1250 ms
	// On time all along, worker 2 is blamed at the limit.
	w2 := &peerWatch{peers: []int{2}, since: t0, limit: 400 * time.Millisecond, every: 100 * time.Millisecond}
	for ms := 100; ms <= 400; ms += 100 {
		if got := w2.silent(at(ms), heard); len(got) != 0 {
			t.Errorf("on time, at %d ms: silent %v", ms, got)
		}
	}
	if got := w2.silent(at(500), heard); !slices.Equal(got, []int{2}) {
		t.Errorf("on time, at 500 ms: silent %v, want [2]", got)
	}
}
