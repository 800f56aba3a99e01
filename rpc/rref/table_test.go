package rref

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// cluster is a few Tables and a hand-driven network for the scenario
// tests: messages wait in q until a test delivers them, in the order it
// chooses.
type cluster struct {
	t       *testing.T
	tabs    []*Table
	q       []Msg
	deleted map[RRefID]int
}

func newCluster(t *testing.T, n int) *cluster {
	c := &cluster{t: t, deleted: map[RRefID]int{}}
	for i := range n {
		c.tabs = append(c.tabs, NewTable(WorkerID(i)))
	}
	return c
}

func (c *cluster) w(i WorkerID) *Table { return c.tabs[i] }

func (c *cluster) send(out []Msg) {
	c.t.Helper()
	for _, m := range out {
		if m.To == m.From {
			c.t.Fatalf("%v returned a message to itself", m)
		}
	}
	c.q = append(c.q, out...)
	c.collect()
}

func (c *cluster) collect() {
	for _, t := range c.tabs {
		for _, id := range t.Deleted() {
			c.deleted[id]++
		}
	}
}

// next delivers the first queued message of kind k (any kind if 0) and
// returns it.
func (c *cluster) next(k Kind) Msg {
	c.t.Helper()
	i := slices.IndexFunc(c.q, func(m Msg) bool { return k == 0 || m.Kind == k })
	if i < 0 {
		c.t.Fatalf("no %v message queued; queue %v", k, c.q)
	}
	m := c.q[i]
	c.q = slices.Delete(c.q, i, i+1)
	c.send(c.tabs[m.To].Handle(m))
	return m
}

func (c *cluster) drain() {
	c.t.Helper()
	for len(c.q) > 0 {
		c.next(0)
	}
}

func (c *cluster) expectQueued(kinds ...Kind) {
	c.t.Helper()
	var got []Kind
	for _, m := range c.q {
		got = append(got, m.Kind)
	}
	if !slices.Equal(got, kinds) {
		c.t.Fatalf("queued %v, want kinds %v", c.q, kinds)
	}
}

func (c *cluster) expectDeleted(id RRefID, n int) {
	c.t.Helper()
	c.collect()
	if c.deleted[id] != n {
		c.t.Fatalf("%v deleted %d times, want %d", id, c.deleted[id], n)
	}
}

func (c *cluster) expectEmpty() {
	c.t.Helper()
	c.drain()
	for _, t := range c.tabs {
		if !t.Empty() {
			c.t.Fatalf("not empty at the end: %v", t)
		}
	}
}

func TestRemote(t *testing.T) {
	c := newCluster(t, 2)
	id, f, err := c.w(1).CreateRemote(0)
	if err != nil {
		t.Fatal(err)
	}
	if id.Creator != 1 || f.Creator != 1 {
		t.Fatalf("CreateRemote minted %v %v, want both created by worker1", id, f)
	}
	if c.w(1).Confirmed(id, f) {
		t.Fatal("confirmed before the owner saw the call")
	}
	if err := c.w(0).AcceptRemote(1, id, f); err != nil {
		t.Fatal(err)
	}
	c.send(c.w(1).ConfirmRemote(id, f))
	if !c.w(1).Confirmed(id, f) {
		t.Fatal("not confirmed after the reply")
	}
	c.send(c.w(1).Release(id, f))
	c.expectQueued(UserDelete)
	c.expectDeleted(id, 0)
	c.drain()
	c.expectDeleted(id, 1)
	c.expectEmpty()
}

func TestRemoteToSelf(t *testing.T) {
	c := newCluster(t, 1)
	id, f := must2(t)(c.w(0).CreateRemote(0))
	if !c.w(0).Confirmed(id, f) {
		t.Fatal("a remote to self is an owner handle, confirmed at once")
	}
	if err := c.w(0).AcceptRemote(0, id, f); err != nil {
		t.Fatalf("AcceptRemote to self: %v", err)
	}
	c.send(c.w(0).ConfirmRemote(id, f))
	c.send(c.w(0).Release(id, f))
	c.expectDeleted(id, 1)
	c.send(c.w(0).Release(id, f)) // twice: no-op
	c.expectDeleted(id, 1)
	c.expectEmpty()
}

func must2(t *testing.T) func(RRefID, ForkID, error) (RRefID, ForkID) {
	return func(id RRefID, f ForkID, err error) (RRefID, ForkID) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return id, f
	}
}

