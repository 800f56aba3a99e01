package fsdp_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/parallel/fsdp"
	"github.com/godist/godist/tensor"
)

var cfg = models.GPTConfig{Vocab: 256, Block: 8, Layers: 2, Heads: 2, Dim: 12}

func gpt(seed uint64) *models.GPT {
	m, err := models.NewGPT(tensor.NewRNG(seed), cfg)
	if err != nil {
		panic(err)
	}
	return m
}

func tokens(r, step int) (x, y *tensor.Tensor) {
	rng := tensor.NewRNG(uint64(100*step + r))
	x, y = tensor.New(tensor.Int64, 3, cfg.Block), tensor.New(tensor.Int64, 3, cfg.Block)
	for i := range 3 * cfg.Block {
		x.Reshape(-1).Set(float64(rng.IntN(256)), i)
		y.Reshape(-1).Set(float64(rng.IntN(256)), i)
	}
	return x, y
}

func isBlock(_ string, m nn.Module) bool { _, ok := m.(*nn.TransformerBlock); return ok }

// blockAndMLP nests units: each block's first MLP layer, and the block.
func blockAndMLP(name string, m nn.Module) bool {
	return isBlock(name, m) || strings.HasSuffix(name, ".linear1")
}

const steps = 6

// clipAt clips the first steps only (the gradient norm starts near 2 and
// falls), so that a wrongly scaled gradient still shows.
const clipAt = 1.5

// newOpt is SGD with momentum and weight decay: unlike Adam it does not
// turn gradients that are zero but for rounding (the key bias's, which
// softmax ignores) into full-size steps whose sign depends on the order
// of the reduction.
func newOpt(ps []*autograd.Var) optim.Optimizer {
	return optim.NewSGD(ps, optim.SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: 0.01})
}

// A trainer runs some steps of newOpt with clipping and returns each
// step's loss and the final full parameters by name.
type trainer func(ctx context.Context, g *dist.Group) ([]float64, map[string]*tensor.Tensor, error)

// withDDP trains n steps under DDP.
func withDDP(n int) trainer {
	return func(ctx context.Context, g *dist.Group) ([]float64, map[string]*tensor.Tensor, error) {
		return trainDDP(ctx, g, n)
	}
}

func trainDDP(ctx context.Context, g *dist.Group, n int) ([]float64, map[string]*tensor.Tensor, error) {
	net := gpt(uint64(g.Rank()))
	m, err := ddp.New(ctx, net, g, ddp.Options{})
	if err != nil {
		return nil, nil, err
	}
	opt := newOpt(nn.Parameters(net))
	var losses []float64
	for step := range n {
		x, y := tokens(g.Rank(), step)
		opt.ZeroGrad(true)
		loss := models.Loss(nn.Call(m, autograd.Const(x)), y)
		if err := m.Backward(ctx, loss); err != nil {
			return nil, nil, err
		}
		nn.ClipGradNorm(nn.Parameters(net), clipAt)
		opt.Step()
		losses = append(losses, loss.Value().Item())
	}
	sd := map[string]*tensor.Tensor{}
	for k, v := range nn.StateDict(net) {
		sd[k] = v.Clone()
	}
	return losses, sd, nil
}

// withFSDP trains n steps under FSDP with opt.
func withFSDP(opt fsdp.Options, n int) trainer {
	return func(ctx context.Context, g *dist.Group) ([]float64, map[string]*tensor.Tensor, error) {
		net := gpt(uint64(g.Rank()))
		m, err := fsdp.New(ctx, net, g, opt)
		if err != nil {
			return nil, nil, err
		}
		o := newOpt(m.Parameters())
		var losses []float64
		for step := range n {
			x, y := tokens(g.Rank(), step)
			o.ZeroGrad(true)
			loss := models.Loss(nn.Call(m, autograd.Const(x)), y)
			if err := m.Backward(ctx, loss); err != nil {
				return nil, nil, err
			}
			if _, err := m.ClipGradNorm(ctx, clipAt); err != nil {
				return nil, nil, err
			}
			o.Step()
			losses = append(losses, loss.Value().Item())
		}
		sd, err := m.FullStateDict(ctx)
		return losses, sd, err
	}
}

