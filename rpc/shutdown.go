package rpc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/godist/godist/rpc/internal/wire"
	"github.com/godist/godist/transport"
)

// Graceful shutdown is an agreement among all workers that no worker has
// work in flight, found the way distributed termination is detected:
// rounds led by rank 0. In each round every worker waits until it has no
// call pending and serves none, then reports that and its counts of
// messages sent and received; the leader declares the job quiet when
// every worker reported idle, the sums of sent and received messages
// are equal (nothing in flight), and they equal the previous round's
// (nothing happened in between). Until then workers keep serving, so a
// worker still calling others is answered.
//
// A worker waiting in the agreement watches the workers it waits on: the
// leader every other worker, the others the leader. It probes each of
// them every quarter of Options.Timeout (at most every second), and any
// message of the agreement from a worker (a report, a verdict, a probe,
// an answer) shows that it is there. A worker that is down, or that has
// sent nothing for Options.Timeout (a stopped or hung process, a
// partition), fails the agreement; so does a ctx that ends. The watcher's
// own stalls (its checks coming late: kept off the CPU) start the count
// again, so a loaded machine does not make it blame a live worker. The worker
// that finds the failure sends an abort naming the culprit to the
// leader, and the leader sends one to every worker, so that every
// worker's Shutdown returns naming the same worker rather than waiting
// for a verdict that will not come. A worker that is still working
// before its Shutdown answers probes, and is waited for.

type shutdownState struct {
	reports  map[uint64][]*shutdownMsg // the leader's, by round
	prev     [2]int64                  // the leader's last round's sums
	verdicts chan shutdownMsg          // a worker's
	failed   chan *ShutdownError       // the agreement cannot complete (the first reason)
	done     bool                      // the job is quiet (a.mu guards it)
}

const leader = 0

func (a *Agent) shutdownStateLocked() *shutdownState {
	if a.mu.shutdown == nil {
		a.mu.shutdown = &shutdownState{reports: map[uint64][]*shutdownMsg{}, verdicts: make(chan shutdownMsg, 4), failed: make(chan *ShutdownError, 1)}
	}
	return a.mu.shutdown
}

// Shutdown stops the agent (rpc.shutdown). Graceful waits until every
// worker has called Shutdown and no worker has calls in flight or being
// served (each worker's outstanding RRefs are released once every worker
// has called it), then stops. Not graceful stops at once: pending calls fail with ErrShutdown
// and running handlers' contexts end.
//
// A graceful Shutdown's wait is bounded by ctx and by Options.Timeout: a
// worker that died or left fails it at once; one that answers nothing
// for Options.Timeout while this one waits on it (a stopped or hung
// process, a partition) fails it then; so does a ctx that ends first
// (Options.Timeout negative: only ctx bounds the wait). The error is then
// a *ShutdownError naming the worker that kept the job from agreeing and
// the remedy (it wraps a *WorkerDownError for a worker that is gone),
// every other worker's graceful Shutdown fails naming the same worker,
// and the agent stops anyway. A worker that is only slow to reach
// Shutdown (still working, and answering) is waited for as long as ctx
// allows: give ctx a deadline when that should not be for ever.
//
// When the agent joined the job itself (Options.Group nil), Shutdown
// leaves it; otherwise the group stays usable.
func (a *Agent) Shutdown(ctx context.Context, graceful bool) error {
	a.mu.Lock()
	if a.mu.closed || a.mu.stopping {
		a.mu.Unlock()
		return nil
	}
	a.mu.stopping = true
	st := a.shutdownStateLocked()
	a.mu.Unlock()
	var err error
	if graceful {
		if serr := a.agree(ctx, st); serr != nil {
			a.abort(serr)
			err = serr
		}
	}
	a.close()
	return err
}

