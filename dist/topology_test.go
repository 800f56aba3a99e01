package dist

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// hostGroups is a world of in-process ranks placed on hosts by labels.
func hostGroups(t *testing.T, labels []string) []*Group {
	t.Helper()
	m := transport.NewInProc(len(labels), transport.Faults{})
	m.SetHosts(labels)
	gs := make([]*Group, len(labels))
	for r, ep := range m.Endpoints {
		gs[r] = FromEndpoint(ep, nil, "inproc", time.Minute)
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Destroy()
		}
		m.Close()
	})
	return gs
}

// onAll runs fn on every rank at once and fails the test with each
// rank's error.
func onAll(t *testing.T, gs []*Group, fn func(g *Group) error) {
	t.Helper()
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Go(func() { errs[r] = fn(g) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestTopologyFromHosts(t *testing.T) {
	gs := hostGroups(t, []string{"b", "b", "a", "a", "b"})
	want := [][]int{{0, 1, 4}, {2, 3}}
	for r, g := range gs {
		if got := g.Topology().Hosts; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("rank %d: topology %v, want %v", r, got, want)
		}
	}
	// A subgroup's topology is its members' (group ranks).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	subs := make([]*Group, len(gs))
	onAll(t, gs, func(g *Group) error {
		s, err := g.NewGroup(ctx, []int{1, 2, 3})
		subs[g.Rank()] = s
		return err
	})
	for _, r := range []int{1, 2, 3} {
		if got := subs[r].Topology().Hosts; fmt.Sprint(got) != "[[0] [1 2]]" {
			t.Errorf("subgroup of ranks 1..3, rank %d: topology %v, want [[0] [1 2]]", r, got)
		}
	}
}

// TestCollectivesAcrossHosts runs every collective on groups spread over
// hosts (2×2, 2×3, 3 hosts of 1, 2 and 2, 4×1) at sizes that take every
// algorithm the cost model can choose, and checks the results exactly;
// where the hosts are uniform with more than one rank each, a large
// all-reduce (4 MiB: at 1 MiB the default model's 10 Gbit/s network
// leaves the two-level schedule one segment, and halving-doubling wins)
// runs the two-level schedule.
func TestCollectivesAcrossHosts(t *testing.T) {
	for _, labels := range [][]string{
		{"a", "a", "b", "b"},
		{"a", "a", "a", "b", "b", "b"},
		{"a", "b", "b", "c", "c"},
		{"a", "b", "c", "d"},
	} {
		t.Run(strings.Join(labels, ""), func(t *testing.T) {
			gs := hostGroups(t, labels)
			n := len(gs)
			topo := gs[0].Topology()
			per, uniform := topo.Uniform()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, count := range []int{1, 7, 1000, 1 << 14, 1<<18 + 3, 1<<20 + 3} {
				c, _ := gs[0].Choice("all_reduce", count, tensor.Float32)
				if uniform && per > 1 && count >= 1<<20 && !strings.HasPrefix(c.Algo, "two-level") {
					t.Errorf("all_reduce of %d elements on %v: %s, want two-level", count, topo.Hosts, c.Algo)
				}
				if c.Predicted <= 0 {
					t.Errorf("all_reduce of %d elements: predicted %v", count, c.Predicted)
				}
				onAll(t, gs, func(g *Group) error {
					r := g.Rank()
					x := make([]float32, count)
					for i := range x {
						x[i] = float32((r+1)*(i%97) + r)
					}
					tx := tensor.FromFloat32(x, count)
					if err := g.AllReduce(ctx, tx, Sum); err != nil {
						return err
					}
					for i, v := range tx.Float32s() {
						want := float32(0)
						for q := range n {
							want += float32((q+1)*(i%97) + q)
						}
						if v != want {
							return fmt.Errorf("all_reduce (%s) of %d: [%d] = %v, want %v", c.Algo, count, i, v, want)
						}
					}
					// An average scales once: integers that divide.
					ty := tensor.Full(tensor.Float32, float64(n*(r+1)), count)
					if err := g.AllReduce(ctx, ty, Avg); err != nil {
						return err
					}
					if want := float32(n+1) * float32(n) / 2; slices.ContainsFunc(ty.Float32s(), func(v float32) bool { return v != want }) {
						return fmt.Errorf("all_reduce avg of %d: got %v..., want %v", count, ty.Float32s()[:1], want)
					}
					// Broadcast from the last rank.
					tb := tensor.Full(tensor.Float32, float64(r), count)
					if err := g.Broadcast(ctx, tb, n-1); err != nil {
						return err
					}
					if slices.ContainsFunc(tb.Float32s(), func(v float32) bool { return v != float32(n-1) }) {
						return fmt.Errorf("broadcast of %d: got %v..., want %d", count, tb.Float32s()[:1], n-1)
					}
					// All-gather and reduce-scatter.
					in := tensor.Full(tensor.Float32, float64(r), count)
					out := tensor.New(tensor.Float32, n*count)
					if err := g.AllGatherIntoTensor(ctx, out, in); err != nil {
						return err
					}
					for i, v := range out.Float32s() {
						if v != float32(i/count) {
							return fmt.Errorf("all_gather of %d: [%d] = %v, want %d", count, i, v, i/count)
						}
					}
					rs := tensor.New(tensor.Float32, count)
					if err := g.ReduceScatterTensor(ctx, rs, out, Sum); err != nil {
						return err
					}
					if want := float32(n * r); slices.ContainsFunc(rs.Float32s(), func(v float32) bool { return v != want }) {
						return fmt.Errorf("reduce_scatter of %d: got %v..., want %v", count, rs.Float32s()[:1], want)
					}
					return g.Barrier(ctx)
				})
				if t.Failed() {
					return
				}
			}
		})
	}
}

// TestGroupModel: a world's groups choose with algo.DefaultModel unless
// told otherwise.
func TestGroupModel(t *testing.T) {
	gs := hostGroups(t, []string{"a", "b"})
	if m := gs[0].Model(); m != algo.DefaultModel {
		t.Errorf("model %v, want the default %v", m, algo.DefaultModel)
	}
}

// TestJoinedMessages runs the two-level all-gather and reduce-scatter,
// whose local steps send a host's worth of ranges to one peer as one
// message (algo.Xfer.Joined), on uneven and even hosts' ranks, in one
// and several segments, at sizes that leave some of a message's pieces
// empty: the executor sends each run with one vectored frame and spreads
// it over the ranges on arrival, in place or through scratch space.
func TestJoinedMessages(t *testing.T) {
	for _, labels := range [][]string{
		{"a", "a", "b", "b"},
		{"a", "a", "b", "b", "c", "c"},
		{"a", "a", "a", "b", "b", "b"},
	} {
		for _, pin := range []string{"two-level/1", "two-level/3"} {
			t.Run(strings.Join(labels, "")+"/"+pin, func(t *testing.T) {
				gs := hostGroups(t, labels)
				for _, g := range gs {
					g.world.pins = map[string]string{"all_gather": pin, "reduce_scatter": pin}
				}
				n := len(gs)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for _, count := range []int{1, 2, 5, 1000, 1<<15 + 3} {
					for _, op := range []string{"all_gather", "reduce_scatter"} {
						if c, _ := gs[0].Choice(op, count*n, tensor.Float32); !strings.HasPrefix(c.Algo, "two-level") {
							t.Fatalf("%s of %d elements pinned to %s: runs %s", op, count*n, pin, c.Algo)
						}
					}
					onAll(t, gs, func(g *Group) error {
						r := g.Rank()
						in := tensor.New(tensor.Float32, count)
						for i, x := range in.Float32s() {
							in.Float32s()[i] = x + float32(r*count+i)
						}
						out := tensor.New(tensor.Float32, n*count)
						if err := g.AllGatherIntoTensor(ctx, out, in); err != nil {
							return err
						}
						for i, v := range out.Float32s() {
							if v != float32(i) {
								return fmt.Errorf("all_gather of %d a rank: [%d] = %v, want %d", count, i, v, i)
							}
						}
						rs := tensor.New(tensor.Float32, count)
						if err := g.ReduceScatterTensor(ctx, rs, out, Sum); err != nil {
							return err
						}
						for i, v := range rs.Float32s() {
							if want := float32(n * (r*count + i)); v != want {
								return fmt.Errorf("reduce_scatter of %d a rank: [%d] = %v, want %v", count, i, v, want)
							}
						}
						return nil
					})
					if t.Failed() {
						return
					}
				}
			})
		}
	}
}

// TestChoiceAfterBarrier: across hosts Choice gives, beside the time from
// a common start, the time after a barrier, whose ranks leave it apart
// (each host's leader first): shorter for the leaders' broadcast (the
// released rank's data is nearer), no shorter for an all-reduce; on one
// host the two are one.
func TestChoiceAfterBarrier(t *testing.T) {
	gs := hostGroups(t, []string{"a", "a", "b", "b"})
	// The lab's model at 1 Gbit/s (hostcmp, 2 hosts × 2 ranks), under
	// which the barrier is two-level.
	for _, g := range gs {
		g.world.model = algo.Model{
			Local:   algo.Link{Latency: 7500 * time.Nanosecond, Bandwidth: 3.9e9},
			Network: algo.Link{Latency: 32 * time.Microsecond, Bandwidth: 0.121e9},
			Reduce:  8e9, Call: 5 * time.Microsecond, CPUs: 1, Stack: 0.244e9,
		}
	}
	if c, _ := gs[0].Choice("barrier", 0, tensor.Float32); c.Algo != "two-level" {
		t.Fatalf("barrier: %s, want two-level", c.Algo)
	}
	b, _ := gs[0].Choice("broadcast", 2, tensor.Float32)
	if b.AfterBarrier() <= 0 || b.AfterBarrier() >= b.Predicted {
		t.Errorf("broadcast of 8 B (%s): %v after a barrier, %v from a common start; want shorter after it", b.Algo, b.AfterBarrier(), b.Predicted)
	}
	a, _ := gs[0].Choice("all_reduce", 2, tensor.Float32)
	if a.AfterBarrier() < a.Predicted {
		t.Errorf("all_reduce of 8 B (%s): %v after a barrier, %v from a common start; want no shorter", a.Algo, a.AfterBarrier(), a.Predicted)
	}
	one := hostGroups(t, []string{"a", "a"})
	if c, _ := one[0].Choice("all_reduce", 1<<20, tensor.Float32); c.AfterBarrier() != c.Predicted {
		t.Errorf("one host, all_reduce of 4 MiB (%s): %v after a barrier, %v from a common start; want one time", c.Algo, c.AfterBarrier(), c.Predicted)
	}
}
