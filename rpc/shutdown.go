package rpc

import (
	"context"
	"errors"
	"fmt"
	"github.com/godist/godist/transport"
	"time"

	"github.com/godist/godist/rpc/internal/wire"
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

// shutdownMsg is a report (worker to leader) or a verdict (leader to
// workers).
type shutdownMsg struct {
	Verdict    bool
	Round      uint64
	Idle       bool
	Sent, Recv int64
	Done       bool
}

type shutdownState struct {
	round    uint64
	reports  map[uint64][]*shutdownMsg // the leader's, by round
	prev     [2]int64                  // the leader's last round's sums
	verdicts chan shutdownMsg          // a worker's
	failed   chan error                // a worker died during shutdown
	done     bool                      // the job is quiet (a.mu guards it)
}

const leader = 0

func (a *Agent) shutdownStateLocked() *shutdownState {
	if a.mu.shutdown == nil {
		a.mu.shutdown = &shutdownState{reports: map[uint64][]*shutdownMsg{}, verdicts: make(chan shutdownMsg, 4), failed: make(chan error, 1)}
	}
	return a.mu.shutdown
}

// Shutdown stops the agent (rpc.shutdown). Graceful waits until every
// worker has called Shutdown and no worker has calls in flight or being
// served (each worker's outstanding RRefs are released first), then
// stops; ctx bounds the wait, and when it ends, or a worker dies, the
// agent stops anyway and says why. Not graceful stops at once: pending
// calls fail with ErrShutdown and running handlers' contexts end.
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
		a.rrefs.releaseAll()
		err = a.agree(ctx, st)
	}
	a.close()
	return err
}

// agree runs the rounds until the leader says the job is quiet.
func (a *Agent) agree(ctx context.Context, st *shutdownState) error {
	for round := uint64(1); ; round++ {
		// Wait until this worker is idle.
		for a.serving.Load() > 0 || a.pendingCount() > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("rpc: graceful shutdown of %s: still busy (%d calls pending: %v; %d being served): %w", a.self.Name, a.pendingCount(), a.pendingCalls(), a.serving.Load(), ctx.Err())
			case err := <-st.failed:
				return err
			case <-time.After(200 * time.Microsecond):
			}
		}
		rep := shutdownMsg{Round: round, Idle: true, Sent: a.sent.Load(), Recv: a.recv.Load()}
		if err := a.sendShutdown(ctx, leader, rep); err != nil {
			return fmt.Errorf("rpc: graceful shutdown of %s: reporting to the leader %s: %w", a.self.Name, a.name(leader), err)
		}
		var v shutdownMsg
		for {
			select {
			case v = <-st.verdicts:
			case <-ctx.Done():
				return fmt.Errorf("rpc: graceful shutdown of %s: the workers did not all reach Shutdown (round %d): %w", a.self.Name, round, ctx.Err())
			case err := <-st.failed:
				// A verdict that came with the failure wins.
				select {
				case v = <-st.verdicts:
				default:
					return err
				}
			}
			if v.Round == round {
				break
			}
		}
		if v.Done {
			return nil
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
		}
	}
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
	a.handleShutdown(src, m)
}

// handleShutdown takes a report (at the leader) or a verdict.
func (a *Agent) handleShutdown(src int, m shutdownMsg) {
	if m.Verdict {
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
		return
	}
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
	v := shutdownMsg{Verdict: true, Round: m.Round, Done: done}
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
// crash, fails the shutdown.
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
	case st.failed <- fmt.Errorf("rpc: graceful shutdown of %s: %w", a.self.Name, err):
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
