package dist_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
)

// TestEveryCollectiveEveryOpAndDType backs the claim that every collective
// takes every reduce op on every dtype where it makes sense: the
// collectives that reduce (reduce, reduce_scatter in both forms; all_reduce
// has TestAllReduceEveryOpAndDType) with every op on every dtype (bitwise
// ops on integers only), and those that move data (broadcast, all_gather
// in both forms, gather, scatter, all_to_all in both forms) on every dtype,
// over every transport spawnBoth knows, against values computed here.
func TestEveryCollectiveEveryOpAndDType(t *testing.T) {
	for _, world := range []int{2, 3} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			spawnBoth(t, world, func(g *dist.Group) error {
				ctx := bg(t)
				n := 2*world + 1
				for _, d := range dtypes {
					for _, op := range allOps {
						if d.IsFloat() && (op == dist.BAnd || op == dist.BOr || op == dist.BXor) {
							continue
						}
						if err := reducing(ctx, g, d, op, n); err != nil {
							return fmt.Errorf("%v %v: %w", d, op, err)
						}
					}
					if err := moving(ctx, g, d, n); err != nil {
						return fmt.Errorf("%v: %w", d, err)
					}
				}
				return nil
			})
		})
	}
	// Nine ranks: reduce-scatters of a few elements take the whole-buffer
	// plan (algo.ChooseReduceScatter), not the ring.
	disttest.SpawnWith(t, 9, disttest.Options{}, func(_ *disttest.Job, g *dist.Group) error {
		ctx := bg(t)
		for _, d := range []tensor.DType{tensor.Float32, tensor.Int64} {
			for _, op := range []dist.ReduceOp{dist.Sum, dist.Avg, dist.Max} {
				if op == dist.Avg && !d.IsFloat() {
					continue
				}
				if err := reducing(ctx, g, d, op, 3); err != nil {
					return fmt.Errorf("9 ranks %v %v: %w", d, op, err)
				}
			}
		}
		return nil
	})
}

// reducing runs reduce, reduce_scatter and reduce_scatter_tensor with op
// on n elements of dtype d a rank.
func reducing(ctx context.Context, g *dist.Group, d tensor.DType, op dist.ReduceOp, n int) error {
	world, r := g.Size(), g.Rank()
	root := world - 1
	y := input(d, op, r, n)
	if err := g.Reduce(ctx, y, root, op); err != nil {
		return err
	}
	want := func(i int) float64 { return reduceRef(op, world, i) }
	if r != root {
		want = func(i int) float64 { return value(op, r, i) }
	}
	if err := expect(y, want, "reduce"); err != nil {
		return err
	}
	mine := func(i int) float64 { return reduceRef(op, world, r*n+i) }
	out := tensor.New(d, n)
	if err := g.ReduceScatterTensor(ctx, out, input(d, op, r, world*n), op); err != nil {
		return err
	}
	if err := expect(out, mine, "reduce_scatter_tensor"); err != nil {
		return err
	}
	full := input(d, op, r, world*n)
	ins := make([]*tensor.Tensor, world)
	for k := range ins {
		ins[k] = full.Narrow(0, k*n, n).Contiguous()
	}
	out = tensor.New(d, n)
	if err := g.ReduceScatter(ctx, out, ins, op); err != nil {
		return err
	}
	return expect(out, mine, "reduce_scatter")
}

// moving runs the collectives that move data without reducing it on n
// elements of dtype d a rank: element i of rank r's input is value(Sum, r, i).
func moving(ctx context.Context, g *dist.Group, d tensor.DType, n int) error {
	world, r := g.Size(), g.Rank()
	in := func(rank int) *tensor.Tensor { return input(d, dist.Sum, rank, n) }
	from := func(rank int) func(i int) float64 { return func(i int) float64 { return value(dist.Sum, rank, i) } }
	pieces := func() []*tensor.Tensor {
		ps := make([]*tensor.Tensor, world)
		for k := range ps {
			ps[k] = tensor.New(d, n)
		}
		return ps
	}

	b := in(r)
	if err := g.Broadcast(ctx, b, 1%world); err != nil {
		return err
	}
	if err := expect(b, from(1%world), "broadcast"); err != nil {
		return err
	}

	all := tensor.New(d, world*n)
	if err := g.AllGatherIntoTensor(ctx, all, in(r)); err != nil {
		return err
	}
	if err := expect(all, func(i int) float64 { return value(dist.Sum, i/n, i%n) }, "all_gather_into_tensor"); err != nil {
		return err
	}
	outs := pieces()
	if err := g.AllGather(ctx, outs, in(r)); err != nil {
		return err
	}
	for k, o := range outs {
		if err := expect(o, from(k), fmt.Sprintf("all_gather piece %d", k)); err != nil {
			return err
		}
	}

	var gathered []*tensor.Tensor
	if r == 0 {
		gathered = pieces()
	}
	if err := g.Gather(ctx, in(r), gathered, 0); err != nil {
		return err
	}
	for k, o := range gathered {
		if err := expect(o, from(k), fmt.Sprintf("gather piece %d", k)); err != nil {
			return err
		}
	}

	// Scatter: root world-1 sends piece k (rank k's input values) to rank k.
	var scattered []*tensor.Tensor
	if r == world-1 {
		scattered = make([]*tensor.Tensor, world)
		for k := range scattered {
			scattered[k] = in(k)
		}
	}
	piece := tensor.New(d, n)
	if err := g.Scatter(ctx, piece, scattered, world-1); err != nil {
		return err
	}
	if err := expect(piece, from(r), "scatter"); err != nil {
		return err
	}

	// all_to_all: rank r's piece k is value(Sum, r, k·n+i); rank r receives
	// piece r of every rank k, value(Sum, k, r·n+i).
	send := input(d, dist.Sum, r, world*n)
	recv := tensor.New(d, world*n)
	if err := g.AllToAllSingle(ctx, recv, send, nil, nil); err != nil {
		return err
	}
	if err := expect(recv, func(i int) float64 { return value(dist.Sum, i/n, r*n+i%n) }, "all_to_all_single"); err != nil {
		return err
	}
	sends, recvs := make([]*tensor.Tensor, world), pieces()
	for k := range sends {
		sends[k] = send.Narrow(0, k*n, n).Contiguous()
	}
	if err := g.AllToAll(ctx, recvs, sends); err != nil {
		return err
	}
	for k, o := range recvs {
		if err := expect(o, func(i int) float64 { return value(dist.Sum, k, r*n+i) }, fmt.Sprintf("all_to_all piece %d", k)); err != nil {
			return err
		}
	}
	return nil
}
