package dist_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/dist"
)

func TestWaitChain(t *testing.T) {
	now := time.Unix(1000, 0)
	fresh := now.Add(-time.Second)
	old := now.Add(-10 * time.Second)
	rec := func(r int, state string, on int, updated time.Time) dist.RankStatus {
		return dist.RankStatus{Rank: r, State: state, WaitingOn: on, Updated: updated, Since: now.Add(-3 * time.Second), Host: "h", PID: 100 + r, HeartbeatMS: 2000, Op: "all_reduce", Seq: 7}
	}
	for _, c := range []struct {
		name  string
		recs  []dist.RankStatus
		from  int
		chain []int
		why   string
	}{
		{"stopped peer", []dist.RankStatus{rec(1, dist.StatusWaiting, 2, old)}, 1, []int{1}, "rank 1 (h, pid 101) has not reported for 10s"},
		{"through a live rank", []dist.RankStatus{rec(2, dist.StatusWaiting, 1, fresh), rec(1, dist.StatusIdle, -1, old)}, 2, []int{2, 1}, "rank 1 (h, pid 101) has not reported"},
		{"behind", []dist.RankStatus{rec(2, dist.StatusWaiting, 3, fresh), rec(3, dist.StatusIdle, -1, fresh)}, 2, []int{2, 3}, "rank 3 is idle since 3s ago: it is behind"},
		{"running something else", []dist.RankStatus{rec(3, dist.StatusRunning, -1, fresh)}, 3, []int{3}, "rank 3 is running all_reduce #7"},
		{"cycle", []dist.RankStatus{rec(0, dist.StatusWaiting, 1, fresh), rec(1, dist.StatusWaiting, 2, fresh), rec(2, dist.StatusWaiting, 1, fresh)}, 0, []int{0, 1, 2}, "ranks 1, 2 wait on each other"},
		{"failed", []dist.RankStatus{{Rank: 4, State: dist.StatusFailed, Error: "boom", Updated: fresh, HeartbeatMS: 2000, WaitingOn: -1}}, 4, []int{4}, "rank 4 failed: boom"},
		{"no records", nil, 5, []int{5}, ""},
		{"through a rank that timed out and left", []dist.RankStatus{rec(2, dist.StatusWaiting, 0, fresh), rec(0, dist.StatusExited, 1, fresh), rec(1, dist.StatusWaiting, 2, old)}, 2, []int{2, 0, 1}, "rank 1 (h, pid 101) has not reported"},
		{"left without a timeout", []dist.RankStatus{rec(0, dist.StatusExited, -1, fresh)}, 0, []int{0}, "rank 0 left the job"},
		// Issue 27, item 5: rank 0 stopped 3 s ago, waiting on rank 1; its
		// record, younger than two heartbeats, was read as a cycle
		// ("ranks 1, 2, 0 wait on each other"). A rank whose call is in
		// flight publishes every interval: the record is stale.
		{"a stopped rank's record is no cycle", []dist.RankStatus{rec(1, dist.StatusWaiting, 2, fresh), rec(2, dist.StatusWaiting, 0, fresh),
			rec(0, dist.StatusWaiting, 1, now.Add(-3*time.Second))}, 1, []int{1, 2, 0}, "rank 0 (h, pid 100) has not reported for 3s"},
		{"nor running", []dist.RankStatus{rec(3, dist.StatusRunning, -1, now.Add(-3*time.Second))}, 3, []int{3}, "rank 3 (h, pid 103) has not reported for 3s"},
		{"idle that long is no news", []dist.RankStatus{rec(3, dist.StatusIdle, -1, now.Add(-3*time.Second))}, 3, []int{3}, "rank 3 is idle"},
	} {
		t.Run(c.name, func(t *testing.T) {
			byRank := map[int]dist.RankStatus{}
			for _, r := range c.recs {
				byRank[r.Rank] = r
			}
			chain, why := dist.WaitChain(c.from, func(r int) (dist.RankStatus, bool) { s, ok := byRank[r]; return s, ok }, now)
			if !slices.Equal(chain, c.chain) || (c.why == "") != (why == "") || !strings.Contains(why, c.why) {
				t.Fatalf("WaitChain = %v, %q; want %v, %q", chain, why, c.chain, c.why)
			}
		})
	}
}
