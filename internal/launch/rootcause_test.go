package launch

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Unix(1767225600, 0)

// ms is a time t0 + n ms.
func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// rec is a record of kind blaming peer, seen at ms(at) (0: no time_ns,
// as an older godist's or torchelastic's file).
func rec(kind Kind, peer, at int) *Record {
	r := &Record{Kind: kind, Peer: peer}
	if at != 0 {
		r.TimeNS = ms(at).UnixNano()
	}
	return r
}

func TestRootCause(t *testing.T) {
	lost := func(peer int) *Record { return &Record{Kind: PeerLost, Peer: peer} }
	cases := []struct {
		name string
		fs   []Failed
		want int
	}{
		{"none", nil, -1},
		{"one", []Failed{{Rank: 3}}, 0},
		{"no files: the first", []Failed{{Rank: 0}, {Rank: 1}}, 0},
		{"lost a peer that failed too", []Failed{{Rank: 0, Record: lost(1)}, {Rank: 1}}, 1},
		{"lost a peer that did not fail (here)", []Failed{{Rank: 0, Record: lost(5)}, {Rank: 1}}, 0},
		{"signaled", []Failed{{Rank: 0, Record: lost(1)}, {Rank: 2, Record: lost(0), Signaled: true}, {Rank: 1}}, 1},
		{"a chain", []Failed{{Rank: 2, Record: lost(1)}, {Rank: 1, Record: &Record{Kind: Aborted, Peer: 0}},
			{Rank: 0, Record: &Record{Kind: Other, Peer: -1, Message: "bad batch"}}}, 2},
		{"timeout on a failed peer", []Failed{{Rank: 0, Record: &Record{Kind: Timeout, Peer: 1}}, {Rank: 1}}, 1},
		{"a desync blames nobody", []Failed{{Rank: 0, Record: &Record{Kind: Desync, Peer: 1}}, {Rank: 1, Record: &Record{Kind: Desync, Peer: 0}}}, 0},
		{"each lost the other", []Failed{{Rank: 1, Record: lost(0)}, {Rank: 0, Record: lost(1)}}, 0},
	}
	for _, c := range cases {
		if got := RootCause(c.fs); got != c.want {
			t.Errorf("%s: RootCause = %d, want %d", c.name, got, c.want)
		}
	}
}