// The owner makes an RRef from a local value and passes it to a user: the
// owner counts the child at once, the user is confirmed on arrival.
func TestOwnerCreatedShared(t *testing.T) {
	c := newCluster(t, 2)
	id, local := c.w(0).NewOwned()
	child := okF(t)(c.w(0).Fork(id, local, 1))
	c.send(c.w(0).Release(id, local))
	c.expectDeleted(id, 0) // the child in flight keeps it
	c.send(okM(t)(c.w(1).ReceiveFork(0, 0, id, child)))
	c.expectQueued()
	if !c.w(1).Confirmed(id, child) {
		t.Fatal("a fork from the owner is confirmed on arrival")
	}
	c.send(c.w(1).Release(id, child))
	c.drain()
	c.expectDeleted(id, 1)
	c.expectEmpty()
}

func okF(t *testing.T) func(ForkID, error) ForkID { return must[ForkID](t) }
func okM(t *testing.T) func([]Msg, error) []Msg   { return must[[]Msg](t) }

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// remote creates the RRef id with handle f on user and owner, confirmed.
func (c *cluster) remote(user, owner WorkerID) (RRefID, ForkID) {
	c.t.Helper()
	id, f := must2(c.t)(c.w(user).CreateRemote(owner))
	if err := c.w(owner).AcceptRemote(user, id, f); err != nil {
		c.t.Fatal(err)
	}
	c.send(c.w(user).ConfirmRemote(id, f))
	return id, f
}

// A passes its RRef to B and releases it at once: A's fork stays counted
// (pending child) until B's fork is.
func TestForkUserToUser(t *testing.T) {
	c := newCluster(t, 3)
	id, fa := c.remote(1, 0)
	fb := okF(t)(c.w(1).Fork(id, fa, 2))
	c.send(c.w(1).Release(id, fa))
	c.expectQueued() // deferred: a pending child
	c.send(okM(t)(c.w(2).ReceiveFork(1, 0, id, fb)))
	c.expectQueued(ForkRequest)
	c.next(ForkRequest)
	c.expectQueued(ForkAccept)
	c.next(ForkAccept)
	if !c.w(2).Confirmed(id, fb) {
		t.Fatal("B not confirmed after ForkAccept")
	}
	c.expectQueued(ChildAccept)
	c.next(ChildAccept)
	c.expectQueued(UserDelete) // A's delete, released now
	c.drain()
	c.expectDeleted(id, 0) // B holds it
	c.send(c.w(2).Release(id, fb))
	c.drain()
	c.expectDeleted(id, 1)
	c.expectEmpty()
}

// A→B→C, with everyone releasing early and C's fork request overtaking
// B's: the value lives until C releases.
func TestForkChain(t *testing.T) {
	c := newCluster(t, 4)
	id, fa := c.remote(1, 0)
	fb := okF(t)(c.w(1).Fork(id, fa, 2))
	c.send(c.w(1).Release(id, fa))
	c.send(okM(t)(c.w(2).ReceiveFork(1, 0, id, fb))) // ForkRequest(fb) queued
	fc := okF(t)(c.w(2).Fork(id, fb, 3))
	c.send(c.w(2).Release(id, fb))
	c.send(okM(t)(c.w(3).ReceiveFork(2, 0, id, fc))) // ForkRequest(fc) queued
	// C's request first.
	c.q[0], c.q[1] = c.q[1], c.q[0]
	c.next(ForkRequest) // fc
	c.next(ForkAccept)  // C confirmed; ChildAccept → B
	c.next(ChildAccept) // B drops child; but B is unconfirmed
	c.expectQueued(ForkRequest)
	c.next(ForkRequest) // fb
	c.next(ForkAccept)  // B confirmed: ChildAccept → A and UserDelete(fb)
	c.drain()
	c.expectDeleted(id, 0)
	if c.w(1).Empty() == false || c.w(2).Empty() == false {
		t.Fatalf("A and B released everything: %v; %v", c.w(1), c.w(2))
	}
	c.send(c.w(3).Release(id, fc))
	c.drain()
	c.expectDeleted(id, 1)
	c.expectEmpty()
}

