package samehost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/transport"
)

// Fingerprints of the tests' calls: any values, equal on every member.
const (
	fpBarrier uint64 = iota + 1
	fpAllReduce
	fpBroadcast
	fpAllGather
	fpReduceScatter
)

// TestBlockCollectives: every collective through the block, at world
// sizes 1 to 9 (beyond 8 the slots' list leaves the stack) and input
// sizes from 0 to MaxInput, gives every member what it should.
func TestBlockCollectives(t *testing.T) {
	for _, world := range []int{1, 2, 3, 5, 9} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			j := newJob(t, world, true, false)
			j.run(t, func(m *testMember) error {
				ctx := j.ctx
				r := int64(m.q)
				w := int64(world)
				for _, n := range []int{0, 8, 24, 1000, MaxInput} {
					if err := m.e.Block().Barrier(ctx, m.issue(fpBarrier)); err != nil {
						return err
					}
					// all_reduce: SUM, then AVG without and with a final
					// kernel (Scale applies only without one).
					x := make([]byte, n)
					fill(x, func(i int) int64 { return r*1000 + int64(i) })
					if err := m.e.Block().AllReduce(ctx, m.issue(fpAllReduce), x, sum); err != nil {
						return err
					}
					total := func(i int) int64 { return 1000*w*(w-1)/2 + w*int64(i) }
					if err := check(fmt.Sprintf("all_reduce of %d bytes", n), x, total); err != nil {
						return err
					}
					for _, final := range []bool{false, true} {
						fill(x, func(i int) int64 { return r*1000 + int64(i) })
						if err := m.e.Block().AllReduce(ctx, m.issue(fpAllReduce), x, avg(world, final)); err != nil {
							return err
						}
						if err := check(fmt.Sprintf("avg (final %v) of %d bytes", final, n), x, func(i int) int64 { return total(i) / w }); err != nil {
							return err
						}
					}
					// broadcast from every root, of any length.
					for root := range world {
						k := min(n+root%3, MaxInput)
						b := bytes.Repeat([]byte{byte(m.q)}, k)
						if err := m.e.Block().Broadcast(ctx, m.issue(fpBroadcast), b, root); err != nil {
							return err
						}
						if want := bytes.Repeat([]byte{byte(root)}, k); !bytes.Equal(b, want) {
							return fmt.Errorf("broadcast of %d bytes from %d: % x", len(b), root, b[:min(len(b), 8)])
						}
					}
					// all_gather, into another buffer and in place.
					if k := n / world; k > 0 || n == 0 {
						in := bytes.Repeat([]byte{byte(m.q + 1)}, k)
						out := make([]byte, k*world)
						if err := m.e.Block().AllGather(ctx, m.issue(fpAllGather), out, in); err != nil {
							return err
						}
						for q := range world {
							if !bytes.Equal(out[q*k:(q+1)*k], bytes.Repeat([]byte{byte(q + 1)}, k)) {
								return fmt.Errorf("all_gather of %d bytes: chunk %d: % x", k, q, out[q*k:(q+1)*k])
							}
						}
						clear(out)
						copy(out[m.q*k:], in)
						if err := m.e.Block().AllGather(ctx, m.issue(fpAllGather), out, out[m.q*k:(m.q+1)*k]); err != nil {
							return err
						}
						for q := range world {
							if !bytes.Equal(out[q*k:(q+1)*k], bytes.Repeat([]byte{byte(q + 1)}, k)) {
								return fmt.Errorf("all_gather in place of %d bytes: chunk %d: % x", k, q, out[q*k:(q+1)*k])
							}
						}
					}
					// reduce_scatter: chunk c of member r's input holds
					// 100r+c+i; into another buffer, then in place.
					k := n / world / 8 * 8
					in := make([]byte, k*world)
					fill(in, func(i int) int64 { return 100*r + int64(i) })
					want := func(i int) int64 { return 100*w*(w-1)/2 + w*(int64(m.q*k/8)+int64(i)) }
					for _, inPlace := range []bool{false, true} {
						out := make([]byte, k)
						if inPlace {
							out = in[m.q*k : (m.q+1)*k]
						}
						if err := m.e.Block().ReduceScatter(ctx, m.issue(fpReduceScatter), out, in, sum); err != nil {
							return err
						}
						if err := check(fmt.Sprintf("reduce_scatter (in place %v) of %d bytes", inPlace, k), out, want); err != nil {
							return err
						}
					}
				}
				return nil
			})
		})
	}
}

