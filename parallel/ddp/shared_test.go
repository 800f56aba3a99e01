package ddp_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/tensor"
)

// broad is a model whose buckets are large enough (655 KB in all) for
// all-reduces through shared memory.
func broad(seed uint64) *nn.Sequential {
	rng := tensor.NewRNG(seed)
	return nn.NewSequential(nn.NewLinear(rng, 6, 16384, true), nn.NewTanh(), nn.NewLinear(rng, 16384, 3, true))
}

// averageGradients computes, in one process, the average over ranks of the
// gradients of the per-rank losses, starting from build(0)'s weights.
func averageGradients(build func(uint64) *nn.Sequential, world, step, n int) map[string]*tensor.Tensor {
	m := build(0)
	sum := map[string]*tensor.Tensor{}
	for r := range world {
		nn.ZeroGrad(m, true)
		x, y := batch(r, step, n)
		nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y).Backward(nil)
		for _, p := range nn.NamedParameters(m) {
			if sum[p.Name] == nil {
				sum[p.Name] = p.Value.Grad().Clone()
			} else {
				sum[p.Name].Add(sum[p.Name], p.Value.Grad())
			}
		}
	}
	for _, g := range sum {
		g.Scale(1 / float64(world))
	}
	return sum
}

// TestSharedMemoryBuckets: over TCP with shared memory, DDP's buckets are
// pieces of one shared tensor and their all-reduces go through shared
// memory, before and after the buckets are rebuilt, with gradients in the
// buckets or copied there; the gradients are the average, as elsewhere.
func TestSharedMemoryBuckets(t *testing.T) {
	for _, world := range []int{2, 3} {
		for _, opt := range []ddp.Options{{}, {GradientAsBucketView: true, BucketCapMB: 0.4, FirstBucketCapMB: 0.3}} {
			t.Run(fmt.Sprintf("world%d/%+v", world, opt), func(t *testing.T) {
				disttest.SpawnWith(t, world, disttest.Options{TCP: true, SharedMemory: true, Timeout: 30 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
					ctx := context.Background()
					var shared, all atomic.Int64
					opt := opt
					opt.CommHook = func(g *dist.Group, b *ddp.GradBucket) *dist.Work {
						all.Add(1)
						if dist.SharedAllReduceApplies(g, b.Buffer) {
							shared.Add(1)
						}
						return ddp.AllReduceHook(g, b)
					}
					m, err := ddp.New(ctx, broad(uint64(g.Rank())), g, opt)
					if err != nil {
						return err
					}
					for step := range 3 {
						nn.ZeroGrad(m, step%2 == 0)
						x, y := batch(g.Rank(), step, 8)
						if err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y)); err != nil {
							return err
						}
						want := averageGradients(broad, world, step, 8)
						for _, p := range nn.NamedParameters(m.Module) {
							if err := close(p.Value.Grad(), want[p.Name], 1e-5); err != nil {
								return fmt.Errorf("step %d %s: %w", step, p.Name, err)
							}
						}
					}
					if shared.Load() == 0 {
						return fmt.Errorf("rank %d: none of %d bucket all-reduces went through shared memory", g.Rank(), all.Load())
					}
					return nil
				})
			})
		}
	}
}

// TestJoinSharedMemoryBuckets: under Join, the member that runs out of
// data shadows the others' shared-memory all-reduces with its own bucket
// memory, and both finish.
func TestJoinSharedMemoryBuckets(t *testing.T) {
	for _, tcp := range []bool{true, false} {
		t.Run(fmt.Sprintf("tcp+shm=%v", tcp), func(t *testing.T) { joinShared(t, tcp) })
	}
}

func joinShared(t *testing.T, tcp bool) {
	disttest.SpawnWith(t, 2, disttest.Options{TCP: tcp, SharedMemory: tcp, Timeout: 30 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
		ctx := context.Background()
		var shadowShared atomic.Int64
		joined := false
		hook := func(g *dist.Group, b *ddp.GradBucket) *dist.Work {
			if joined && dist.SharedAllReduceApplies(g, b.Buffer) {
				shadowShared.Add(1)
			}
			return ddp.AllReduceHook(g, b)
		}
		m, err := ddp.New(ctx, broad(0), g, ddp.Options{CommHook: hook})
		if err != nil {
			return err
		}
		batches := 3 + 2*g.Rank()
		var last map[string]*tensor.Tensor
		err = ddp.Join(ctx, []*ddp.DDP{m}, func() error {
			for s := range batches {
				nn.ZeroGrad(m, true)
				x, y := batch(g.Rank(), s, 4)
				if err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y)); err != nil {
					return err
				}
				last = map[string]*tensor.Tensor{}
				for _, p := range nn.NamedParameters(m.Module) {
					last[p.Name] = p.Value.Grad().Clone()
				}
			}
			joined = true // what the hook sees from now on are shadows
			return nil
		})
		if err != nil {
			return err
		}
		if g.Rank() == 1 {
			// Its last step was reduced with rank 0's zeros: the average
			// is half its own gradient (no step was taken, so the weights
			// are still rank 0's initial ones).
			ref := broad(0)
			x, y := batch(1, batches-1, 4)
			nn.CrossEntropy(nn.Call(ref, autograd.Const(x)), y).Backward(nil)
			for _, p := range nn.NamedParameters(ref) {
				want := p.Value.Grad().Clone()
				want.Scale(0.5)
				if err := close(last[p.Name], want, 1e-5); err != nil {
					return fmt.Errorf("rank 1's last step, %s: %w", p.Name, err)
				}
			}
		}
		if g.Rank() == 0 && tcp && shadowShared.Load() == 0 {
			return fmt.Errorf("rank 0's shadow all-reduces did not go through shared memory")
		}
		return g.Barrier(ctx)
	})
}
