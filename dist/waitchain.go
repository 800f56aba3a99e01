package dist

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// WaitChain follows, from rank from (the peer a call is blocked on), the
// ranks' published status records (RankStatus.WaitingOn) to the rank the
// whole chain waits for, and says why that one does not answer. status
// returns a rank's record, if it has one. It is how a timeout names the
// rank at fault, not just its own peer: in a ring all-reduce with one rank
// stopped, most ranks wait on a live neighbour that itself waits.
//
// The chain ends at a rank whose record is stale (it stopped publishing:
// SIGSTOP, a hang outside Go, a lost host), missing, not waiting (idle or
// running something else: it is behind, or issued other calls), failed or
// exited for another reason than a timeout (a rank that timed out, and
// may have left since, is followed to the rank it gave up on), or at a
// rank already in the chain (a cycle). chain lists the
// ranks from from to that one; why is empty when the records say nothing.
func WaitChain(from int, status func(rank int) (RankStatus, bool), now time.Time) (chain []int, why string) {
	r := from
	for {
		if slices.Contains(chain, r) {
			return chain, fmt.Sprintf("ranks %s wait on each other", joinRanks(chain[slices.Index(chain, r):]))
		}
		chain = append(chain, r)
		s, ok := status(r)
		switch {
		case !ok:
			return chain, ""
		case s.Stale(now):
			return chain, fmt.Sprintf("rank %d (%s, pid %d) has not reported for %s: it is stopped (SIGSTOP, a debugger), hung outside Go, or its host is gone", r, s.Host, s.PID, now.Sub(s.Updated).Round(100*time.Millisecond))
		case (s.State == StatusFailed || s.State == StatusExited) && s.WaitingOn >= 0:
			// It gave up waiting on WaitingOn: follow on.
		case s.State == StatusFailed:
			return chain, fmt.Sprintf("rank %d failed: %s", r, s.Error)
		case s.State == StatusExited:
			return chain, fmt.Sprintf("rank %d left the job (Destroy)", r)
		case s.State != StatusWaiting || s.WaitingOn < 0:
			what := "is idle"
			if s.State == StatusRunning {
				what = fmt.Sprintf("is running %s #%d, not waiting on anyone", s.Op, s.Seq)
			}
			return chain, fmt.Sprintf("rank %d %s since %s ago: it is behind, or issued other calls than its peers", r, what, now.Sub(s.Since).Round(100*time.Millisecond))
		}
		r = s.WaitingOn
	}
}

func joinRanks(rs []int) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprint(r)
	}
	return strings.Join(parts, ", ")
}

// explainTimeout fills te's Chain and Cause from the ranks' status
// records in the job's store, reading for at most a second.
func (w *world) explainTimeout(te *TimeoutError) {
	if w.store == nil || len(te.Waiting) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	status := func(r int) (RankStatus, bool) {
		if r < 0 || r >= w.size {
			return RankStatus{}, false
		}
		if ok, err := w.store.Check(ctx, StatusKey(r)); err != nil || !ok {
			return RankStatus{}, false
		}
		b, err := w.store.Get(ctx, StatusKey(r))
		if err != nil {
			return RankStatus{}, false
		}
		s, err := DecodeRankStatus(b)
		return s, err == nil
	}
	te.Chain, te.Cause = WaitChain(te.Waiting[0], status, time.Now())
}