// agree runs the rounds until the leader says the job is quiet.
func (a *Agent) agree(ctx context.Context, st *shutdownState) *ShutdownError {
	// An abort that came before this worker's Shutdown (the leader's
	// diagnosis) names the culprit better than the leader's own clean
	// exit after it, which goneBefore would see.
	select {
	case e := <-st.failed:
		return e
	default:
	}
	if e := a.goneBefore(); e != nil {
		return e
	}
	w := a.watchPeers()
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for round := uint64(1); ; round++ {
		// Wait until this worker is idle.
		for a.serving.Load() > 0 || a.pendingCount() > 0 {
			select {
			case <-ctx.Done():
				return a.shutdownErr(a.self.ID, fmt.Sprintf("was still busy when ctx ended (%d calls pending: %v; %d being served): let its calls finish before Shutdown, or give ctx a later deadline", a.pendingCount(), a.pendingCalls(), a.serving.Load()), ctx.Err())
			case e := <-st.failed:
				return e
			case now := <-tick.C:
				if e := w.check(now); e != nil {
					return e
				}
			case <-time.After(200 * time.Microsecond):
			}
		}
		rep := shutdownMsg{Kind: shutReport, Round: round, Idle: true, Sent: a.sent.Load(), Recv: a.recv.Load()}
		if err := a.sendShutdown(ctx, leader, rep); err != nil {
			if werr := a.downErr(leader); werr != nil {
				err = werr
			}
			return a.shutdownErr(leader, fmt.Sprintf("could not be sent this worker's report (round %d)", round), err)
		}
		done, e := a.awaitVerdict(ctx, st, round, w, tick)
		if e != nil {
			return e
		}
		if done {
			return nil
		}
		if round == 1 {
			// A verdict comes only once every worker has reported, so
			// every worker is in Shutdown: no call will come that needs
			// this worker's RRefs (PyTorch deletes its user RRefs after
			// its barrier too). Released before, a worker that reached
			// Shutdown early took the handles of calls it was still
			// serving, and the owners' own handles that later calls
			// return. The releases count in the next round's messages,
			// so the leader cannot find the job quiet before they land
			// (it never is in round 1).
			a.rrefs.releaseAll()
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// awaitVerdict waits for the leader's verdict on round: whether the job
// is quiet, or why the agreement failed.
func (a *Agent) awaitVerdict(ctx context.Context, st *shutdownState, round uint64, w *peerWatch, tick *time.Ticker) (bool, *ShutdownError) {
	for {
		var e *ShutdownError
		select {
		case v := <-st.verdicts:
			if v.Round != round {
				continue
			}
			return v.Done, nil
		case e = <-st.failed:
		case <-ctx.Done():
			e = a.lateErr(ctx, st, round)
		case now := <-tick.C:
			if e = w.check(now); e == nil {
				continue
			}
		}
		// A quiet verdict that came with the failure wins: the job agreed,
		// and the failure is a worker leaving after it.
		if a.quiet(st) {
			return true, nil
		}
		return false, e
	}
}

func (a *Agent) quiet(st *shutdownState) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return st.done
}

// goneBefore fails the agreement at once when a worker went down before
// this worker's Shutdown: it cannot take part. It names a worker that
// died before one that closed cleanly (the leader closes after it has
// given up on a dead one), the lowest rank among either.
func (a *Agent) goneBefore() *ShutdownError {
	a.mu.Lock()
	ranks := make([]int, 0, len(a.mu.down))
	for r := range a.mu.down {
		ranks = append(ranks, r)
	}
	clean := func(r int) bool { return errors.Is(a.mu.down[r], transport.ErrPeerClosed) }
	sort.Slice(ranks, func(i, j int) bool {
		if ci, cj := clean(ranks[i]), clean(ranks[j]); ci != cj {
			return cj
		}
		return ranks[i] < ranks[j]
	})
	var werr error
	if len(ranks) > 0 {
		werr = a.mu.down[ranks[0]]
	}
	a.mu.Unlock()
	if werr == nil {
		return nil
	}
	return a.goneErr(ranks[0], werr)
}

func (a *Agent) goneErr(r int, werr error) *ShutdownError {
	return a.shutdownErr(r, "died or left before every worker agreed that the job was quiet", werr)
}

// lateErr says who this worker was still waiting for in round when ctx
// ended.
func (a *Agent) lateErr(ctx context.Context, st *shutdownState, round uint64) *ShutdownError {
	if a.self.ID != leader {
		return a.shutdownErr(leader, fmt.Sprintf("gave no verdict for round %d before ctx ended (the workers did not all reach Shutdown, or the leader still waits for one): call Shutdown on every worker, with a ctx whose deadline the slowest makes", round), ctx.Err())
	}
	a.mu.Lock()
	reps := st.reports[round]
	var missing []int
	for r := range a.ep.Size() {
		if r != a.self.ID && (len(reps) == 0 || reps[r] == nil) {
			missing = append(missing, r)
		}
	}
	a.mu.Unlock()
	if len(missing) == 0 {
		return a.shutdownErr(a.self.ID, fmt.Sprintf("had every report of round %d but no verdict when ctx ended", round), ctx.Err())
	}
	also := ""
	if len(missing) > 1 {
		also = fmt.Sprintf(" (nor had %s)", a.names(missing[1:]))
	}
	return a.shutdownErr(missing[0], fmt.Sprintf("had not reported in round %d when ctx ended%s: the workers did not all reach Shutdown, or had calls in flight; call Shutdown on every worker, with a ctx whose deadline the slowest makes", round, also), ctx.Err())
}

func (a *Agent) names(ranks []int) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = fmt.Sprintf("%s (rank %d)", a.name(r), r)
	}
	return strings.Join(s, ", ")
}

