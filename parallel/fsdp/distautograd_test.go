package fsdp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/fsdp"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/tensor"
)

// TestInsideDistributedAutograd: an FSDP model on two trainers, fed rows
// of an embedding table a parameter server holds, inside a distributed
// autograd context each. Distributed backward fires FSDP's hooks with the
// context's gradients, and the reduced shard gradients go into the
// context: each trainer's context holds, for its shards, bit for bit
// what the same FSDP model's plain backward puts in the shards' Grad on
// the same rows; no Grad is set, and the context holds no gradient of
// the unsharded parameters.
func TestInsideDistributedAutograd(t *testing.T) {
	const rows, dim = 10, 6
	table := tensor.Randn(tensor.NewRNG(7), rows, dim)
	idxOf := func(r int) []int64 { return []int64{int64(r), 3, int64(7 - r), 3, 5} }
	build := func() *nn.Sequential {
		rng := tensor.NewRNG(1)
		return nn.NewSequential(nn.NewLinear(rng, dim, 8, true), nn.NewTanh(), nn.NewLinear(rng, 8, 2, true))
	}
	isLinear := func(_ string, m nn.Module) bool { _, ok := m.(*nn.Linear); return ok }
	lossOf := func(y *autograd.Var) *autograd.Var { return autograd.MeanAll(autograd.Square(y)) }

	for _, strategy := range []fsdp.Strategy{fsdp.FullShard, fsdp.NoShard} {
		t.Run(fmt.Sprint(strategy), func(t *testing.T) {
			emb := autograd.Param(table.Clone())
			disttest.Spawn(t, 3, func(g *dist.Group) error {
				ctx := context.Background()
				trainers, err := g.NewGroup(ctx, []int{0, 1})
				if err != nil {
					return err
				}
				reg := rpc.NewRegistry()
				lookup, err := rpc.Register(reg, "lookup", func(_ context.Context, idx []int64) (*distautograd.Var, error) {
					return distautograd.Wrap(autograd.Embedding(tensor.FromInt64(idx), emb)), nil
				})
				if err != nil {
					return err
				}
				name := fmt.Sprintf("trainer%d", g.Rank())
				if g.Rank() == 2 {
					name = "ps"
				}
				return rpc.Run(ctx, name, rpc.Options{Group: g, Functions: reg}, func(ctx context.Context, a *rpc.Agent) error {
					if g.Rank() == 2 {
						return nil
					}
					r := g.Rank()
					opt := fsdp.Options{Strategy: strategy, Wrap: isLinear}
					// The reference: plain backward on the same rows.
					ref, err := fsdp.New(ctx, build(), trainers, opt)
					if err != nil {
						return err
					}
					x := autograd.Embedding(tensor.FromInt64(idxOf(r)), autograd.Const(table))
					if err := ref.Backward(ctx, lossOf(ref.Forward(x))); err != nil {
						return err
					}
					model, err := fsdp.New(ctx, build(), trainers, opt)
					if err != nil {
						return err
					}
					cctx, id, err := distautograd.NewContext(ctx, a)
					if err != nil {
						return err
					}
					defer distautograd.Release(cctx, id)
					rowsVar, err := lookup.Call(cctx, a, "ps", idxOf(r))
					if err != nil {
						return err
					}
					if err := distautograd.Backward(cctx, id, lossOf(model.Forward(rowsVar.Var))); err != nil {
						return err
					}
					if err := model.Wait(ctx); err != nil {
						return err
					}
					grads, err := distautograd.GetGradients(cctx, id)
					if err != nil {
						return err
					}
					shards, want := model.Parameters(), ref.Parameters()
					if len(grads) != len(shards) {
						return fmt.Errorf("trainer %d: the context holds %d gradients, want one a shard (%d)", r, len(grads), len(shards))
					}
					for k, p := range shards {
						if g := grads[p]; g == nil || !tensor.Equal(g, want[k].Grad()) {
							return fmt.Errorf("trainer %d: shard %d's gradient in the context %v, plain backward gives %v", r, k, g, want[k].Grad())
						}
						if p.Grad() != nil {
							return fmt.Errorf("trainer %d: shard %d's Grad set by a distributed pass", r, k)
						}
					}
					return nil
				})
			})
		})
	}
}