// A user passes the RRef to its owner: the owner gets a local handle and
// answers ChildAccept directly.
func TestForkToOwner(t *testing.T) {
	c := newCluster(t, 2)
	id, fa := c.remote(1, 0)
	child := okF(t)(c.w(1).Fork(id, fa, 0))
	c.send(c.w(1).Release(id, fa))
	c.expectQueued()
	c.send(okM(t)(c.w(0).ReceiveFork(1, 0, id, child)))
	c.expectQueued(ChildAccept)
	c.drain() // ChildAccept, then UserDelete(fa)
	c.expectDeleted(id, 0)
	if !c.w(0).Confirmed(id, child) {
		t.Fatal("the owner's local handle is confirmed")
	}
	c.send(c.w(0).Release(id, child))
	c.expectDeleted(id, 1)
	c.expectEmpty()
}

// A user sends its RRef to itself (an RPC to self).
func TestForkToSelf(t *testing.T) {
	c := newCluster(t, 2)
	id, fa := c.remote(1, 0)
	fb := okF(t)(c.w(1).Fork(id, fa, 1))
	c.send(c.w(1).Release(id, fa))
	c.send(okM(t)(c.w(1).ReceiveFork(1, 0, id, fb)))
	c.drain()
	c.expectDeleted(id, 0)
	c.send(c.w(1).Release(id, fb))
	c.drain()
	c.expectDeleted(id, 1)
	c.expectEmpty()

	// And the owner to itself.
	id, f := c.w(0).NewOwned()
	g := okF(t)(c.w(0).Fork(id, f, 0))
	c.send(c.w(0).Release(id, f))
	c.expectDeleted(id, 0)
	c.send(okM(t)(c.w(0).ReceiveFork(0, 0, id, g)))
	c.send(c.w(0).Release(id, g))
	c.expectDeleted(id, 1)
	c.expectEmpty()
}

func TestReleaseBeforeConfirmation(t *testing.T) {
	c := newCluster(t, 3)
	id, f := must2(t)(c.w(1).CreateRemote(0))
	c.send(c.w(1).Release(id, f))
	c.expectQueued() // the owner has not counted f yet: no delete
	if err := c.w(0).AcceptRemote(1, id, f); err != nil {
		t.Fatal(err)
	}
	c.send(c.w(1).ConfirmRemote(id, f))
	c.expectQueued(UserDelete)
	c.drain()
	c.expectDeleted(id, 1)

	// Released before a ForkAccept.
	id, fa := c.remote(1, 0)
	fb := okF(t)(c.w(1).Fork(id, fa, 2))
	c.send(okM(t)(c.w(2).ReceiveFork(1, 0, id, fb)))
	c.send(c.w(2).Release(id, fb))
	c.send(c.w(1).Release(id, fa))
	c.expectQueued(ForkRequest)
	c.next(ForkRequest)
	c.next(ForkAccept)
	c.expectQueued(ChildAccept, UserDelete)
	c.drain()
	c.expectDeleted(id, 1)
	c.expectEmpty()
}

// B's fork request, and even B's delete, reach the owner before the remote
// call that creates the RRef; and an RRef reaches its owner before its
// remote call.
func TestForkOvertakesRemoteCall(t *testing.T) {
	c := newCluster(t, 3)
	id, fa := must2(t)(c.w(1).CreateRemote(0)) // the call is slow
	fb := okF(t)(c.w(1).Fork(id, fa, 2))
	c.send(okM(t)(c.w(2).ReceiveFork(1, 0, id, fb)))
	c.next(ForkRequest) // the owner: unborn entry
	c.next(ForkAccept)
	c.next(ChildAccept)
	c.send(c.w(2).Release(id, fb))
	c.drain()
	c.expectDeleted(id, 0) // unborn: not deleted with zero forks
	if c.w(0).Empty() {
		t.Fatal("the owner forgot an unborn RRef")
	}
	if !strings.Contains(c.w(0).String(), "remote call has not arrived") {
		t.Fatalf("String: %v", c.w(0))
	}
	fo := okF(t)(c.w(1).Fork(id, fa, 0)) // and to the owner, also early
	c.send(okM(t)(c.w(0).ReceiveFork(1, 0, id, fo)))
	c.drain()
	if err := c.w(0).AcceptRemote(1, id, fa); err != nil {
		t.Fatal(err)
	}
	c.send(c.w(1).ConfirmRemote(id, fa))
	c.send(c.w(1).Release(id, fa))
	c.drain()
	c.expectDeleted(id, 0) // the owner's local handle
	c.send(c.w(0).Release(id, fo))
	c.expectDeleted(id, 1)
	c.expectEmpty()
}