func (a *Agent) shutdownErr(r int, reason string, err error) *ShutdownError {
	return &ShutdownError{Self: a.self.Name, Worker: a.name(r), Rank: r, Reason: reason, Err: err}
}

// peerWatch is a waiting worker's watch on the workers it waits on.
type peerWatch struct {
	a     *Agent
	peers []int
	since time.Time     // the wait began, or this worker's last stall ended
	limit time.Duration // Options.Timeout; <= 0: none
	every time.Duration // between probes
	last  time.Time     // the previous check
}

func (a *Agent) watchPeers() *peerWatch {
	w := &peerWatch{a: a, since: time.Now(), limit: a.timeout, every: time.Second}
	if w.limit > 0 {
		w.every = min(max(w.limit/4, time.Millisecond), time.Second)
	}
	switch {
	case a.self.ID == leader:
		for r := range a.ep.Size() {
			if r != leader {
				w.peers = append(w.peers, r)
			}
		}
	case a.ep.Size() > 1:
		w.peers = []int{leader}
	}
	return w
}

// check fails the wait when a watched worker has sent nothing for the
// limit, and probes the others.
func (w *peerWatch) check(now time.Time) *ShutdownError {
	if w.limit <= 0 {
		return nil
	}
	a := w.a
	silent := w.silent(now, func(r int) time.Time { return time.Unix(0, a.heard[r].Load()) })
	for _, r := range w.peers {
		if slices.Contains(silent, r) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.every)
		a.sendShutdown(ctx, r, shutdownMsg{Kind: shutProbe})
		cancel()
	}
	if len(silent) == 0 {
		return nil
	}
	also := ""
	if len(silent) > 1 {
		also = fmt.Sprintf("; so did %s", a.names(silent[1:]))
	}
	return a.shutdownErr(silent[0], fmt.Sprintf("answered nothing for %v, the Options.Timeout of %s%s: it is stopped (SIGSTOP, a debugger), hung, or cut off; resume or kill it, and raise Options.Timeout if it is only slow", w.limit, a.self.Name, also), context.DeadlineExceeded)
}

// silent returns the watched workers that have sent nothing for the
// limit at now (heard gives when each was last heard from). A check that
// comes more than two probe intervals after the one before says that this
// worker was kept off its CPU meanwhile: the peers' messages may sit
// unread, and the silence it would count is partly its own, so the count
// starts again from now (under the race detector on a busy machine a
// process was seen starved for 330 ms).
func (w *peerWatch) silent(now time.Time, heard func(r int) time.Time) []int {
	if !w.last.IsZero() && now.Sub(w.last) > 2*w.every {
		w.since = now
	}
	w.last = now
	var out []int
	for _, r := range w.peers {
		last := heard(r)
		if last.Before(w.since) {
			last = w.since
		}
		if now.Sub(last) > w.limit {
			out = append(out, r)
		}
	}
	return out
}

