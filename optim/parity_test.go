package optim_test

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint/paritytest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

// The reference values come from PyTorch 1.13 via
// testdata/parity/make_optim_parity.py. Tolerance: the largest elementwise
// difference, relative to the largest magnitude in PyTorch's tensor, is at
// most 1e-6 (float32 parameters and gradients).
const parityTol = 1e-6

var ref = &paritytest.Ref{Path: filepath.Join("..", "testdata", "parity", "optim_parity.safetensors")}

func get(t *testing.T, name string) *tensor.Tensor { t.Helper(); return ref.Get(t, name) }

func expect(t *testing.T, what string, got []float64, wantName string) {
	t.Helper()
	ref.ExpectValues(t, what, got, wantName, parityTol)
}

// tiny is make_optim_parity.py's Tiny: an embedding, a linear layer, a
// LayerNorm and a bias-free head, named as PyTorch names them.
type tiny struct {
	nn.Base
}

func newTiny(t *testing.T, prefix string) *tiny {
	rng := tensor.NewRNG(0)
	m := &tiny{}
	m.RegisterModule("wte", nn.NewEmbedding(rng, 6, 4))
	m.RegisterModule("fc", nn.NewLinear(rng, 4, 5, true))
	m.RegisterModule("ln", nn.NewLayerNorm(5))
	m.RegisterModule("head", nn.NewLinear(rng, 5, 3, false))
	sd := map[string]*tensor.Tensor{}
	for _, k := range nn.StateDictKeys(m) {
		sd[k] = get(t, prefix+".init."+k)
	}
	if err := nn.LoadStateDict(m, sd, true); err != nil {
		t.Fatal(err)
	}
	return m
}

func isEmbedding(name string) bool { return strings.HasPrefix(name, "wte.") }

func TestParityAdamWGroups(t *testing.T) {
	m := newTiny(t, "adamw_groups")
	named := nn.NamedParameters(m)
	groups := optim.DecayGroups(named, 0.1, isEmbedding)
	opt := optim.NewAdamWGroups(groups, optim.AdamOptions{LR: 0.01, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
	for step := range 4 {
		for _, p := range named {
			p.Value.SetGrad(get(t, fmt.Sprintf("adamw_groups.step%d.grad.%s", step, p.Name)).Clone())
		}
		opt.Step()
		for _, p := range named {
			expect(t, fmt.Sprintf("step %d %s", step, p.Name), p.Value.Value().Values(),
				fmt.Sprintf("adamw_groups.step%d.after.%s", step, p.Name))
		}
	}
}

func TestParityWarmupCosine(t *testing.T) {
	for _, c := range []struct {
		name          string
		warmup, total int
		ratio         float64
	}{{"sched", 3, 10, 0.1}, {"sched_nowarmup", 0, 5, 0}} {
		t.Run(c.name, func(t *testing.T) {
			opt := optim.NewSGD([]*autograd.Var{autograd.Param(tensor.Zeros(1))}, optim.SGDOptions{LR: 0.5})
			s := optim.NewWarmupCosine(opt, c.warmup, c.total, c.ratio)
			lrs := []float64{opt.LR()}
			for range 14 {
				opt.Step()
				s.Step()
				lrs = append(lrs, opt.LR())
			}
			if s.Epoch() != 14 {
				t.Fatalf("Epoch %d after 14 steps", s.Epoch())
			}
			want := get(t, c.name+".lrs").Values()
			for i := range want {
				if math.Abs(lrs[i]-want[i]) > 1e-15 {
					t.Fatalf("lr after %d steps: %v, PyTorch %v\n got %v\nwant %v", i, lrs[i], want[i], lrs, want)
				}
			}
		})
	}
}

// TestParityGPTLoop runs the loop of a GPT-like workload: clip to norm 1,
// AdamW over two groups with their own rates, warm-up cosine schedule.
func TestParityGPTLoop(t *testing.T) {
	m := newTiny(t, "loop")
	named := nn.NamedParameters(m)
	groups := optim.DecayGroups(named, 0.1, isEmbedding)
	groups[1].LR = 0.02
	opt := optim.NewAdamWGroups(groups, optim.AdamOptions{LR: 0.01, Beta2: 0.95})
	sched := optim.NewWarmupCosine(opt, 2, 6, 0.1)
	lrs := []float64{opt.GroupLR(0), opt.GroupLR(1)}
	var norms []float64
	for step := range 8 {
		for _, p := range named {
			p.Value.SetGrad(get(t, fmt.Sprintf("loop.step%d.grad.%s", step, p.Name)).Clone())
		}
		norms = append(norms, nn.ClipGradNorm(opt.Params(), 1))
		opt.Step()
		sched.Step()
		lrs = append(lrs, opt.GroupLR(0), opt.GroupLR(1))
		for _, p := range named {
			expect(t, fmt.Sprintf("step %d %s", step, p.Name), p.Value.Value().Values(),
				fmt.Sprintf("loop.step%d.after.%s", step, p.Name))
		}
	}
	expect(t, "norms", norms, "loop.norms")
	expect(t, "lrs", lrs, "loop.lrs")
}