func TestDuplicates(t *testing.T) {
	c := newCluster(t, 3)
	id, fa := c.remote(1, 0)
	if err := c.w(0).AcceptRemote(1, id, fa); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second remote call: %v, want ErrDuplicate", err)
	}
	fb := okF(t)(c.w(1).Fork(id, fa, 2))
	c.send(okM(t)(c.w(2).ReceiveFork(1, 0, id, fb)))
	if _, err := c.w(2).ReceiveFork(1, 0, id, fb); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second fork: %v, want ErrDuplicate", err)
	}
	req := c.q[0]
	c.next(ForkRequest)
	c.send(c.w(0).Handle(req)) // duplicate request: answered again, counted once
	acc := c.q[0]
	c.next(ForkAccept)
	c.send(c.w(2).Handle(acc)) // duplicate accept: nothing
	c.expectQueued(ForkAccept, ChildAccept)
	c.drain()
	// B deletes; duplicates of its delete must not uncount A's fork.
	c.send(c.w(2).Release(id, fb))
	del := c.q[0]
	c.drain()
	for range 3 {
		c.send(c.w(0).Handle(del))
		c.send(c.w(0).Handle(req)) // a stale request must not resurrect fb
	}
	c.drain()
	c.expectDeleted(id, 0)
	c.send(c.w(1).Release(id, fa))
	del = c.q[0]
	c.drain()
	c.expectDeleted(id, 1)
	// After deletion: nothing resurrects it.
	c.send(c.w(0).Handle(del))
	c.send(c.w(0).Handle(req))
	c.drain()
	if err := c.w(0).AcceptRemote(1, id, fa); !errors.Is(err, ErrGone) {
		t.Fatalf("remote call after deletion: %v, want ErrGone", err)
	}
	c.expectDeleted(id, 1)
	c.expectEmpty()
}

// A delete that reaches the owner before the fork it deletes (forged, or a
// future protocol change) is remembered, so the late request is answered
// and not counted.
func TestDeleteBeforeRequest(t *testing.T) {
	c := newCluster(t, 3)
	id, fa := c.remote(1, 0)
	fb := ForkID{1, 99}
	c.send(c.w(0).Handle(Msg{Kind: UserDelete, From: 2, To: 0, RRef: id, Fork: fb}))
	c.send(c.w(0).Handle(Msg{Kind: ForkRequest, From: 2, To: 0, RRef: id, Fork: fb}))
	c.expectQueued(ForkAccept)
	c.q = nil
	c.send(c.w(1).Release(id, fa))
	c.drain()
	c.expectDeleted(id, 1)
	c.expectEmpty()
}

func TestCancelFork(t *testing.T) {
	c := newCluster(t, 3)
	id, fa := c.remote(1, 0)
	fb := okF(t)(c.w(1).Fork(id, fa, 2))
	c.send(c.w(1).Release(id, fa))
	c.expectQueued()
	c.send(c.w(1).CancelFork(id, fb))
	c.expectQueued(UserDelete)
	c.drain()
	c.expectDeleted(id, 1)

	id, f := c.w(0).NewOwned()
	g := okF(t)(c.w(0).Fork(id, f, 2))
	c.send(c.w(0).Release(id, f))
	c.expectDeleted(id, 0)
	c.send(c.w(0).CancelFork(id, g))
	c.expectDeleted(id, 1)
	c.expectEmpty()
}

// TestCancelRemote: a remote call that never left leaves nothing behind,
// on another owner and on self.
func TestCancelRemote(t *testing.T) {
	c := newCluster(t, 2)
	id, f := must2(t)(c.w(1).CreateRemote(0))
	c.send(c.w(1).CancelRemote(id, f))
	c.expectQueued()
	if c.w(1).Confirmed(id, f) {
		t.Fatal("a canceled remote call's handle is confirmed")
	}
	c.send(c.w(1).Release(id, f)) // the agent's handle, dropped after
	c.expectQueued()
	c.expectDeleted(id, 0)
	c.expectEmpty()

	id, f = must2(t)(c.w(1).CreateRemote(1))
	c.send(c.w(1).CancelRemote(id, f))
	c.expectDeleted(id, 1)
	c.expectEmpty()
}

