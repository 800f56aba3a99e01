package fsdp_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/fsdp"
	"github.com/godist/godist/tensor"
)

// TestFullStateDicts: after 3 steps of grouped AdamW under FullShard at
// world 4, the full model and optimizer state dicts gathered on rank 0
// (nil elsewhere; the model's equal to FullStateDict's) load into a plain
// module and its optimizer (strictly, by the module's names), and back
// into FSDP at world 2 under ShardGradOp and NoShard: the loss of step 3
// over the same global batch, and the weights after it, are those of the
// run that went on.
func TestFullStateDicts(t *testing.T) {
	group := func(name string, p *autograd.Var) int {
		if p.Value().Dim() >= 2 && !noDecayName(name) {
			return 0
		}
		return 1
	}
	var (
		mu        sync.Mutex
		sd, osd   map[string]*tensor.Tensor // rank 0's, before step 3
		want      float64                   // step 3's loss
		wantAfter map[string]*tensor.Tensor // the weights after it
	)
	disttest.SpawnWith(t, 4, disttest.Options{Timeout: time.Minute}, func(_ *disttest.Job, g *dist.Group) error {
		ctx := context.Background()
		m, err := fsdp.New(ctx, gpt(uint64(g.Rank())), g, fsdp.Options{Wrap: isBlock, Group: group})
		if err != nil {
			return err
		}
		gs := m.ParamGroups()
		opt := adamWOver(gs[0], gs[1])
		for step := range 4 {
			if step == 3 {
				on, err := m.FullStateDictOn(ctx, 0)
				if err != nil {
					return err
				}
				all, err := m.FullStateDict(ctx)
				if err != nil {
					return err
				}
				o, err := m.FullOptimStateDict(ctx, opt, 0)
				if err != nil {
					return err
				}
				if g.Rank() != 0 {
					if on != nil || o != nil {
						return fmt.Errorf("rank %d got full state dicts meant for rank 0 alone", g.Rank())
					}
				} else {
					if len(on) != len(all) {
						return fmt.Errorf("FullStateDictOn has %d tensors, FullStateDict %d", len(on), len(all))
					}
					for k, v := range all {
						if !tensor.Equal(on[k], v) {
							return fmt.Errorf("%s: FullStateDictOn differs from FullStateDict", k)
						}
					}
					mu.Lock()
					sd, osd = on, o
					mu.Unlock()
				}
			}
			x, y := globalBatch(step, g.Rank(), 4)
			opt.ZeroGrad(true)
			loss := models.Loss(nn.Call(m, autograd.Const(x)), y)
			if err := m.Backward(ctx, loss); err != nil {
				return err
			}
			opt.Step()
			l, err := meanLoss(ctx, g, loss)
			if err != nil {
				return err
			}
			if step == 3 && g.Rank() == 0 {
				mu.Lock()
				want = l
				mu.Unlock()
			}
		}
		after, err := m.FullStateDictOn(ctx, 0)
		if g.Rank() == 0 {
			mu.Lock()
			wantAfter = after
			mu.Unlock()
		}
		return err
	})
	if sd == nil || osd == nil || wantAfter == nil {
		t.FailNow()
	}
	checkLoss := func(t *testing.T, got float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-5*want {
			t.Errorf("step 3's loss %.8f, the run that went on %.8f", got, want)
		}
	}
	checkWeights := func(t *testing.T, got map[string]*tensor.Tensor) {
		t.Helper()
		worst := 0.0
		for k, w := range wantAfter {
			wv := w.Values()
			for i, v := range got[k].Values() {
				worst = max(worst, math.Abs(v-wv[i]))
			}
		}
		if worst > 1e-5 {
			t.Errorf("the weights after step 3 differ by %.2g from the run that went on", worst)
		}
	}

	t.Run("plain module", func(t *testing.T) {
		net := gpt(9) // other weights: the state dict must replace them
		if err := nn.LoadStateDict(net, sd, true); err != nil {
			t.Fatal(err)
		}
		gr := optim.DecayGroups(nn.NamedParameters(net), 0.1, noDecayName)
		opt := adamWOver(gr[0].Params, gr[1].Params)
		byIndex, err := fsdp.OptimStateByIndex(osd, net, opt)
		if err != nil {
			t.Fatal(err)
		}
		if err := opt.LoadStateDict(byIndex); err != nil {
			t.Fatal(err)
		}
		// And back to names, unchanged.
		byName, err := fsdp.OptimStateByName(net, opt)
		if err != nil {
			t.Fatal(err)
		}
		if len(byName) != len(osd) {
			t.Fatalf("%d states by name, %d in the full optimizer state dict", len(byName), len(osd))
		}
		for k, v := range osd {
			if !tensor.Equal(byName[k], v) {
				t.Fatalf("state %s changed on the way through the plain optimizer", k)
			}
		}
		x, y := globalBatch(3, 0, 1)
		loss := models.Loss(nn.Call(net, autograd.Const(x)), y)
		checkLoss(t, loss.Value().Item())
		if err := loss.Backward(nil); err != nil {
			t.Fatal(err)
		}
		opt.Step()
		checkWeights(t, nn.StateDict(net))
	})
	for _, s := range []fsdp.Strategy{fsdp.ShardGradOp, fsdp.NoShard} {
		t.Run(fmt.Sprintf("FSDP %v world 2", s), func(t *testing.T) {
			disttest.SpawnWith(t, 2, disttest.Options{Timeout: time.Minute}, func(_ *disttest.Job, g *dist.Group) error {
				ctx := context.Background()
				m, err := fsdp.New(ctx, gpt(uint64(11+g.Rank())), g, fsdp.Options{Strategy: s, Wrap: isBlock, Group: group})
				if err != nil {
					return err
				}
				gs := m.ParamGroups()
				opt := adamWOver(gs[0], gs[1])
				if err := m.LoadFullStateDict(ctx, sd); err != nil {
					return err
				}
				if err := m.LoadFullOptimStateDict(osd, opt); err != nil {
					return err
				}
				x, y := globalBatch(3, g.Rank(), 2)
				loss := models.Loss(nn.Call(m, autograd.Const(x)), y)
				if err := m.Backward(ctx, loss); err != nil {
					return err
				}
				opt.Step()
				l, err := meanLoss(ctx, g, loss)
				if err != nil {
					return err
				}
				after, err := m.FullStateDict(ctx)
				if g.Rank() == 0 {
					checkLoss(t, l)
					checkWeights(t, after)
				}
				return err
			})
		})
	}
}

// TestSyncModuleStates: by default New gives every rank rank 0's initial
// parameters (PyTorch's sync_module_states=True), so ranks that built the
// model from different seeds start from the same weights; with
// NoSyncModuleStates each rank keeps its own shard of its own weights.
func TestSyncModuleStates(t *testing.T) {
	rank0 := nn.StateDict(gpt(0))
	for _, noSync := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoSyncModuleStates=%v", noSync), func(t *testing.T) {
			disttest.Spawn(t, 2, func(g *dist.Group) error {
				ctx := context.Background()
				m, err := fsdp.New(ctx, gpt(uint64(g.Rank())), g, fsdp.Options{Wrap: isBlock, NoSyncModuleStates: noSync})
				if err != nil {
					return err
				}
				sd, err := m.FullStateDict(ctx)
				if err != nil {
					return err
				}
				same := true
				for k, v := range rank0 {
					same = same && tensor.Equal(sd[k], v)
				}
				switch {
				case !noSync && !same:
					return fmt.Errorf("rank %d: the initial parameters are not rank 0's", g.Rank())
				case noSync && same:
					return fmt.Errorf("rank %d: with NoSyncModuleStates the parameters are still all rank 0's", g.Rank())
				}
				return nil
			})
		})
	}
}