// abort tells the others that the agreement failed, and why: the leader
// tells every worker, a worker the leader (unless the failure came from
// it). Each send is bounded, and they go out together.
func (a *Agent) abort(e *ShutdownError) {
	finder := a.self.ID
	if e.finder != "" {
		finder = e.finderRank
	}
	m := shutdownMsg{Kind: shutAbort, Culprit: int64(e.Rank), Finder: int64(finder), Reason: e.Reason}
	var wd *WorkerDownError
	switch {
	case errors.As(e.Err, &wd):
		m.Cause = causeDown
		if wd.Err != nil {
			m.Detail = wd.Err.Error()
		}
	case errors.Is(e.Err, context.DeadlineExceeded):
		m.Cause = causeDeadline
	case errors.Is(e.Err, context.Canceled):
		m.Cause = causeCanceled
	case e.Err != nil:
		m.Detail = e.Err.Error()
	}
	var to []int
	switch {
	case a.self.ID == leader:
		for r := range a.ep.Size() {
			to = append(to, r)
		}
	case finder != leader:
		to = []int{leader}
	}
	var wg sync.WaitGroup
	for _, r := range to {
		if r == a.self.ID || r == e.Rank || r == finder || a.downErr(r) != nil {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), min(a.replyTimeout(), time.Second))
			defer cancel()
			if err := a.sendShutdown(ctx, r, m); err != nil {
				a.log.Warn("rpc: shutdown abort not sent", "to", r, "err", err)
			}
		})
	}
	wg.Wait()
}

// abortErr is the failure an abort from src says.
func (a *Agent) abortErr(src int, m shutdownMsg) *ShutdownError {
	r, f := int(m.Culprit), int(m.Finder)
	var err error
	switch m.Cause {
	case causeDown:
		err = &WorkerDownError{Worker: a.name(r), Rank: r, Err: errors.New(m.Detail)}
	case causeDeadline:
		err = context.DeadlineExceeded
	case causeCanceled:
		err = context.Canceled
	default:
		err = errors.New(m.Detail)
	}
	e := a.shutdownErr(r, m.Reason, err)
	if f < 0 || f >= a.ep.Size() {
		f = src
	}
	if f != r {
		e.finder, e.finderRank = a.name(f), f
	}
	return e
}

func (a *Agent) pendingCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.mu.pending)
}

func (a *Agent) sendShutdown(ctx context.Context, to int, m shutdownMsg) error {
	if to == a.self.ID {
		a.handleShutdown(to, m)
		return nil
	}
	var e wire.Encoder
	if err := e.Encode(m); err != nil {
		return err
	}
	return a.ep.SendMessage(ctx, to, key(tagShutdown, 0), 0, e.Parts()...)
}

func (a *Agent) onShutdown(src int, msg []byte) {
	var m shutdownMsg
	d, err := wire.NewDecoder(msg, nil)
	if err == nil {
		if err = d.Decode(&m); err == nil {
			err = d.Finish()
		}
	}
	if err != nil {
		a.log.Warn("rpc: bad shutdown message", "from", src, "err", err)
		return
	}
	if src >= 0 && src < len(a.heard) {
		a.heard[src].Store(time.Now().UnixNano())
	}
	a.handleShutdown(src, m)
}

// handleShutdown takes a report (at the leader), a verdict, a probe, or
// an abort. It runs on a connection's reader and must not block.
func (a *Agent) handleShutdown(src int, m shutdownMsg) {
	switch m.Kind {
	case shutVerdict:
		a.onVerdict(src, m)
	case shutReport:
		a.onReport(src, m)
	case shutProbe:
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), a.replyTimeout())
			defer cancel()
			a.sendShutdown(ctx, src, shutdownMsg{Kind: shutAck})
		}()
	case shutAbort:
		if src != leader && a.self.ID != leader {
			return // only the leader tells workers
		}
		a.mu.Lock()
		st := a.shutdownStateLocked() // an abort before this worker's Shutdown fails it at once
		done := st.done
		a.mu.Unlock()
		if done {
			return
		}
		select {
		case st.failed <- a.abortErr(src, m):
		default:
		}
	}
}