func TestPeerDown(t *testing.T) {
	c := newCluster(t, 4)
	// Worker 2 is the only holder of a value on worker 0.
	only, f2 := c.remote(2, 0)
	// Worker 1 holds one; worker 2 holds a fork of it too.
	shared, f1 := c.remote(1, 0)
	g := okF(t)(c.w(1).Fork(shared, f1, 2))
	c.send(okM(t)(c.w(2).ReceiveFork(1, 0, shared, g)))
	c.drain()
	// Worker 1 holds an RRef owned by worker 2, unconfirmed.
	theirs, h := must2(t)(c.w(1).CreateRemote(2))
	// Worker 2 creates an RRef on 0 and sends it to 3; 3's request beats
	// the remote call, which never comes.
	unborn, u2 := must2(t)(c.w(2).CreateRemote(0))
	u3 := okF(t)(c.w(2).Fork(unborn, u2, 3))
	c.send(okM(t)(c.w(3).ReceiveFork(2, 0, unborn, u3)))
	c.next(ForkRequest)
	// Worker 1 sent its RRef to worker 2, which dies before accepting.
	lost := okF(t)(c.w(1).Fork(shared, f1, 2))
	_ = lost
	c.send(c.w(1).Release(shared, f1))

	c.q = slices.DeleteFunc(c.q, func(m Msg) bool { return m.To == 2 || m.From == 2 })
	for _, w := range []WorkerID{0, 1, 3} {
		failed, out := c.w(w).PeerDown(2)
		c.send(out)
		switch w {
		case 0:
			if !slices.Equal(failed, []RRefID{unborn}) {
				t.Errorf("owner's failed = %v, want the unborn %v", failed, unborn)
			}
		case 1:
			if !slices.Equal(failed, []RRefID{theirs}) {
				t.Errorf("worker1's failed = %v, want %v", failed, theirs)
			}
		case 3:
			if failed != nil {
				t.Errorf("worker3's failed = %v", failed)
			}
		}
	}
	c.drain()
	c.expectDeleted(only, 1)
	c.expectDeleted(shared, 1) // 1 released; 2's fork and the one in flight to 2 are dropped
	c.send(c.w(1).Release(theirs, h))
	c.send(c.w(3).Release(unborn, u3))
	_, _ = f2, h
	if _, err := c.w(1).Fork(shared, f1, 2); err == nil {
		t.Error("Fork to a dead worker succeeded")
	}
	if _, _, err := c.w(1).CreateRemote(2); !errors.Is(err, ErrPeerDown) {
		t.Errorf("CreateRemote on a dead worker: %v", err)
	}
	c.drain()
	c.expectDeleted(unborn, 0)
	for _, w := range []WorkerID{0, 1, 3} {
		if !c.w(w).Empty() {
			t.Errorf("not empty: %v", c.w(w))
		}
	}
}

func TestErrors(t *testing.T) {
	c := newCluster(t, 3)
	id, f := c.remote(1, 0)
	if _, err := c.w(1).Fork(id, ForkID{1, 77}, 2); !errors.Is(err, ErrUnknown) {
		t.Errorf("Fork of an unknown handle: %v", err)
	}
	if _, err := c.w(1).ReceiveFork(2, 0, id, ForkID{1, 5}); !errors.Is(err, ErrMalformed) {
		t.Errorf("ReceiveFork of a fork its sender did not mint: %v", err)
	}
	if err := c.w(0).AcceptRemote(2, id, f); !errors.Is(err, ErrMalformed) {
		t.Errorf("AcceptRemote from a worker that did not create the RRef: %v", err)
	}
	g := okF(t)(c.w(1).Fork(id, f, 2))
	c.send(okM(t)(c.w(2).ReceiveFork(1, 0, id, g)))
	c.send(c.w(1).Release(id, f))
	if _, err := c.w(1).Fork(id, f, 2); !errors.Is(err, ErrReleased) && !errors.Is(err, ErrUnknown) {
		t.Errorf("Fork of a released handle: %v", err)
	}
	c.drain()
	c.send(c.w(2).Release(id, g))
	c.drain()
	c.expectDeleted(id, 1)
	// An RRef that was sent between users is remembered after deletion.
	if _, err := c.w(0).ReceiveFork(1, 0, id, ForkID{1, 1000}); !errors.Is(err, ErrGone) {
		t.Errorf("ReceiveFork of a deleted RRef: %v", err)
	}
	c.q = nil
	// A released handle that is still waiting for confirmation.
	id, f = must2(t)(c.w(1).CreateRemote(0))
	c.send(c.w(1).Release(id, f))
	if _, err := c.w(1).Fork(id, f, 2); !errors.Is(err, ErrReleased) {
		t.Errorf("Fork of a released handle: %v", err)
	}
	// Misrouted and forged messages are ignored.
	if out := c.w(0).Handle(Msg{Kind: ForkRequest, From: 2, To: 1, RRef: id, Fork: f}); out != nil {
		t.Errorf("misrouted message answered: %v", out)
	}
	if out := c.w(1).Handle(Msg{Kind: ForkAccept, From: 2, To: 1, RRef: id, Fork: f}); out != nil {
		t.Errorf("ForkAccept from a non-owner answered: %v", out)
	}
	if c.w(1).Confirmed(id, f) {
		t.Error("confirmed by a ForkAccept that did not come from the owner")
	}
}