// TestOrder is issue 27, items 4 and 5: the failures of a job, as the
// launcher saw them (in the order it reaped them), ordered root cause
// first, then by when they happened.
func TestOrder(t *testing.T) {
	cases := []struct {
		name string
		fs   []Failed
		want []int // ranks
	}{
		{"by the time in the files, not the reaping", []Failed{
			{Rank: 2, Record: rec(Other, -1, 30), Exited: ms(31)},
			{Rank: 0, Record: rec(Other, -1, 10), Exited: ms(40)},
		}, []int{0, 2}},
		{"no time in the files: by the reaping", []Failed{
			{Rank: 2, Record: rec(Other, -1, 0), Exited: ms(31)},
			{Rank: 0, Record: rec(Other, -1, 0), Exited: ms(40)},
		}, []int{2, 0}},
		// Item 4: rank 2 is SIGKILLed; rank 0 sees it go and fails, and
		// the launcher, having reaped rank 0 first, stops the others at
		// 15 ms (rank 2 among them: it has not reaped it yet). Rank 1
		// dies of the SIGTERM; rank 3 sees rank 1 go before it learns of
		// rank 2, and fails blaming rank 1. Rank 2 is reaped last. Before,
		// with the time of the reaping and without the stopped rank 1,
		// rank 3 was the root cause.
		{"a SIGKILLed rank reaped after a survivor that lost a stopped rank", []Failed{
			{Rank: 0, Record: rec(PeerLost, 2, 10), Exited: ms(12)},
			{Rank: 1, StoppedAt: ms(15), Exited: ms(20)},
			{Rank: 3, Record: rec(PeerLost, 1, 30), StoppedAt: ms(15), Exited: ms(31)},
			{Rank: 2, Signaled: true, StoppedAt: ms(15), Exited: ms(40)},
		}, []int{2, 0, 1, 3}},
		{"the same, the launcher's SIGKILL reaching the corpse first", []Failed{
			{Rank: 0, Record: rec(PeerLost, 2, 10), Exited: ms(12)},
			{Rank: 1, StoppedAt: ms(15), Exited: ms(20)},
			{Rank: 3, Record: rec(PeerLost, 1, 30), StoppedAt: ms(15), Exited: ms(31)},
			{Rank: 2, StoppedAt: ms(15), Exited: ms(5040)},
		}, []int{2, 0, 1, 3}},
		{"a stopped rank's own error after the stop is not the cause", []Failed{
			{Rank: 1, Record: rec(Other, -1, 30), StoppedAt: ms(15), Exited: ms(31)},
			{Rank: 0, Record: rec(Other, -1, 10), Exited: ms(40)},
		}, []int{0, 1}},
		{"a stopped rank that had failed before the stop", []Failed{
			{Rank: 0, Record: rec(PeerLost, 1, 10), Exited: ms(12)},
			{Rank: 1, Record: rec(Other, -1, 8), StoppedAt: ms(15), Exited: ms(31)},
		}, []int{1, 0}},
		// A rank stuck (an endless loop): the others time out naming it,
		// and it dies of the launcher's SIGTERM.
		{"a live rank that the timeouts name", []Failed{
			{Rank: 1, Record: rec(Timeout, 2, 100), Exited: ms(101)},
			{Rank: 2, StoppedAt: ms(102), Exited: ms(103)},
			{Rank: 0, Record: rec(Timeout, 2, 101), StoppedAt: ms(102), Exited: ms(104)},
		}, []int{2, 1, 0}},
		// Item 5: rank 0, which serves the store, is SIGSTOPped. The
		// survivors time out naming it; the launcher stops the group,
		// finds rank 0 stopped, and kills it after the grace period.
		{"a frozen store host named by the timeouts", []Failed{
			{Rank: 1, Record: rec(Timeout, 0, 100), Exited: ms(101)},
			{Rank: 2, Record: rec(Timeout, 0, 101), StoppedAt: ms(102), Exited: ms(103)},
			{Rank: 0, StoppedAt: ms(102), Frozen: true, Exited: ms(5102)},
		}, []int{0, 1, 2}},
		// The same, the survivors unable to read the store: they name
		// their neighbours, or a cycle read from stale records.
		{"a frozen rank, the timeouts naming others", []Failed{
			{Rank: 2, Record: rec(Timeout, 1, 100), Exited: ms(101)},
			{Rank: 1, Record: rec(Timeout, 2, 101), StoppedAt: ms(102), Exited: ms(103)},
			{Rank: 0, StoppedAt: ms(102), Frozen: true, Exited: ms(5102)},
		}, []int{0, 2, 1}},
		{"a frozen rank is not the cause of a crash before the stop", []Failed{
			{Rank: 1, Signaled: true, Exited: ms(100)},
			{Rank: 2, Record: rec(PeerLost, 1, 99), StoppedAt: ms(102), Exited: ms(103)},
			{Rank: 0, StoppedAt: ms(102), Frozen: true, Exited: ms(5102)},
		}, []int{1, 2, 0}},
		{"every failure a consequence: the first before the stop", []Failed{
			{Rank: 1, Record: rec(PeerLost, 0, 10), Exited: ms(11)},
			{Rank: 0, Record: rec(PeerLost, 1, 13), StoppedAt: ms(12), Exited: ms(14)},
		}, []int{1, 0}},
	}
	for _, c := range cases {
		var got []int
		for _, i := range Order(c.fs) {
			got = append(got, c.fs[i].Rank)
		}
		if !slices.Equal(got, c.want) {
			at := Happened(c.fs)
			t.Errorf("%s: %v, want %v (happened %v, consequences %v)", c.name, got, c.want, at, Consequences(c.fs, at))
		}
	}
}

func TestHappened(t *testing.T) {
	fs := []Failed{
		{Rank: 0, Record: rec(PeerLost, 2, 10), Exited: ms(12)}, // its file
		{Rank: 1, Exited: ms(20)},                               // its exit
		{Rank: 2, Signaled: true, Exited: ms(40)},               // rank 0's report of it
		{Rank: 3, Record: rec(Other, -1, 50), Exited: ms(45)},   // a file later than the exit: the exit
		{Rank: 4, StoppedAt: ms(15), Frozen: true, Exited: ms(900)},
		{Rank: 5},
	}
	want := []time.Time{ms(10), ms(20), ms(10), ms(45), ms(15), {}}
	if got := Happened(fs); !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("Happened = %v, want %v", got, want)
	}
	// A frozen rank accounts for the timeouts: they bound nobody's time.
	fs = []Failed{
		{Rank: 1, Record: rec(Timeout, 2, 100), Exited: ms(101)},
		{Rank: 2, StoppedAt: ms(102), Exited: ms(103)},
		{Rank: 0, StoppedAt: ms(102), Frozen: true, Exited: ms(5102)},
	}
	want = []time.Time{ms(100), ms(103), ms(102)}
	if got := Happened(fs); !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("with a frozen rank, Happened = %v, want %v", got, want)
	}
	// But they bound the frozen one's.
	fs[0].Record.Peer = 0
	want = []time.Time{ms(100), ms(103), ms(100)}
	if got := Happened(fs); !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("with a frozen rank, Happened = %v, want %v", got, want)
	}
	if b := Blamed([]Failed{{Rank: 1, Record: rec(Timeout, 0, 1)}, {Rank: 2, Record: rec(PeerLost, 0, 2)}, {Rank: 3}}, 0); !slices.Equal(b, []int{1, 2}) {
		t.Errorf("Blamed = %v", b)
	}
}
