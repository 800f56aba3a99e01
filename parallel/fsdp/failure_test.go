package fsdp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/fsdp"
	"github.com/godist/godist/tensor"
)

// TestPeerDeathMidCollective: at world 4, rank 3 dies in the middle of a
// step, at a point every survivor has reached too, so that the survivors'
// next collective is one rank 3 never joins:
//   - "gather": after block 0's forward, before block 1's all-gather
//     (under NoShard, which gathers nothing, the gradient all-reduce);
//   - "reduce": in backward, when block 0's output gradient is ready: block
//     1's gradients are on their way, block 0's and the root's are not.
//
// Every survivor's Backward must fail with a *dist.RankError naming rank 3
// and saying which collective failed, within 2 s of the death; under
// HybridShard that includes ranks 0 and 1, the other "node", which share
// no shard group with rank 3 (they waited for the replicas' all-reduce
// until a peer's timeout before FSDP watched the whole group).
func TestPeerDeathMidCollective(t *testing.T) {
	const world, victim = 4, 3
	strategies := []fsdp.Options{
		{Strategy: fsdp.FullShard, Wrap: isBlock},
		{Strategy: fsdp.ShardGradOp, Wrap: isBlock},
		{Strategy: fsdp.NoShard, Wrap: isBlock},
		{Strategy: fsdp.HybridShard, ShardSize: 2, Wrap: isBlock},
	}
	for _, opt := range strategies {
		for _, where := range []string{"gather", "reduce"} {
			t.Run(fmt.Sprintf("%v/%s", opt.Strategy, where), func(t *testing.T) {
				var survivors sync.WaitGroup // every survivor is where rank 3 dies
				survivors.Add(world - 1)
				var killedAt atomic.Int64
				disttest.SpawnWith(t, world, disttest.Options{Timeout: 20 * time.Second}, func(j *disttest.Job, g *dist.Group) error {
					ctx := context.Background()
					net := gpt(uint64(g.Rank()))
					m, err := fsdp.New(ctx, net, g, opt)
					if err != nil {
						return err
					}
					step := 0
					dead := false
					// point runs on every rank, at step 1, where the victim
					// dies.
					point := func() {
						if step != 1 {
							return
						}
						if g.Rank() != victim {
							survivors.Done()
							return
						}
						survivors.Wait()
						killedAt.Store(time.Now().UnixNano())
						j.Kill(victim)
						dead = true
					}
					// Registered after New, so FSDP's own hooks run first.
					net.Blocks[0].RegisterForwardHook(func(_ nn.Module, _, y *autograd.Var) *autograd.Var {
						switch where {
						case "gather":
							point()
						case "reduce":
							y.RegisterHook(func(*tensor.Tensor) *tensor.Tensor { point(); return nil })
						}
						return nil
					})
					for ; step < 3; step++ {
						x, y := tokens(g.Rank(), step)
						err := m.Backward(ctx, models.Loss(nn.Call(m, autograd.Const(x)), y))
						if dead {
							return nil // the victim: its own endpoint is gone
						}
						if step == 0 {
							if err != nil {
								return fmt.Errorf("step 0: %v", err)
							}
							continue
						}
						took := time.Since(time.Unix(0, killedAt.Load()))
						var re *dist.RankError
						if !errors.As(err, &re) || re.Rank != victim {
							return fmt.Errorf("step %d Backward: %v, want a *dist.RankError naming rank %d", step, err, victim)
						}
						says := "fsdp: " + where
						switch {
						case opt.Strategy == fsdp.NoShard:
							says = "fsdp: reduce" // it gathers nothing
						case opt.Strategy == fsdp.HybridShard && g.Rank()/2 != victim/2:
							// The other node's shard group loses no member:
							// its next call, whichever, gives up when the
							// whole group fails.
							says = "fsdp: "
						}
						if !strings.Contains(err.Error(), says) {
							return fmt.Errorf("step %d Backward: %v, want it to say %q", step, err, says)
						}
						if took > 2*time.Second {
							return fmt.Errorf("the error came %v after rank %d died", took, victim)
						}
						// The model stays failed.
						step++
						x, y = tokens(g.Rank(), step)
						err = m.Backward(ctx, models.Loss(nn.Call(m, autograd.Const(x)), y))
						if !errors.As(err, &re) || re.Rank != victim {
							return fmt.Errorf("the step after: %v, want a *dist.RankError naming rank %d", err, victim)
						}
						return nil
					}
					return errors.New("no step failed")
				})
			})
		}
	}
}
