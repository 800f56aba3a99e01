package fsdp_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint/dcp"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/parallel/fsdp"
	"github.com/godist/godist/tensor"
)

// globalBatch is step's batch of 4 sequences; a rank of world w takes
// 4/w of its rows, so every world trains on the same data.
func globalBatch(step, rank, world int) (x, y *tensor.Tensor) {
	rng := tensor.NewRNG(uint64(1000 + step))
	gx, gy := tensor.New(tensor.Int64, 4, cfg.Block), tensor.New(tensor.Int64, 4, cfg.Block)
	for i := range 4 * cfg.Block {
		gx.Reshape(-1).Set(float64(rng.IntN(256)), i)
		gy.Reshape(-1).Set(float64(rng.IntN(256)), i)
	}
	b := 4 / world
	return gx.Narrow(0, rank*b, b).Contiguous(), gy.Narrow(0, rank*b, b).Contiguous()
}

func noDecayName(n string) bool { return n == "wte.weight" || n == "wpe.weight" }

func adamWOver(decay, rest []*autograd.Var) *optim.Adam {
	return optim.NewAdamWGroups([]optim.ParamGroup{{Params: decay, WeightDecay: 0.1}, {Params: rest}}, optim.AdamOptions{LR: 1e-2})
}

// meanLoss is the loss over the whole global batch: the ranks' average.
func meanLoss(ctx context.Context, g *dist.Group, loss *autograd.Var) (float64, error) {
	t := tensor.FromFloat64([]float64{loss.Value().Item()})
	err := g.AllReduce(ctx, t, dist.Avg)
	return t.Float64s()[0], err
}

// TestCheckpointAcrossStrategies saves FSDP's sharded state (FullShard,
// world 4) after 3 steps of AdamW, then loads it into DDP at world 2, into
// one process, and into FSDP ShardGradOp at world 2: the next step's loss
// over the same global batch equals the one of the run that went on.
func TestCheckpointAcrossStrategies(t *testing.T) {
	dir := t.TempDir()
	var want float64
	var wantSD map[string]*tensor.Tensor // the weights after the step that went on
	var mu sync.Mutex
	group := func(name string, p *autograd.Var) int {
		if p.Value().Dim() >= 2 && !noDecayName(name) {
			return 0
		}
		return 1
	}
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
				st, err := m.CheckpointState(opt)
				if err != nil {
					return err
				}
				if err := dcp.Save(ctx, dir, st, g); err != nil {
					return err
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
		sd, err := m.FullStateDict(ctx)
		if g.Rank() == 0 {
			mu.Lock()
			wantSD = sd
			mu.Unlock()
		}
		return err
	})
	check := func(t *testing.T, got float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-5*want {
			t.Errorf("loss after loading %.8f, the run that went on %.8f", got, want)
		}
	}
	t.Run("DDP world 2", func(t *testing.T) {
		disttest.SpawnWith(t, 2, disttest.Options{Timeout: time.Minute}, func(_ *disttest.Job, g *dist.Group) error {
			ctx := context.Background()
			net := gpt(uint64(7 + g.Rank())) // other weights: the checkpoint must replace them
			m, err := ddp.New(ctx, net, g, ddp.Options{})
			if err != nil {
				return err
			}
			gr := optim.DecayGroups(nn.NamedParameters(net), 0.1, noDecayName)
			opt := adamWOver(gr[0].Params, gr[1].Params)
			if err := dcp.LoadModule(ctx, dir, net, opt, g); err != nil {
				return err
			}
			x, y := globalBatch(3, g.Rank(), 2)
			loss := models.Loss(nn.Call(m, autograd.Const(x)), y)
			if err := m.Backward(ctx, loss); err != nil {
				return err
			}
			l, err := meanLoss(ctx, g, loss)
			if g.Rank() == 0 {
				check(t, l)
			}
			return err
		})
	})
	t.Run("one process", func(t *testing.T) {
		net := gpt(9)
		gr := optim.DecayGroups(nn.NamedParameters(net), 0.1, noDecayName)
		opt := adamWOver(gr[0].Params, gr[1].Params)
		if err := dcp.LoadModule(context.Background(), dir, net, opt, nil); err != nil {
			t.Fatal(err)
		}
		if len(opt.StateDict()) == 0 {
			t.Fatal("no optimizer state loaded")
		}
		x, y := globalBatch(3, 0, 1)
		check(t, models.Loss(nn.Call(net, autograd.Const(x)), y).Value().Item())
	})
	t.Run("FSDP ShardGradOp world 2", func(t *testing.T) {
		disttest.SpawnWith(t, 2, disttest.Options{Timeout: time.Minute}, func(_ *disttest.Job, g *dist.Group) error {
			ctx := context.Background()
			m, err := fsdp.New(ctx, gpt(uint64(11+g.Rank())), g, fsdp.Options{Strategy: fsdp.ShardGradOp, Wrap: isBlock, Group: group})
			if err != nil {
				return err
			}
			gs := m.ParamGroups()
			opt := adamWOver(gs[0], gs[1])
			if err := m.LoadCheckpoint(ctx, dir, opt); err != nil {
				return err
			}
			x, y := globalBatch(3, g.Rank(), 2)
			loss := models.Loss(nn.Call(m, autograd.Const(x)), y)
			if err := m.Backward(ctx, loss); err != nil {
				return err
			}
			l, err := meanLoss(ctx, g, loss)
			if g.Rank() == 0 {
				check(t, l)
			}
			return err
		})
	})
	// The optimizer's state came back too: one more AdamW step from the
	// loaded state, in one process, gives the weights the FSDP run had
	// after that step (and a fresh optimizer would not).
	t.Run("optimizer state", func(t *testing.T) {
		for _, withState := range []bool{true, false} {
			net := gpt(21)
			gr := optim.DecayGroups(nn.NamedParameters(net), 0.1, noDecayName)
			opt := adamWOver(gr[0].Params, gr[1].Params)
			load := optim.Optimizer(opt)
			if !withState {
				load = nil
			}
			if err := dcp.LoadModule(context.Background(), dir, net, load, nil); err != nil {
				t.Fatal(err)
			}
			x, y := globalBatch(3, 0, 1)
			models.Loss(nn.Call(net, autograd.Const(x)), y).Backward(nil)
			opt.Step()
			worst := 0.0
			got := nn.StateDict(net)
			for k, w := range wantSD {
				wv := w.Values()
				for i, v := range got[k].Values() {
					worst = max(worst, math.Abs(v-wv[i]))
				}
			}
			t.Logf("with the optimizer's state %v: largest weight difference %.2g", withState, worst)
			if withState && worst > 1e-5 {
				t.Errorf("weights differ by %.2g from the run that went on", worst)
			}
			if !withState && worst < 1e-4 {
				t.Errorf("a fresh optimizer stepped to the same weights (%.2g): the test cannot tell", worst)
			}
		}
	})
}
