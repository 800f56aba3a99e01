package samehost

import (
	"errors"
	"fmt"
	"testing"

	"github.com/godist/godist/transport"
)

// TestTensorsCollectives: all-reduces, broadcasts, all-gathers and
// reduce-scatters of pieces of shared tensors give every member what it
// should, in place too, and leave the inputs they do not write alone.
func TestTensorsCollectives(t *testing.T) {
	for _, world := range []int{2, 3, 5} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			j := newJob(t, world, false, false)
			const k = MinShared // bytes a member contributes to all_gather and reduce_scatter
			mems := j.newTensor(2, (world+1)*k)
			w := int64(world)
			j.run(t, func(m *testMember) error {
				ctx, mem, r, calls := j.ctx, mems[m.q], int64(m.q), 0
				counted := func(what string, n int) error {
					calls += n
					if got := m.e.Calls(); got != int64(calls) {
						return fmt.Errorf("%s: %d calls counted, want %d", what, got, calls)
					}
					return nil
				}
				// all_reduce of a piece whose elements do not divide
				// among the members: SUM, then AVG without and with a
				// final kernel.
				piece := mem[4096 : 4096+MinShared+3*8]
				total := func(i int) int64 { return 1000*w*(w-1)/2 + w*int64(i) }
				for _, red := range []Reduction{sum, avg(world, false), avg(world, true)} {
					fill(piece, func(i int) int64 { return r*1000 + int64(i) })
					if err := m.e.Tensors.AllReduce(ctx, m.next(fpAllReduce), piece, 8, red); err != nil {
						return err
					}
					want := total
					if red.Scale != nil {
						want = func(i int) int64 { return total(i) / w }
					}
					if err := check("all_reduce", piece, want); err != nil {
						return err
					}
					if err := counted("all_reduce", 1); err != nil {
						return err
					}
				}
				// broadcast from every root.
				for root := range world {
					fill(piece, func(i int) int64 { return r*7 + int64(i) })
					if err := m.e.Tensors.Broadcast(ctx, m.next(fpBroadcast), piece, root); err != nil {
						return err
					}
					if err := check(fmt.Sprintf("broadcast from %d", root), piece, func(i int) int64 { return int64(root*7 + i) }); err != nil {
						return err
					}
					if err := counted("broadcast", 1); err != nil {
						return err
					}
				}
				// all_gather: pieces at different offsets into an ordinary
				// out, then in place (each input its member's chunk of a
				// shared out).
				in := mem[8*m.q : 8*m.q+k]
				fill(in, func(i int) int64 { return r<<32 + int64(i) })
				out := make([]byte, world*k)
				if err := m.e.Tensors.AllGather(ctx, m.next(fpAllGather), out, in); err != nil {
					return err
				}
				gathered := func(i int) int64 { return int64(i/(k/8))<<32 + int64(i%(k/8)) }
				if err := check("all_gather", out, gathered); err != nil {
					return err
				}
				if err := check("all_gather's input", in, func(i int) int64 { return r<<32 + int64(i) }); err != nil {
					return err
				}
				clear(mem)
				in = mem[m.q*k : (m.q+1)*k]
				fill(in, func(i int) int64 { return r<<32 + int64(i) })
				if err := m.e.Tensors.AllGather(ctx, m.next(fpAllGather), mem[:world*k], in); err != nil {
					return err
				}
				if err := check("all_gather in place", mem[:world*k], gathered); err != nil {
					return err
				}
				if err := counted("all_gather", 2); err != nil {
					return err
				}
				// reduce_scatter into an ordinary out, then in place.
				in = mem[:world*k]
				initial := func(i int) int64 { return 100*r + int64(i) }
				want := func(i int) int64 { return 100*w*(w-1)/2 + w*(int64(m.q*k/8)+int64(i)) }
				for _, red := range []Reduction{sum, avg(world, true)} {
					fill(in, initial)
					out = make([]byte, k)
					if err := m.e.Tensors.ReduceScatter(ctx, m.next(fpReduceScatter), out, in, red); err != nil {
						return err
					}
					exp := want
					if red.Scale != nil {
						exp = func(i int) int64 { return want(i) / w }
					}
					if err := check("reduce_scatter", out, exp); err != nil {
						return err
					}
					if err := check("reduce_scatter's input", in, initial); err != nil {
						return err
					}
					out = in[m.q*k : (m.q+1)*k]
					if err := m.e.Tensors.ReduceScatter(ctx, m.next(fpReduceScatter), out, in, red); err != nil {
						return err
					}
					if err := check("reduce_scatter in place", out, exp); err != nil {
						return err
					}
					if err := counted("reduce_scatter", 2); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// TestTensorsMisuse: members that pass different pieces to a call that
// needs the same get an *OffsetError naming the other, as does a member
// whose peer's piece does not fit in its tensor; a piece of no shared
// tensor is refused; a member whose tensor is no longer mapped fails the
// others' calls with a *transport.PeerError naming it.
func TestTensorsMisuse(t *testing.T) {
	t.Run("different pieces", func(t *testing.T) {
		j := newJob(t, 2, false, false)
		mems := j.newTensor(2, 2*MinShared)
		j.run(t, func(m *testMember) error {
			off := m.q * 64
			err := m.e.Tensors.AllReduce(j.ctx, m.next(fpAllReduce), mems[m.q][off:off+MinShared], 8, sum)
			var oe *OffsetError
			if !errors.As(err, &oe) || oe.Peer != globalRank(1-m.q) || oe.Mine != off || oe.Theirs != 64-off {
				return fmt.Errorf("got %v, want an OffsetError", err)
			}
			return nil
		})
	})
	t.Run("piece beyond the tensor", func(t *testing.T) {
		j := newJob(t, 2, false, false)
		small, large := 2*MinShared, 3*MinShared
		ids := []uint8{2, 2}
		mems := [][]byte{j.host.mapRegion(globalRank(0), 2, small), j.host.mapRegion(globalRank(1), 2, large)}
		for q, m := range j.members {
			m.e.Tensors.Add(mems[q], &j.host, ids, func() {})
		}
		failed := errors.New("the group failed")
		j.run(t, func(m *testMember) error {
			off := 0
			if m.q == 1 {
				off = small - 8
			}
			err := m.e.Tensors.AllGather(j.ctx, m.next(fpAllGather), make([]byte, 2*MinShared), mems[m.q][off:off+MinShared])
			if m.q == 1 {
				if err != failed {
					return fmt.Errorf("got %v, want the group's failure", err)
				}
				return nil
			}
			j.cancel(failed)
			var oe *OffsetError
			if !errors.As(err, &oe) || oe.Peer != globalRank(1) || oe.Theirs != small-8 {
				return fmt.Errorf("got %v, want an OffsetError", err)
			}
			return nil
		})
	})
	t.Run("not shared", func(t *testing.T) {
		j := newJob(t, 2, false, false)
		m := j.members[0]
		if err := m.e.Tensors.AllReduce(j.ctx, m.next(fpAllReduce), make([]byte, MinShared), 8, sum); err != ErrReleased {
			t.Fatalf("got %v, want ErrReleased", err)
		}
	})
	t.Run("unmapped", func(t *testing.T) {
		j := newJob(t, 2, false, false)
		mems := j.newTensor(2, MinShared)
		j.host.mapRegion(globalRank(1), 2, -1)
		failed := errors.New("the group failed")
		j.run(t, func(m *testMember) error {
			err := m.e.Tensors.Broadcast(j.ctx, m.next(fpBroadcast), mems[m.q], 0)
			if m.q == 1 {
				if err != failed {
					return fmt.Errorf("got %v, want the group's failure", err)
				}
				return nil
			}
			j.cancel(failed)
			var pe *transport.PeerError
			if !errors.As(err, &pe) || pe.Rank != globalRank(1) || !errors.Is(err, errTensorUnmapped) {
				return fmt.Errorf("got %v, want a PeerError naming rank %d", err, globalRank(1))
			}
			return nil
		})
	})
}

// TestTensorsRelease: Release lets go of every tensor, whose pieces are
// then no longer found.
func TestTensorsRelease(t *testing.T) {
	j := newJob(t, 2, false, false)
	mems := j.newTensor(2, MinShared)
	j.newTensor(3, 2*MinShared)
	ts := &j.members[0].e.Tensors
	if p, off := ts.Piece(mems[0]); p == nil || off != 0 {
		t.Fatalf("Piece: %v %d", p, off)
	}
	if p, _ := ts.Piece(mems[0][8:]); p != nil {
		t.Fatal("a piece of less than MinShared found")
	}
	ts.Release()
	if p, _ := ts.Piece(mems[0]); p != nil || len(ts.mu.list) != 0 {
		t.Fatalf("after Release: %d tensors", len(ts.mu.list))
	}
}