func TestString(t *testing.T) {
	c := newCluster(t, 3)
	if got := c.w(1).String(); got != "worker1 holds no RRefs" {
		t.Errorf("empty: %q", got)
	}
	id, fa := c.remote(1, 0)
	must2(t)(c.w(1).CreateRemote(0))
	okF(t)(c.w(1).Fork(id, fa, 2))
	c.w(0).NewOwned()
	want1 := "worker1 still holds 2 user RRefs of worker0 (2 not released, 1 awaiting the owner's confirmation, 1 fork sent on, not yet accepted)"
	if got := c.w(1).String(); got != want1 {
		t.Errorf("user:\n got %q\nwant %q", got, want1)
	}
	want0 := "worker0 still owns 2 RRefs (1 local handle here, 1 fork held by worker1)"
	if got := c.w(0).String(); got != want0 {
		t.Errorf("owner:\n got %q\nwant %q", got, want0)
	}
}

// C passes its RRef to Q, Q passes it on to B, and Q dies before the owner
// hears of it: C's delete frees the value, and B's request arrives after.
// The owner must remember the deletion (C's delete says its fork was
// sent on), not create the RRef anew for B.
func TestForkRequestAfterDeletion(t *testing.T) {
	c := newCluster(t, 4)
	const O, C, Q, B = 0, 1, 2, 3
	id, fc := c.remote(C, O)
	fq := okF(t)(c.w(C).Fork(id, fc, Q))
	c.send(okM(t)(c.w(Q).ReceiveFork(C, O, id, fq)))
	fb := okF(t)(c.w(Q).Fork(id, fq, B))
	c.send(okM(t)(c.w(B).ReceiveFork(Q, O, id, fb)))
	// Q dies; its request is lost.
	c.q = slices.DeleteFunc(c.q, func(m Msg) bool { return m.From == Q })
	c.expectQueued(ForkRequest) // B's, delayed
	late := c.q[0]
	c.q = nil
	for _, w := range []WorkerID{C, B} {
		_, out := c.w(w).PeerDown(Q)
		c.send(out)
	}
	c.send(c.w(C).Release(id, fc))
	c.expectQueued(UserDelete)
	if !c.q[0].Forked {
		t.Fatalf("%v: the delete of a fork that was sent on must say so", c.q[0])
	}
	c.drain()
	c.expectDeleted(id, 1)
	c.send(c.w(O).Handle(late))
	c.expectQueued(ForkAccept) // answered, so B does not wait forever
	c.drain()
	c.send(c.w(B).Release(id, fb))
	_, out := c.w(O).PeerDown(Q)
	c.send(out)
	c.drain()
	c.expectDeleted(id, 1)
	for _, w := range []WorkerID{O, C, B} {
		if !c.w(w).Empty() {
			t.Errorf("not empty: %v", c.w(w))
		}
	}
}

// An RRef made by remote() and never sent between users leaves nothing
// behind on its owner once deleted.
func TestNoTombstoneWithoutForks(t *testing.T) {
	c := newCluster(t, 2)
	for range 100 {
		id, f := c.remote(1, 0)
		g := okF(t)(c.w(1).Fork(id, f, 0)) // to the owner: no ForkRequest
		c.send(okM(t)(c.w(0).ReceiveFork(1, 0, id, g)))
		c.send(c.w(0).Release(id, g))
		c.send(c.w(1).Release(id, f))
		c.drain()
		c.expectDeleted(id, 1)
	}
	c.expectEmpty()
	if n := len(c.w(0).gone); n != 100 {
		// Forked to the owner: the deletes say Forked, so each is kept.
		t.Errorf("owner remembers %d deleted RRefs, want 100", n)
	}
	for range 100 {
		id, f := c.remote(1, 0)
		c.send(c.w(1).Release(id, f))
		c.drain()
	}
	if n := len(c.w(0).gone); n != 100 {
		t.Errorf("owner remembers %d deleted RRefs, want the 100 forked ones only", n)
	}
}