// TestBlockCallsInFlight: members issue many calls in order and run
// each on a goroutine of its own, as async calls do; they run in issue
// order on every member, reusing the two slots, and give the right
// results, broadcasts among them (run it with -race).
func TestBlockCallsInFlight(t *testing.T) {
	const world, calls = 3, 300
	j := newJob(t, world, true, false)
	j.run(t, func(m *testMember) error {
		errs := make(chan error, calls)
		var wg sync.WaitGroup
		for it := range calls {
			if it%4 == 3 { // a run of broadcasts, whose roots wait on nobody
				root := it % world
				c := m.issue(fpBroadcast + uint64(root)*100)
				wg.Go(func() {
					b := bytes.Repeat([]byte{byte(m.q + it)}, 1+it%7)
					if err := m.e.Block().Broadcast(j.ctx, c, b, root); err != nil {
						errs <- err
						return
					}
					if want := bytes.Repeat([]byte{byte(root + it)}, len(b)); !bytes.Equal(b, want) {
						errs <- fmt.Errorf("call %d, broadcast from %d: % x", it, root, b)
					}
				})
				continue
			}
			c := m.issue(fpAllReduce + uint64(it%3)*100)
			wg.Go(func() {
				x := make([]byte, 8*(1+it%5))
				fill(x, func(i int) int64 { return int64(it*m.q + i) })
				if err := m.e.Block().AllReduce(j.ctx, c, x, sum); err != nil {
					errs <- err
					return
				}
				errs <- check(fmt.Sprintf("call %d", it), x, func(i int) int64 { return int64(it*world*(world-1)/2 + world*i) })
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return err
			}
		}
		if got := m.e.Calls(); got != calls {
			return fmt.Errorf("%d calls counted, want %d", got, calls)
		}
		return nil
	})
}

// TestBlockLate: a member that arrives late finds the others asleep on
// its sequence word (past the polls), and wakes them; with Yield too.
// Each waiting member tells its group once per call (whichever member
// it waited on first), and that the wait ended.
func TestBlockLate(t *testing.T) {
	for _, yield := range []bool{false, true} {
		t.Run(fmt.Sprint("yield=", yield), func(t *testing.T) {
			j := newJob(t, 3, true, yield)
			j.run(t, func(m *testMember) error {
				for it := range 3 {
					c := m.issue(fpBarrier)
					if m.q == 2 {
						time.Sleep(5 * time.Millisecond)
					}
					if err := m.e.Block().Barrier(j.ctx, c); err != nil {
						return err
					}
					if m.q != 2 {
						m.mu.Lock()
						waits, waited := len(m.waiting), len(m.waited)
						last := m.waiting[len(m.waiting)-1]
						m.mu.Unlock()
						if waits != it+1 || waited != it+1 || last[0] != c.Seq {
							return fmt.Errorf("call %d: told of %d waits (last %v), %d ended", c.Seq, waits, last, waited)
						}
					}
				}
				return nil
			})
			for q, m := range j.members {
				if n := waiters(m.e.Block().mine).Load(); n != 0 {
					t.Errorf("member %d: %d sleepers left counted", q, n)
				}
			}
		})
	}
}

// TestBlockDesync: members whose calls differ get a
// *transport.FingerprintError naming the other's global rank and the
// call; members whose inputs differ in length a *transport.LengthError.
func TestBlockDesync(t *testing.T) {
	j := newJob(t, 2, true, false)
	j.run(t, func(m *testMember) error {
		fp := fpBarrier
		if m.q == 1 {
			fp = fpAllReduce
		}
		c := m.issue(fp)
		err := m.e.Block().Barrier(j.ctx, c)
		var fe *transport.FingerprintError
		other := fpAllReduce + fpBarrier - fp
		if !errors.As(err, &fe) || fe.Src != globalRank(1-m.q) || fe.Key != (transport.Key{Group: testGroupID, Seq: c.Seq}) || fe.Got != other || fe.Want != fp {
			return fmt.Errorf("got %#v, want a FingerprintError from rank %d", err, globalRank(1-m.q))
		}
		// The next call runs (the failed one ended) and finds the
		// mismatch again, before it writes its slot.
		first := c
		err = m.e.Block().Barrier(j.ctx, m.issue(fpBarrier))
		if !errors.As(err, &fe) || fe.Src != globalRank(1-m.q) || fe.Key.Seq != first.Seq {
			return fmt.Errorf("the call after: got %#v, want a FingerprintError from rank %d on call %d", err, globalRank(1-m.q), first.Seq)
		}
		return nil
	})
	j = newJob(t, 2, true, false)
	j.run(t, func(m *testMember) error {
		c := m.issue(fpAllReduce)
		x := make([]byte, 8*(1+m.q))
		err := m.e.Block().AllReduce(j.ctx, c, x, sum)
		var le *transport.LengthError
		if !errors.As(err, &le) || le.Src != globalRank(1-m.q) || le.Got != int64(8*(2-m.q)) || le.Want != int64(len(x)) {
			return fmt.Errorf("got %#v, want a LengthError from rank %d", err, globalRank(1-m.q))
		}
		return nil
	})
	// A broadcast whose members each think themselves its root: neither
	// reads the other's header in it, so the next call finds it.
	j = newJob(t, 2, true, false)
	j.run(t, func(m *testMember) error {
		bc := m.issue(fpBroadcast + uint64(m.q)*100)
		if err := m.e.Block().Broadcast(j.ctx, bc, []byte{1, 2, 3}, m.q); err != nil {
			return fmt.Errorf("the broadcast: %v", err)
		}
		err := m.e.Block().Barrier(j.ctx, m.issue(fpBarrier))
		var fe *transport.FingerprintError
		other := fpBroadcast + uint64(1-m.q)*100
		if !errors.As(err, &fe) || fe.Src != globalRank(1-m.q) || fe.Key != (transport.Key{Group: testGroupID, Seq: bc.Seq}) || fe.Got != other || fe.Want != bc.FP {
			return fmt.Errorf("got %#v, want a FingerprintError from rank %d on the broadcast", err, globalRank(1-m.q))
		}
		return nil
	})
}

// TestBlockBroadcastRoot: a broadcast's root returns before the other
// members come (it waits on nobody), and they get its input; its next
// call waits for them to have entered the broadcast.
func TestBlockBroadcastRoot(t *testing.T) {
	const world = 3
	j := newJob(t, world, true, false)
	rootDone := make(chan struct{})
	j.run(t, func(m *testMember) error {
		c := m.issue(fpBroadcast)
		b := []byte{byte(m.q), 0, 0}
		if m.q == 1 {
			if err := m.e.Block().Broadcast(j.ctx, c, b, 1); err != nil {
				return err
			}
			close(rootDone)
		} else {
			select {
			case <-rootDone:
			case <-time.After(10 * time.Second):
				return fmt.Errorf("member %d: the root did not return before the others came", m.q)
			}
			if err := m.e.Block().Broadcast(j.ctx, c, b, 1); err != nil {
				return err
			}
			if !bytes.Equal(b, []byte{1, 0, 0}) {
				return fmt.Errorf("member %d got % x", m.q, b)
			}
		}
		x := make([]byte, 8)
		fill(x, func(int) int64 { return int64(m.q) })
		if err := m.e.Block().AllReduce(j.ctx, m.issue(fpAllReduce), x, sum); err != nil {
			return err
		}
		return check("the all_reduce after", x, func(int) int64 { return world * (world - 1) / 2 })
	})
}

// TestBlockPeerGone: a member that never comes and whose connection
// ends fails the others' calls with its error, asleep or not; a call
// whose context ends returns the context's cause, and the calls issued
// after it still run in turn.
func TestBlockPeerGone(t *testing.T) {
	j := newJob(t, 3, true, false)
	gone := errors.New("member 2's connection ended")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	cause := errors.New("the group failed")
	j.run(t, func(m *testMember) error {
		if m.q == 2 {
			time.Sleep(20 * time.Millisecond)
			j.mu.Lock()
			j.gone[2] = gone
			j.mu.Unlock()
			return nil
		}
		start := time.Now()
		if err := m.e.Block().Barrier(context.Background(), m.issue(fpBarrier)); err != gone {
			return fmt.Errorf("got %v, want member 2's end", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			return fmt.Errorf("the end took %v to notice", d)
		}
		return nil
	})
	j = newJob(t, 2, true, false)
	j.run(t, func(m *testMember) error {
		if m.q == 1 {
			time.Sleep(10 * time.Millisecond)
			cancel(cause)
			return nil
		}
		first, second := m.issue(fpBarrier), m.issue(fpBarrier)
		errs := make(chan error, 1)
		go func() { errs <- m.e.Block().Barrier(ctx, second) }()
		if err := m.e.Block().Barrier(ctx, first); err != cause {
			return fmt.Errorf("got %v, want the context's cause", err)
		}
		if err := <-errs; err != cause {
			return fmt.Errorf("the call after: got %v, want the context's cause", err)
		}
		return nil
	})
}

// TestBlockUnmapped: a member whose block is no longer mapped fails the
// call with a *transport.PeerError naming it.
func TestBlockUnmapped(t *testing.T) {
	j := newJob(t, 2, true, false)
	j.host.mapRegion(globalRank(1), 1, -1)
	m := j.members[0]
	err := m.e.Block().Barrier(context.Background(), m.issue(fpBarrier))
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Rank != globalRank(1) || !errors.Is(err, errBlockUnmapped) {
		t.Fatalf("got %v, want a PeerError naming rank %d", err, globalRank(1))
	}
}

func TestSetBlock(t *testing.T) {
	j := newJob(t, 2, false, false)
	e := j.members[0].e
	if e.Block() != nil || e.BlockFits(0) {
		t.Fatal("a block before SetBlock")
	}
	if err := e.SetBlock(e.Tensors.Add(aligned(BlockBytes-1), &j.host, []uint8{1, 1}, func() {})); err == nil {
		t.Fatal("SetBlock took too little memory")
	}
	blk := e.Tensors.Add(aligned(BlockBytes), &j.host, []uint8{1, 1}, func() {})
	if err := e.SetBlock(blk); err != nil {
		t.Fatal(err)
	}
	if err := e.SetBlock(blk); err == nil {
		t.Fatal("SetBlock twice")
	}
	if !e.BlockFits(0) || !e.BlockFits(MaxInput) || e.BlockFits(MaxInput+1) {
		t.Fatal("BlockFits")
	}
}

// TestLayout: the block's layout is the package doc's (members of
// different builds share it).
func TestLayout(t *testing.T) {
	if slotBytes != 4160 || offWaiters != 8320 || BlockBytes != 8384 || MaxInput != 4096 || headBytes != 64 {
		t.Fatalf("slot %d, sleepers at %d, block %d", slotBytes, offWaiters, BlockBytes)
	}
	mem := aligned(BlockBytes)
	slot := slotOf(mem, 3)
	seqWord(slot).Store(3)
	if &slot[0] != &mem[4160] || le.Uint64(mem[4160:]) != 3 {
		t.Fatal("call 3 is not in slot 1")
	}
}

// TestSpinBudget: a member with a CPU of its own polls long while the
// others came within the long poll lately (a sleep would cost a halted
// vCPU's wakeup, more than the wait), and briefly after a long wait;
// one that yields its CPU polls for yieldSpinFor whatever came before.
func TestSpinBudget(t *testing.T) {
	for _, c := range []struct {
		yield bool
		late  time.Duration
		want  time.Duration
	}{
		{false, 0, longSpin},
		{false, 150 * time.Microsecond, longSpin},
		{false, longSpin - 1, longSpin},
		{false, longSpin, spinFor},
		{false, 20 * time.Millisecond, spinFor},
		{true, 0, yieldSpinFor},
		{true, 20 * time.Millisecond, yieldSpinFor},
	} {
		if got := spinBudget(c.yield, c.late); got != c.want {
			t.Errorf("spinBudget(yield %v, late %v) = %v, want %v", c.yield, c.late, got, c.want)
		}
	}
}
