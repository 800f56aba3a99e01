package ddp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/tensor"
)

// TestInsideDistributedAutograd is the model of PyTorch's tutorial
// "Combining Distributed DataParallel with Distributed RPC Framework" in
// miniature: a parameter server (rank 2) holds an embedding table; two
// trainers (ranks 0 and 1) each look their indices up in it by RPC and
// run the rows through a DDP-wrapped linear layer of their own, inside a
// distributed autograd context each. Distributed backward fires DDP's
// hooks, so the trainers' linear gradients in their contexts are the
// average over both trainers of what local autograd gives each, and the
// table's gradient in each trainer's context on the parameter server is
// that trainer's own. No Grad is replaced (with GradientAsBucketView a
// parameter's Grad is DDP's bucket view from the start, which the
// reduction fills; the context holds copies, never the views).
func TestInsideDistributedAutograd(t *testing.T) {
	const rows, dim, out = 10, 4, 3
	table := tensor.Randn(tensor.NewRNG(7), rows, dim)
	idxOf := func(r int) []int64 { return []int64{int64(r), 3, int64(7 - r), 3} }
	target := func(r int) *tensor.Tensor { return tensor.Randn(tensor.NewRNG(uint64(50+r)), 4, out) }
	lossOf := func(y *autograd.Var, r int) *autograd.Var {
		return autograd.MeanAll(autograd.Square(autograd.Sub(y, autograd.Const(target(r)))))
	}
	// Local reference: rank 0's layer (DDP broadcasts it), each trainer's
	// loss on its own rows; the layer's gradient averaged, the table's
	// per trainer.
	wantLin := map[string]*tensor.Tensor{}
	wantTable := make([]*tensor.Tensor, 2)
	for r := range 2 {
		lin := nn.NewLinear(tensor.NewRNG(0), dim, out, true)
		e := autograd.Param(table.Clone())
		x := autograd.Embedding(tensor.FromInt64(idxOf(r)), e)
		if err := lossOf(nn.Call(lin, x), r).Backward(nil); err != nil {
			t.Fatal(err)
		}
		for _, p := range nn.NamedParameters(lin) {
			g := new(tensor.Tensor).MulScalar(p.Value.Grad(), 0.5)
			if w := wantLin[p.Name]; w != nil {
				g = new(tensor.Tensor).Add(w, g)
			}
			wantLin[p.Name] = g
		}
		wantTable[r] = e.Grad()
	}

	for _, opt := range []ddp.Options{{}, {GradientAsBucketView: true}} {
		t.Run(fmt.Sprintf("GradientAsBucketView=%v", opt.GradientAsBucketView), func(t *testing.T) {
			emb := autograd.Param(table.Clone()) // the parameter server's
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
				tableGrad, err := rpc.Register(reg, "tableGrad", func(ctx context.Context, id int64) (*tensor.Tensor, error) {
					grads, err := distautograd.GetGradients(ctx, distautograd.ContextID(id))
					if err != nil {
						return nil, err
					}
					return grads[emb], nil
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
						return nil // serves until the trainers are done
					}
					r := g.Rank()
					lin := nn.NewLinear(tensor.NewRNG(uint64(r)), dim, out, true)
					model, err := ddp.New(ctx, lin, trainers, opt)
					if err != nil {
						return err
					}
					before := make([]*tensor.Tensor, 0, 2)
					for _, p := range nn.NamedParameters(lin) {
						before = append(before, p.Value.Grad()) // nil, or DDP's bucket view
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
					if err := distautograd.Backward(cctx, id, lossOf(model.Forward(rowsVar.Var), r)); err != nil {
						return err
					}
					if err := model.Wait(ctx); err != nil {
						return err
					}
					grads, err := distautograd.GetGradients(cctx, id)
					if err != nil {
						return err
					}
					for k, p := range nn.NamedParameters(lin) {
						got := grads[p.Value]
						if got == nil {
							return fmt.Errorf("trainer %d: %s has no gradient in the context", r, p.Name)
						}
						if err := close(got, wantLin[p.Name], 1e-6); err != nil {
							return fmt.Errorf("trainer %d: %s in the context, against the average of local gradients: %w", r, p.Name, err)
						}
						if p.Value.Grad() != before[k] {
							return fmt.Errorf("trainer %d: %s's Grad was replaced by a distributed pass", r, p.Name)
						}
						if g := p.Value.Grad(); g != nil && tensor.SharesStorage(g, got) {
							return fmt.Errorf("trainer %d: %s's gradient in the context is a view of DDP's bucket", r, p.Name)
						}
					}
					tg, err := tableGrad.Call(ctx, a, "ps", int64(id))
					if err != nil {
						return err
					}
					if tg == nil || !tensor.Equal(tg, wantTable[r]) {
						return fmt.Errorf("trainer %d: the table's gradient in its context on the parameter server %v, local %v", r, tg, wantTable[r])
					}
					return nil
				})
			})
			if emb.Grad() != nil {
				t.Errorf("the table's Grad was set by a distributed pass")
			}
		})
	}
}

// TestForwardWithoutWait: a forward pass after a backward pass whose
// buckets were never waited for is an error naming Wait, not an
// iteration that goes on with gradients left unaveraged.
func TestForwardWithoutWait(t *testing.T) {
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		m, err := ddp.New(ctx, mlp(uint64(g.Rank())), g, ddp.Options{})
		if err != nil {
			return err
		}
		x, y := batch(g.Rank(), 0, 4)
		if err := nn.CrossEntropy(m.Forward(autograd.Const(x)), y).Backward(nil); err != nil {
			return err
		}
		m.Forward(autograd.Const(x)) // no Wait
		if err := m.Wait(ctx); err == nil || !strings.Contains(err.Error(), "Wait") {
			return fmt.Errorf("a forward after an unwaited backward: %v, want an error naming Wait", err)
		}
		return nil
	})
}