// run trains on world ranks and returns rank 0's losses and parameters.
func run(t *testing.T, world int, tr trainer) ([]float64, map[string]*tensor.Tensor) {
	t.Helper()
	return runOn(t, world, nil, tr)
}

// runOn is run with the ranks placed on hosts (disttest.Options.Hosts).
func runOn(t *testing.T, world int, hosts []string, tr trainer) ([]float64, map[string]*tensor.Tensor) {
	t.Helper()
	var mu sync.Mutex
	var losses []float64
	var sd map[string]*tensor.Tensor
	disttest.SpawnWith(t, world, disttest.Options{Timeout: time.Minute, Hosts: hosts}, func(_ *disttest.Job, g *dist.Group) error {
		l, s, err := tr(context.Background(), g)
		if err != nil {
			return err
		}
		if g.Rank() == 0 {
			mu.Lock()
			losses, sd = l, s
			mu.Unlock()
		}
		return nil
	})
	return losses, sd
}

// longSteps is how long every strategy trains against DDP at worlds 2
// and 4 (the 50 steps); the wrapping and prefetch variants, and
// world 3, train steps.
const longSteps = 50

// TestEquivalentToDDP: every strategy and wrapping trains the tied GPT to
// the losses and weights DDP reaches on the same data (SGD with momentum
// and weight decay, clipping by the global norm). Every strategy runs
// longSteps steps at worlds 2 and 4, HybridShard as two "nodes" of one and
// of two ranks; the nested and single units and the prefetch variants run
// steps steps at worlds 2 and 3 (3 pads every flat parameter), the four
// strategies at world 3 too.
func TestEquivalentToDDP(t *testing.T) {
	strategies := func(world int) []fsdp.Options {
		return []fsdp.Options{
			{Strategy: fsdp.FullShard, Wrap: isBlock},
			{Strategy: fsdp.ShardGradOp, Wrap: isBlock},
			{Strategy: fsdp.NoShard, Wrap: isBlock},
			// Nodes of two ranks (one at world 2): sharded within,
			// replicated across.
			{Strategy: fsdp.HybridShard, ShardSize: max(1, world/2), Wrap: isBlock},
		}
	}
	variants := []fsdp.Options{
		{Strategy: fsdp.FullShard, Wrap: blockAndMLP},
		{Strategy: fsdp.FullShard},
		{Strategy: fsdp.FullShard, Wrap: isBlock, ForwardPrefetch: true, NoBackwardPrefetch: true},
	}
	type suite struct {
		world, n int
		opts     []fsdp.Options
	}
	suites := []suite{
		{2, longSteps, strategies(2)},
		{2, steps, variants},
		{3, steps, append(strategies(3)[:3], variants...)},
		{4, longSteps, strategies(4)},
	}
	for _, s := range suites {
		wantLoss, wantSD := run(t, s.world, withDDP(s.n))
		if wantLoss == nil {
			t.FailNow()
		}
		for _, opt := range s.opts {
			t.Run(fmt.Sprintf("world%d/%v/units=%d/prefetch=%v,%v/steps=%d", s.world, opt.Strategy, unitsOf(opt), opt.ForwardPrefetch, !opt.NoBackwardPrefetch, s.n), func(t *testing.T) {
				losses, sd := run(t, s.world, withFSDP(opt, s.n))
				if len(losses) != s.n {
					t.FailNow()
				}
				worst := 0.0
				for i := range wantLoss {
					d := math.Abs(losses[i]-wantLoss[i]) / math.Abs(wantLoss[i])
					worst = max(worst, d)
					if d > 1e-5 {
						t.Errorf("step %d: loss %.8f, DDP %.8f", i, losses[i], wantLoss[i])
					}
				}
				if len(sd) != len(wantSD) {
					t.Fatalf("full state dict of %d tensors, DDP's %d", len(sd), len(wantSD))
				}
				for k, w := range wantSD {
					got, ok := sd[k]
					if !ok || !tensor.SameShape(got, w) {
						t.Fatalf("%s: missing or misshapen in the full state dict", k)
					}
					if !tensor.AllClose(got, w, 1e-4, 1e-6) {
						t.Errorf("%s: differs from DDP's after %d steps", k, s.n)
					}
				}
				t.Logf("largest relative loss difference from DDP over %d steps: %.2g (loss %.5f to %.5f)", s.n, worst, losses[0], losses[s.n-1])
			})
		}
	}
}

