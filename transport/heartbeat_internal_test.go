package transport

import (
	"slices"
	"testing"
	"time"
)

// TestWatchdog drives the watchdog's pure core through a script of ticks:
// heartbeats go to quiet peers only, a peer heard from is never lost, a
// silent one is lost once it has been silent for the timeout, and a pause
// of this process starts the count over.
func TestWatchdog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const timeout = 10 * time.Second // interval 2 s
	w := newWatchdog(timeout, 3, t0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type step struct {
		at     int
		counts []peerCounts
		beat   []int
		lost   []int
	}
	self := peerCounts{skip: true}
	steps := []step{
		// Peer 1 sends and is sent to; peer 2 is quiet both ways.
		{2, []peerCounts{self, {heard: 1, sent: 1}, {}}, []int{2}, nil},
		{4, []peerCounts{self, {heard: 2, sent: 2}, {}}, []int{2}, nil},
		{6, []peerCounts{self, {heard: 2, sent: 2}, {}}, []int{1, 2}, nil},
		{8, []peerCounts{self, {heard: 3, sent: 2}, {}}, []int{1, 2}, nil},
		// Peer 2 has been silent since the start (t0): lost at 10 s.
		{10, []peerCounts{self, {heard: 4, sent: 3}, {}}, nil, []int{2}},
		// Gone now: skipped.
		{12, []peerCounts{self, {heard: 5, sent: 4}, {skip: true}}, nil, nil},
		// A pause of 30 s (this process stopped): peer 1, silent through
		// it, is not blamed; the count starts over at 42.
		{42, []peerCounts{self, {heard: 5, sent: 4}, {skip: true}}, []int{1}, nil},
	}
	for s := 44; s < 52; s += 2 {
		steps = append(steps, step{s, []peerCounts{self, {heard: 5, sent: 4}, {skip: true}}, []int{1}, nil})
	}
	steps = append(steps, step{52, []peerCounts{self, {heard: 5, sent: 4}, {skip: true}}, nil, []int{1}})
	for _, s := range steps {
		beat, lost, silence := w.tick(at(s.at), s.counts)
		if !slices.Equal(beat, s.beat) || !slices.Equal(lost, s.lost) {
			t.Errorf("at %d s: heartbeats to %v, lost %v; want %v, %v", s.at, beat, lost, s.beat, s.lost)
		}
		for _, d := range silence {
			if d < timeout {
				t.Errorf("at %d s: lost after %v, less than the timeout", s.at, d)
			}
		}
	}
}
