package dist_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
)

// TestSharedTensor: collectives and sends of a NewSharedTensor over TCP
// with shared memory go by reference (the peers read the sender's memory)
// and give the results ordinary tensors give; over the in-process
// transport it is an ordinary tensor.
func TestSharedTensor(t *testing.T) {
	const n = 300_000 // 1.2 MB: halving-doubling for 2 ranks, pieces for 3
	for _, c := range []struct {
		world int
		shm   bool
	}{{2, true}, {3, true}, {2, false}} {
		t.Run(fmt.Sprintf("world%d/tcp+shm=%v", c.world, c.shm), func(t *testing.T) {
			opt := disttest.Options{TCP: c.shm, SharedMemory: c.shm}
			disttest.SpawnWith(t, c.world, opt, func(_ *disttest.Job, g *dist.Group) error {
				ctx := context.Background()
				r := g.Rank()
				x, err := g.NewSharedTensor(ctx, tensor.Float32, n)
				if err != nil {
					return err
				}
				plain := tensor.New(tensor.Float32, n)
				for it := range 3 {
					seed := uint64(100*it + r)
					x.Copy(randFloat32(seed, n))
					plain.Copy(x)
					if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
						return err
					}
					if err := g.AllReduce(ctx, plain, dist.Sum); err != nil {
						return err
					}
					xs, ps := x.Float32s(), plain.Float32s()
					for i := range xs {
						if xs[i] != ps[i] {
							return fmt.Errorf("iteration %d: shared all_reduce [%d] = %v, ordinary tensor %v", it, i, xs[i], ps[i])
						}
					}
				}
				// A send of a piece: the receiver gets the bytes as they
				// were when Send was called, though the sender overwrites
				// them as soon as Send returns.
				piece := x.Narrow(0, 1000, 50_000)
				if r == 0 {
					piece.Copy(randFloat32(7, 50_000))
					if err := g.Send(ctx, piece, 1, 0); err != nil {
						return err
					}
					piece.Zero()
				} else if r == 1 {
					got := tensor.New(tensor.Float32, 50_000)
					if _, err := g.Recv(ctx, got, 0, 0); err != nil {
						return err
					}
					want := randFloat32(7, 50_000).Float32s()
					for i, v := range got.Float32s() {
						if v != want[i] {
							return fmt.Errorf("received [%d] = %v, sent %v", i, v, want[i])
						}
					}
				}
				lent := dist.LentSends(g)
				if c.shm && lent == 0 {
					return fmt.Errorf("rank %d: no send went by reference", r)
				}
				if !c.shm && lent != 0 {
					return fmt.Errorf("rank %d: %d sends by reference without shared memory", r, lent)
				}
				return nil
			})
		})
	}
}