// TestHybridShardFromTopology: HybridShard without a ShardSize shards
// within each host of the group's topology and replicates across hosts;
// with the ranks of two hosts interleaved (a, b, a, b), which consecutive
// shard groups would cut across, it trains to DDP's losses and weights.
// A topology with unequal hosts is refused with an error that says what
// to set.
func TestHybridShardFromTopology(t *testing.T) {
	hosts := []string{"a", "b", "a", "b"}
	wantLoss, wantSD := runOn(t, 4, hosts, withDDP(steps))
	losses, sd := runOn(t, 4, hosts, withFSDP(fsdp.Options{Strategy: fsdp.HybridShard, Wrap: isBlock}, steps))
	if len(losses) != steps || len(wantLoss) != steps {
		t.FailNow()
	}
	for i := range wantLoss {
		if d := math.Abs(losses[i]-wantLoss[i]) / math.Abs(wantLoss[i]); d > 1e-5 {
			t.Errorf("step %d: loss %.8f, DDP %.8f", i, losses[i], wantLoss[i])
		}
	}
	for k, w := range wantSD {
		if got, ok := sd[k]; !ok || !tensor.AllClose(got, w, 1e-4, 1e-6) {
			t.Errorf("%s: differs from DDP's after %d steps", k, steps)
		}
	}
	disttest.SpawnWith(t, 3, disttest.Options{Hosts: []string{"a", "a", "b"}}, func(_ *disttest.Job, g *dist.Group) error {
		_, err := fsdp.New(context.Background(), gpt(0), g, fsdp.Options{Strategy: fsdp.HybridShard, Wrap: isBlock})
		if err == nil || !strings.Contains(err.Error(), "ShardSize") {
			return fmt.Errorf("hosts of 2 and 1 ranks: got %v, want an error naming ShardSize", err)
		}
		return nil
	})
}

// TestShards: each rank holds 1/world of every flat parameter (padded),
// and between steps the module's own parameters hold no memory.
func TestShards(t *testing.T) {
	disttest.Spawn(t, 3, func(g *dist.Group) error {
		net := gpt(0)
		total := nn.NumParameters(net)
		m, err := fsdp.New(context.Background(), net, g, fsdp.Options{Wrap: isBlock})
		if err != nil {
			return err
		}
		held := 0
		for _, p := range m.Parameters() {
			held += p.Value().Numel()
		}
		if held < total/3 || held > total/3+3*len(m.Parameters()) {
			return fmt.Errorf("rank %d holds %d of %d parameters, want about a third", g.Rank(), held, total)
		}
		if len(m.Units()) != cfg.Layers+1 {
			return fmt.Errorf("%d units, want a block each and the root: %v", len(m.Units()), m.Units())
		}
		for _, p := range nn.Parameters(net) {
			if p.Value().IsWholeStorage() && p.Value().Numel() > 1 {
				return errors.New("a module parameter keeps its own memory between steps")
			}
		}
		return nil
	})
}

