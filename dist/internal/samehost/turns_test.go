package samehost

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
)

func TestSlot(t *testing.T) {
	for ord := uint64(1); ord < 100; ord++ {
		if Slot(ord) == Slot(ord+1) {
			t.Fatalf("calls %d and %d share slot %d", ord, ord+1, Slot(ord))
		}
		if Slot(ord) != Slot(ord+Slots) || Slot(ord) < 0 || Slot(ord) >= Slots {
			t.Fatalf("call %d: slot %d, call %d: slot %d", ord, Slot(ord), ord+Slots, Slot(ord+Slots))
		}
	}
}

// permutations calls fn with every ordering of 0..n-1.
func permutations(n int, fn func([]int)) {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	var rec func(k int)
	rec = func(k int) {
		if k == n {
			fn(p)
			return
		}
		for i := k; i < n; i++ {
			p[k], p[i] = p[i], p[k]
			rec(k + 1)
			p[k], p[i] = p[i], p[k]
		}
	}
	rec(0)
}

// TestTurnsEveryOrder: however the calls' runners take their turns (in
// every order, for up to 6 calls), the calls are numbered in issue
// order, exactly one call may run at a time, the one after the last that
// ended, and each is taken once.
func TestTurnsEveryOrder(t *testing.T) {
	for n := 1; n <= 6; n++ {
		permutations(n, func(takes []int) {
			var tr Turns
			seqs := make([]uint64, n)
			for i := range seqs {
				seqs[i] = uint64(7*i + 3) // the group's numbers: increasing, not consecutive
				if ord := tr.Issue(seqs[i]); ord != uint64(i+1) {
					t.Fatalf("call %d issued as ordinal %d", i, ord)
				}
			}
			ords := make([]uint64, n)
			for _, i := range takes {
				ord, ok := tr.Take(seqs[i])
				if !ok || ord != uint64(i+1) {
					t.Fatalf("takes %v: call %d: ordinal %d %v", takes, i, ord, ok)
				}
				if _, ok := tr.Take(seqs[i]); ok {
					t.Fatalf("call %d taken twice", i)
				}
				ords[i] = ord
			}
			for k := range n {
				for i, ord := range ords {
					if tr.Turn(ord) != (i == k) {
						t.Fatalf("after %d ended: Turn(%d) = %v", k, ord, tr.Turn(ord))
					}
				}
				tr.End(ords[k])
				if tr.Ended() != uint64(k+1) {
					t.Fatalf("ended %d, want %d", tr.Ended(), k+1)
				}
			}
			if len(tr.byseq) != 0 {
				t.Fatalf("left %v", tr.byseq)
			}
		})
	}
}

// TestTurnsRandom interleaves issues, takes and ends at random (each
// call taken any time after it is issued, ended when its turn has come)
// and checks the order against a model: ordinals count issues, the call
// allowed to run is always the oldest not ended.
func TestTurnsRandom(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var tr Turns
		var seq uint64
		var issued []uint64 // seqs issued, not taken
		taken := map[uint64]bool{}
		var ended uint64
		for range 400 {
			switch rng.IntN(3) {
			case 0:
				seq += 1 + uint64(rng.IntN(3))
				if ord := tr.Issue(seq); ord != tr.Issued() {
					t.Fatalf("seed %d: ordinal %d of %d issued", seed, ord, tr.Issued())
				}
				issued = append(issued, seq)
			case 1:
				if len(issued) == 0 {
					continue
				}
				i := rng.IntN(len(issued))
				s := issued[i]
				issued = append(issued[:i], issued[i+1:]...)
				ord, ok := tr.Take(s)
				if !ok || ord <= ended || ord > tr.Issued() {
					t.Fatalf("seed %d: call %d: ordinal %d %v, %d ended, %d issued", seed, s, ord, ok, ended, tr.Issued())
				}
				taken[ord] = true
			case 2:
				if !taken[ended+1] {
					continue
				}
				for ord := range taken {
					if tr.Turn(ord) != (ord == ended+1) {
						t.Fatalf("seed %d: Turn(%d) = %v with %d ended", seed, ord, tr.Turn(ord), ended)
					}
				}
				delete(taken, ended+1)
				ended++
				tr.End(ended)
			}
			if tr.Ended() != ended {
				t.Fatalf("seed %d: ended %d, want %d", seed, tr.Ended(), ended)
			}
		}
	}
}

func TestTurnsMisuse(t *testing.T) {
	var tr Turns
	if _, ok := tr.Take(1); ok {
		t.Error("took a call never issued")
	}
	tr.Issue(1)
	tr.Issue(2)
	mustPanic(t, "ending the second call first", func() { tr.End(2) })
	tr.End(1)
	mustPanic(t, "ending a call twice", func() { tr.End(1) })
	tr.End(2)
	mustPanic(t, "ending a call not issued", func() { tr.End(3) })
}

func mustPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	fn()
}

// TestBlockTurnsConcurrent: calls issued by several goroutines (under
// one lock, as the group numbers them) and run each by a goroutine of
// its own start in issue order, one at a time, whatever the scheduling
// (run it with -race).
func TestBlockTurnsConcurrent(t *testing.T) {
	b := &Block{}
	const issuers, per = 4, 200
	var mu sync.Mutex // the group's lock
	var seq uint64
	var order []uint64 // seqs in issue order
	running := make(chan struct{}, 1)
	var got []uint64 // seqs in the order they ran
	var wg sync.WaitGroup
	for range issuers {
		wg.Go(func() {
			for range per {
				mu.Lock()
				seq++
				s := seq
				b.Issue(s)
				order = append(order, s)
				mu.Unlock()
				wg.Go(func() {
					ord, err := b.start(context.Background(), s)
					if err != nil {
						t.Error(err)
						return
					}
					select {
					case running <- struct{}{}:
					default:
						t.Errorf("call %d (ordinal %d) runs beside another", s, ord)
					}
					got = append(got, s)
					<-running
					b.end(ord)
				})
			}
		})
	}
	wg.Wait()
	if len(got) != len(order) {
		t.Fatalf("%d calls ran of %d", len(got), len(order))
	}
	for i := range order {
		if got[i] != order[i] {
			t.Fatalf("call %d ran %dth, issued %dth", got[i], i, indexOf(order, got[i]))
		}
	}
}

func indexOf(s []uint64, v uint64) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// TestBlockTurnAbandoned: a call whose context ends while it waits for
// its turn returns the context's cause, and so do the later ones (the
// group that cancels one fails: its calls' contexts all end).
func TestBlockTurnAbandoned(t *testing.T) {
	b := &Block{}
	for s := range uint64(3) {
		b.Issue(s + 1)
	}
	first, err := b.start(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errorString("group failed")
	errs := make(chan error, 2)
	for _, s := range []uint64{3, 2} {
		go func() {
			_, err := b.start(ctx, s)
			errs <- err
		}()
	}
	cancel(cause)
	for range 2 {
		if err := <-errs; err != cause {
			t.Errorf("got %v, want the cause", err)
		}
	}
	b.end(first)
}
