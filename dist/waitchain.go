package dist

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/godist/godist/store"
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
// records in the job's store, reading for at most a second. When the
// store does not answer (it took no status record for a while, or does
// not answer within that second) and a rank serves it, the chain ends at
// that rank (storeHostChain): stopped (SIGSTOP), it stops every rank, and
// the records, which would have named it, cannot be read.
func (w *world) explainTimeout(te *TimeoutError) {
	if w.store == nil || len(te.Waiting) == 0 {
		return
	}
	now := time.Now()
	if w.storeUnanswered(now) {
		te.Chain, te.Cause, te.StoreSilent = storeHostChain(te.Waiting[:1], w.storeHost)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	silent := false
	status := func(r int) (RankStatus, bool) {
		if r < 0 || r >= w.size {
			return RankStatus{}, false
		}
		ok, err := w.store.Check(ctx, StatusKey(r))
		if err != nil || !ok {
			silent = silent || storeSilent(err)
			return RankStatus{}, false
		}
		b, err := w.store.Get(ctx, StatusKey(r))
		if err != nil {
			silent = silent || storeSilent(err)
			return RankStatus{}, false
		}
		s, err := DecodeRankStatus(b)
		return s, err == nil
	}
	te.Chain, te.Cause = WaitChain(te.Waiting[0], status, now)
	if silent && te.Cause == "" && w.storeHost >= 0 && w.storeHost != w.rank {
		te.Chain, te.Cause, te.StoreSilent = storeHostChain(te.Chain, w.storeHost)
	}
}

// storeUnanswered reports whether, by now, the store has taken no status
// record of this rank's for longer than a live one lets pass (a
// heartbeat, and two of the publisher's tries at their longest), while a
// rank that is not this one serves it.
func (w *world) storeUnanswered(now time.Time) bool {
	last := w.statusOK.Load()
	if w.storeHost < 0 || w.storeHost == w.rank || w.statusEvery <= 0 || last == 0 {
		return false
	}
	return now.Sub(time.Unix(0, last)) > StatusHeartbeat+2*max(w.statusEvery, time.Second)
}

// storeSilent reports whether a store call's err says the store did not
// answer (its host stopped, or hung), rather than that it is gone.
func storeSilent(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrUnresponsive)
}

// storeHostChain ends chain, the ranks followed so far, at host, the rank
// that serves the store, which did not answer, and says so.
func storeHostChain(chain []int, host int) ([]int, string, bool) {
	out := slices.Clone(chain)
	if len(out) == 0 || out[len(out)-1] != host {
		out = append(out, host)
	}
	return out, fmt.Sprintf("the job's store, which rank %d serves, does not answer: rank %d stopped responding (SIGSTOP, a debugger, a hang outside Go) or its host is gone, and every rank waits on it", host, host), true
}