// TestPeerDeath: a rank that dies in the middle of training makes every
// other rank's Backward fail with an error naming it, no panic.
func TestPeerDeath(t *testing.T) {
	disttest.SpawnWith(t, 3, disttest.Options{Timeout: 20 * time.Second}, func(j *disttest.Job, g *dist.Group) error {
		ctx := context.Background()
		m, err := fsdp.New(ctx, gpt(0), g, fsdp.Options{Wrap: isBlock})
		if err != nil {
			return err
		}
		for step := range 3 {
			if step == 1 && g.Rank() == 2 {
				j.Kill(2)
				return nil
			}
			x, y := tokens(g.Rank(), step)
			start := time.Now()
			err := m.Backward(ctx, models.Loss(nn.Call(m, autograd.Const(x)), y))
			if step == 0 {
				if err != nil {
					return err
				}
				// Every rank's reductions of step 0 are done before rank
				// 2 dies; the barrier itself may meet the death (rank 2
				// leaves it first), and must then name rank 2 as well.
				if err := g.Barrier(ctx); err != nil {
					var re *dist.RankError
					if g.Rank() != 2 && (!errors.As(err, &re) || re.Rank != 2) {
						return fmt.Errorf("barrier: %v, want a *dist.RankError naming rank 2", err)
					}
					return nil
				}
				continue
			}
			var re *dist.RankError
			if !errors.As(err, &re) || re.Rank != 2 {
				return fmt.Errorf("step %d: %v, want a *dist.RankError naming rank 2", step, err)
			}
			if d := time.Since(start); d > 2*time.Second {
				return fmt.Errorf("the error took %v", d)
			}
			return nil
		}
		return errors.New("no step failed")
	})
}

// TestUnitNotCalled: a unit whose module its parent does not call through
// nn.Call (the GPT reads its token embedding's weight directly, for the
// tied head too) is never gathered; Backward says so instead of training
// on placeholders.
func TestUnitNotCalled(t *testing.T) {
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		m, err := fsdp.New(ctx, gpt(0), g, fsdp.Options{MinParams: 3000})
		if err != nil {
			return err
		}
		x, y := tokens(g.Rank(), 0)
		err = m.Backward(ctx, models.Loss(nn.Call(m, autograd.Const(x)), y))
		if err == nil || !strings.Contains(err.Error(), "unit wte was never called through nn.Call") {
			return fmt.Errorf("Backward: %v, want the error naming unit wte", err)
		}
		return nil
	})
}

// unitsOf counts the units opt makes of the test GPT (for test names).
func unitsOf(opt fsdp.Options) int {
	n := 1
	for _, m := range nn.NamedModules(gpt(0)) {
		if opt.Wrap != nil && opt.Wrap(m.Name, m.Value) {
			n++
		}
	}
	return n
}