func (a *Agent) onVerdict(src int, m shutdownMsg) {
	if src != leader {
		return
	}
	a.mu.Lock()
	st := a.mu.shutdown
	if st != nil && m.Done {
		st.done = true
	}
	a.mu.Unlock()
	if st != nil {
		select {
		case st.verdicts <- m:
		default:
		}
	}
}

func (a *Agent) onReport(src int, m shutdownMsg) {
	if a.self.ID != leader {
		return
	}
	a.mu.Lock()
	st := a.mu.shutdown
	if st == nil {
		// A report before this leader called Shutdown: keep it.
		st = a.shutdownStateLocked()
	}
	reps := st.reports[m.Round]
	if len(reps) == 0 {
		// The job's size, not len(a.workers): a report can come before
		// this agent's Init has learned the workers.
		reps = make([]*shutdownMsg, a.ep.Size())
	}
	if src < 0 || src >= len(reps) {
		a.mu.Unlock()
		return
	}
	mm := m
	reps[src] = &mm
	st.reports[m.Round] = reps
	for _, r := range reps {
		if r == nil {
			a.mu.Unlock()
			return
		}
	}
	delete(st.reports, m.Round)
	var sent, recv int64
	idle := true
	for _, r := range reps {
		sent += r.Sent
		recv += r.Recv
		idle = idle && r.Idle
	}
	done := idle && sent == recv && m.Round > 1 && st.prev == [2]int64{sent, recv}
	st.prev = [2]int64{sent, recv}
	st.done = st.done || done
	a.mu.Unlock()
	v := shutdownMsg{Kind: shutVerdict, Round: m.Round, Done: done}
	// The others first, this worker last: once the leader returns from
	// Shutdown it may close its connections, and each worker must have its
	// verdict before that (one connection delivers in order).
	for i := range a.ep.Size() {
		r := (a.self.ID + 1 + i) % a.ep.Size()
		ctx, cancel := context.WithTimeout(context.Background(), a.replyTimeout())
		if err := a.sendShutdown(ctx, r, v); err != nil {
			a.log.Warn("rpc: shutdown verdict not sent", "to", r, "err", err)
		}
		cancel()
	}
}

// shutdownPeerDown fails a graceful shutdown in progress when a worker
// dies. A worker that closed cleanly (Bye) after the job agreed it was
// quiet is only leaving as this one is about to: the leader sends every
// verdict before it closes, and a connection delivers in order, so a
// clean close of any worker before this one has its verdict means the
// job is quiet only if the leader says so; the wait goes on for it. A
// clean close of the leader itself before its verdict arrived, or any
// crash, fails the shutdown. (A worker that went down before this one's
// Shutdown fails it as it begins: goneBefore.)
func (a *Agent) shutdownPeerDown(r int, err error) {
	a.mu.Lock()
	st := a.mu.shutdown
	stopping := a.mu.stopping
	done := st != nil && st.done
	a.mu.Unlock()
	if st == nil || !stopping || done {
		return
	}
	if errors.Is(err, transport.ErrPeerClosed) && r != leader && a.self.ID != leader {
		return
	}
	select {
	case st.failed <- a.goneErr(r, err):
	default:
	}
}

// close stops the agent at once.
func (a *Agent) close() {
	a.mu.Lock()
	if a.mu.closed {
		a.mu.Unlock()
		return
	}
	a.mu.closed = true
	pending := a.mu.pending
	a.mu.pending = map[uint64]*call{}
	a.mu.Unlock()
	for _, c := range pending {
		c.complete(nil, ErrShutdown)
	}
	a.detach()
	if a.ownG {
		a.group.Destroy()
	}
}