// TestMemory: FullShard holds at most the root and one block gathered at
// once, or two with backward prefetch (the next block of backward on its
// way); ShardGradOp holds every unit from forward to backward; the shards
// and their gradients are a world's share.
func TestMemory(t *testing.T) {
	byDecay := func(name string, p *autograd.Var) int {
		if decays(name, p) {
			return 0
		}
		return 1
	}
	cases := []fsdp.Options{
		{Strategy: fsdp.FullShard, Wrap: isBlock, NoBackwardPrefetch: true},
		{Strategy: fsdp.FullShard, Wrap: isBlock},
		{Strategy: fsdp.ShardGradOp, Wrap: isBlock},
		// Two units a block: the prefetch takes both.
		{Strategy: fsdp.FullShard, Wrap: isBlock, Group: byDecay},
	}
	peaks := make([]int, len(cases))
	for i, opt := range cases {
		disttest.Spawn(t, 2, func(g *dist.Group) error {
			ctx := context.Background()
			net := gpt(0)
			m, err := fsdp.New(ctx, net, g, opt)
			if err != nil {
				return err
			}
			for step := range 2 {
				x, y := tokens(g.Rank(), step)
				if err := m.Backward(ctx, models.Loss(nn.Call(m, autograd.Const(x)), y)); err != nil {
					return err
				}
			}
			mem := m.Memory()
			total := 4 * nn.NumParameters(net)
			if mem.Gathered != 0 {
				return fmt.Errorf("%+v: %d bytes still gathered after the step", opt, mem.Gathered)
			}
			if mem.Params < total/2 || mem.Params > total/2+64 || mem.Grads != mem.Params {
				return fmt.Errorf("%+v: shards %d bytes and gradients %d of %d", opt, mem.Params, mem.Grads, total)
			}
			if g.Rank() == 0 {
				peaks[i] = mem.PeakGathered
			}
			return nil
		})
	}
	units := nn.NumParameters(gpt(0)) * 4
	block := 4 * nn.NumParameters(nn.NewTransformerBlock(tensor.NewRNG(0), cfg.Dim, cfg.Heads, 4*cfg.Dim, 0, true))
	root := units - cfg.Layers*block
	t.Logf("peak gathered: FullShard %d bytes (%d with backward prefetch), ShardGradOp %d (root %d, a block %d)", peaks[0], peaks[1], peaks[2], root, block)
	if peaks[0] > root+block+64 {
		t.Errorf("FullShard gathered up to %d bytes, more than the root and one block (%d)", peaks[0], root+block)
	}
	for _, i := range []int{1, 3} {
		if peaks[i] > root+2*block+64 || peaks[i] < root+2*block-64 {
			t.Errorf("%+v gathered up to %d bytes, want the root and two blocks (%d): the one running backward and the next, prefetched", cases[i], peaks[i], root+2*block)
		}
	}
	if peaks[2] < units {
		t.Errorf("ShardGradOp gathered at most %d bytes, less than the whole model (%d)", peaks[2], units)
	}
}

// decays is the GPT's weight-decay rule: matrices but the embeddings.
func decays(name string, p *autograd.Var) bool {
	return p.Value().Dim() >= 2 && name != "wte.weight" && name != "wpe.weight"
}

// TestParamGroups: with Options.Group each unit keeps a flat parameter
// per group, so AdamW can decay the matrices alone; the losses follow
// DDP's with the same groups (optim.DecayGroups) step for step.
func TestParamGroups(t *testing.T) {
	adamW := func(decay, rest []*autograd.Var) optim.Optimizer {
		return optim.NewAdamWGroups([]optim.ParamGroup{{Params: decay, WeightDecay: 0.1}, {Params: rest}}, optim.AdamOptions{LR: 1e-2})
	}
	step := func(ctx context.Context, g *dist.Group, m nn.Layer, backward func(*autograd.Var) error, o optim.Optimizer) ([]float64, error) {
		var losses []float64
		for s := range steps {
			x, y := tokens(g.Rank(), s)
			o.ZeroGrad(true)
			loss := models.Loss(nn.Call(m, autograd.Const(x)), y)
			if err := backward(loss); err != nil {
				return nil, err
			}
			o.Step()
			losses = append(losses, loss.Value().Item())
		}
		return losses, nil
	}
	want, _ := run(t, 2, func(ctx context.Context, g *dist.Group) ([]float64, map[string]*tensor.Tensor, error) {
		net := gpt(uint64(g.Rank()))
		m, err := ddp.New(ctx, net, g, ddp.Options{})
		if err != nil {
			return nil, nil, err
		}
		gs := optim.DecayGroups(nn.NamedParameters(net), 0.1, func(n string) bool { return n == "wte.weight" || n == "wpe.weight" })
		l, err := step(ctx, g, m, func(l *autograd.Var) error { return m.Backward(ctx, l) }, adamW(gs[0].Params, gs[1].Params))
		return l, nil, err
	})
	got, _ := run(t, 2, func(ctx context.Context, g *dist.Group) ([]float64, map[string]*tensor.Tensor, error) {
		m, err := fsdp.New(ctx, gpt(uint64(g.Rank())), g, fsdp.Options{Wrap: isBlock, Group: func(name string, p *autograd.Var) int {
			if decays(name, p) {
				return 0
			}
			return 1
		}})
		if err != nil {
			return nil, nil, err
		}
		groups := m.ParamGroups()
		if len(groups) != 2 || len(groups[0]) != cfg.Layers || len(groups[1]) != cfg.Layers+1 {
			return nil, nil, fmt.Errorf("parameter groups %d: want 2, the blocks' matrices and everything else", len(groups))
		}
		l, err := step(ctx, g, m, func(l *autograd.Var) error { return m.Backward(ctx, l) }, adamW(groups[0], groups[1]))
		return l, nil, err
	})
	if want == nil || got == nil {
		t.FailNow()
	}
	for i := range want {
		if d := math.Abs(got[i] - want[i]); d > 1e-5*math.Abs(want[i]) {
			t.Errorf("step %d: loss %.8f, DDP %.8f", i, got[i], want[i])
		}
	}
}

// TestMinParams: the size policy makes a unit of each module holding at
// least MinParams parameters that no smaller unit holds (here the MLP's
// middle Linear alone; the small ones stay in the root), and the MLP
// trains as under DDP, at world 3 (every flat parameter padded).
func TestMinParams(t *testing.T) {
	mlp := func(seed uint64) *nn.Sequential {
		rng := tensor.NewRNG(seed)
		return nn.NewSequential(nn.NewLinear(rng, 6, 32, true), nn.NewTanh(), nn.NewLinear(rng, 32, 32, true), nn.NewTanh(), nn.NewLinear(rng, 32, 3, true))
	}
	batch := func(rank, step int) (x, y *autograd.Var) {
		rng := tensor.NewRNG(uint64(10*step + rank))
		return autograd.Const(tensor.Randn(rng, 4, 6)), autograd.Const(tensor.Randn(rng, 4, 3))
	}
	train := func(wrap func(context.Context, *dist.Group, *nn.Sequential) (nn.Layer, []*autograd.Var, func(*autograd.Var) error, error)) []float64 {
		losses, _ := run(t, 3, func(ctx context.Context, g *dist.Group) ([]float64, map[string]*tensor.Tensor, error) {
			m, ps, backward, err := wrap(ctx, g, mlp(uint64(g.Rank())))
			if err != nil {
				return nil, nil, err
			}
			o := newOpt(ps)
			var losses []float64
			for step := range steps {
				x, y := batch(g.Rank(), step)
				o.ZeroGrad(true)
				loss := nn.MSELoss(nn.Call(m, x), y)
				if err := backward(loss); err != nil {
					return nil, nil, err
				}
				o.Step()
				losses = append(losses, loss.Value().Item())
			}
			return losses, nil, nil
		})
		if losses == nil {
			t.FailNow()
		}
		return losses
	}
	want := train(func(ctx context.Context, g *dist.Group, net *nn.Sequential) (nn.Layer, []*autograd.Var, func(*autograd.Var) error, error) {
		m, err := ddp.New(ctx, net, g, ddp.Options{})
		if err != nil {
			return nil, nil, nil, err
		}
		return m, nn.Parameters(net), func(l *autograd.Var) error { return m.Backward(ctx, l) }, nil
	})
	got := train(func(ctx context.Context, g *dist.Group, net *nn.Sequential) (nn.Layer, []*autograd.Var, func(*autograd.Var) error, error) {
		m, err := fsdp.New(ctx, net, g, fsdp.Options{MinParams: 500})
		if err != nil {
			return nil, nil, nil, err
		}
		units := fmt.Sprint(m.Units())
		if units != "[[2 2.weight 2.bias] [(root) 0.weight 0.bias 4.weight 4.bias]]" {
			return nil, nil, nil, fmt.Errorf("units %s: want the middle Linear (1056 parameters) and the root", units)
		}
		return m, m.Parameters(), func(l *autograd.Var) error { return m.Backward(ctx, l) }, nil
	})
	for i := range want {
		if d := math.Abs(got[i] - want[i]); d > 1e-5*math.Abs(want[i]) {
			t.Errorf("step %d: loss %.8f, DDP %.8f", i, got[i], want[i])
		}
	}
}
