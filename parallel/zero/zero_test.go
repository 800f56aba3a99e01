package zero_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/zero"
	"github.com/godist/godist/tensor"
)

func TestPartition(t *testing.T) {
	for _, c := range []struct {
		sizes []int
		world int
		want  [][]int
	}{
		{[]int{48, 8, 32, 4}, 2, [][]int{{0}, {2, 1, 3}}},
		{[]int{48, 8, 32, 4}, 1, [][]int{{0, 2, 1, 3}}},
		{[]int{5, 5, 5, 5, 5}, 3, [][]int{{0, 3}, {1, 4}, {2}}}, // ties keep their order
		{[]int{1, 2}, 3, [][]int{{1}, {0}, nil}},                // a rank may get nothing
		{[]int{0, 3, 0}, 2, [][]int{{1}, {0, 2}}},
		{nil, 2, [][]int{nil, nil}},
	} {
		if got := zero.Partition(c.sizes, c.world); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Partition(%v, %d) = %v, want %v", c.sizes, c.world, got, c.want)
		}
	}
}

// shapes are the test's parameters: sizes unlike each other and not
// divisible by the world sizes, a one-element and an empty one.
var shapes = [][]int{{7, 5}, {5}, {3, 4}, {4}, {11}, {2, 2}, {1}, {6, 3}, {0}}

func newParams(seed uint64) []*autograd.Var {
	rng := tensor.NewRNG(seed)
	ps := make([]*autograd.Var, len(shapes))
	for i, s := range shapes {
		ps[i] = autograd.Param(tensor.Randn(rng, s...))
	}
	return ps
}

func cloneParams(ps []*autograd.Var) []*autograd.Var {
	out := make([]*autograd.Var, len(ps))
	for i, p := range ps {
		out[i] = autograd.Param(p.Value().Clone())
	}
	return out
}

// setGrads gives every parameter step's gradient, the same on every rank
// (as after DDP's all-reduce); parameter 3 has none at step 1.
func setGrads(ps []*autograd.Var, step int) {
	rng := tensor.NewRNG(uint64(1000 + step))
	for i, p := range ps {
		g := tensor.Randn(rng, p.Shape()...)
		if i == 3 && step == 1 {
			p.ZeroGrad(true)
			continue
		}
		p.SetGrad(g)
	}
}

var optimizers = []struct {
	name string
	make func([]*autograd.Var) optim.Optimizer
}{
	{"sgd-momentum", func(ps []*autograd.Var) optim.Optimizer {
		return optim.NewSGD(ps, optim.SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: 0.01})
	}},
	{"adamw", func(ps []*autograd.Var) optim.Optimizer {
		return optim.NewAdamW(ps, optim.AdamOptions{LR: 0.01, WeightDecay: 0.1})
	}},
}

func equalValues(what string, got, want *tensor.Tensor) error {
	if !slices.Equal(got.Shape(), want.Shape()) || !slices.Equal(got.Values(), want.Values()) {
		return fmt.Errorf("%s: got %v, want %v", what, got.Values(), want.Values())
	}
	return nil
}

func stateBytes(sd map[string]*tensor.Tensor, keep func(i int) bool) int {
	n := 0
	for k, t := range sd {
		var i int
		var name string
		if _, err := fmt.Sscanf(k, "state.%d.%s", &i, &name); err == nil && keep(i) {
			n += t.Numel() * t.DType().Size()
		}
	}
	return n
}

// TestSameAsUnsharded: ZeRO over worlds 1, 2 and 3 gives the parameters
// an unsharded optimizer over all of them gives, bit for bit, with a
// warm-up cosine schedule on both; each rank holds only its partition's
// state; the consolidated state dict is the unsharded one; and ZeRO
// optimizers loaded from it go on as the unsharded one does.
func TestSameAsUnsharded(t *testing.T) {
	const steps, more = 6, 3
	for _, o := range optimizers {
		for _, bucket := range []bool{false, true} {
			for _, world := range []int{1, 2, 3} {
				t.Run(fmt.Sprintf("%s/bucket=%v/world=%d", o.name, bucket, world), func(t *testing.T) {
					// The reference: one optimizer over all parameters,
					// run to the end, and a second one stopped after steps
					// for its state dict (StateDict hands out the
					// optimizer's own tensors, which later steps change).
					run := func(n int) ([]*autograd.Var, optim.Optimizer) {
						ps := newParams(1)
						opt := o.make(ps)
						sched := optim.NewWarmupCosine(opt, 2, steps+more, 0.1)
						for s := range n {
							setGrads(ps, s)
							opt.Step()
							sched.Step()
						}
						return ps, opt
					}
					refEnd, _ := run(steps + more)
					_, refMid := run(steps)
					refState := refMid.StateDict()
					total := stateBytes(refState, func(int) bool { return true })
					largest := 0
					for i := range shapes {
						largest = max(largest, stateBytes(refState, func(j int) bool { return i == j }))
					}

					var mu sync.Mutex
					owners := map[int]int{}
					sumBytes := 0
					disttest.Spawn(t, world, func(g *dist.Group) error {
						ctx := context.Background()
						ps := newParams(1)
						z, err := zero.New(ps, o.make, g, zero.Options{ParametersAsBucketView: bucket})
						if err != nil {
							return err
						}
						sched := optim.NewWarmupCosine(z, 2, steps+more, 0.1)
						for s := range steps {
							z.ZeroGrad(true)
							setGrads(ps, s)
							if err := z.StepContext(ctx); err != nil {
								return err
							}
							sched.Step()
						}
						// (3) state for this rank's partition only.
						mine := z.Partition()[g.Rank()]
						want := stateBytes(refState, func(i int) bool { return slices.Contains(mine, i) })
						if got := z.StateBytes(); got != want {
							return fmt.Errorf("StateBytes %d, want %d (partition %v)", got, want, mine)
						}
						if got := z.StateBytes(); got > total/world+largest {
							return fmt.Errorf("StateBytes %d, more than total %d / world %d + largest %d", got, total, world, largest)
						}
						mu.Lock()
						sumBytes += z.StateBytes()
						for _, i := range mine {
							owners[i]++
						}
						mu.Unlock()
						// (4) consolidation to the last rank.
						to := world - 1
						if err := z.ConsolidateStateDict(ctx, to); err != nil {
							return err
						}
						sd := z.StateDict()
						if g.Rank() != to {
							if sd != nil {
								return fmt.Errorf("rank %d has a consolidated state dict", g.Rank())
							}
						} else {
							if !slices.Equal(slices.Sorted(maps.Keys(sd)), slices.Sorted(maps.Keys(refState))) {
								return fmt.Errorf("consolidated keys %v, want %v", slices.Sorted(maps.Keys(sd)), slices.Sorted(maps.Keys(refState)))
							}
							for k, v := range refState {
								if err := equalValues(k, sd[k], v); err != nil {
									return err
								}
							}
						}
						// LoadStateDict: a fresh ZeRO over copies of the
						// parameters, loaded from the unsharded dict, goes on
						// as the unsharded optimizer does, and so does z.
						ps2 := cloneParams(ps)
						z2, err := zero.New(ps2, o.make, g, zero.Options{ParametersAsBucketView: bucket})
						if err != nil {
							return err
						}
						sched2 := optim.NewWarmupCosine(z2, 2, steps+more, 0.1)
						for range steps {
							sched2.Step()
						}
						if err := z2.LoadStateDict(refState); err != nil {
							return err
						}
						if z2.StateBytes() != z.StateBytes() {
							return fmt.Errorf("loaded StateBytes %d, want %d", z2.StateBytes(), z.StateBytes())
						}
						for s := steps; s < steps+more; s++ {
							for _, c := range []struct {
								z     *zero.ZeRO
								ps    []*autograd.Var
								sched *optim.WarmupCosine
							}{{z, ps, sched}, {z2, ps2, sched2}} {
								setGrads(c.ps, s)
								if err := c.z.StepContext(ctx); err != nil {
									return err
								}
								c.sched.Step()
							}
						}
						for i := range ps {
							if err := equalValues(fmt.Sprintf("parameter %d", i), ps[i].Value(), refEnd[i].Value()); err != nil {
								return err
							}
							if err := equalValues(fmt.Sprintf("loaded: parameter %d", i), ps2[i].Value(), refEnd[i].Value()); err != nil {
								return err
							}
						}
						return nil
					})
					if t.Failed() {
						return
					}
					if sumBytes != total {
						t.Errorf("state bytes summed over ranks %d, unsharded %d", sumBytes, total)
					}
					for i := range shapes {
						if owners[i] != 1 {
							t.Errorf("parameter %d owned by %d ranks", i, owners[i])
						}
					}
				})
			}
		}
	}
}

// TestDeadPeer: a peer that dies before the step makes StepContext return
// a *dist.RankError naming it, within 2 s, and Step keep it in Err.
func TestDeadPeer(t *testing.T) {
	for _, bucket := range []bool{false, true} {
		t.Run(fmt.Sprintf("bucket=%v", bucket), func(t *testing.T) {
			disttest.SpawnWith(t, 3, disttest.Options{Timeout: 20 * time.Second}, func(j *disttest.Job, g *dist.Group) error {
				ps := newParams(1)
				z, err := zero.New(ps, optimizers[1].make, g, zero.Options{ParametersAsBucketView: bucket})
				if err != nil {
					return err
				}
				if g.Rank() == 1 {
					j.Kill(1)
					return nil
				}
				setGrads(ps, 0)
				start := time.Now()
				err = z.StepContext(context.Background())
				var re *dist.RankError
				if !errors.As(err, &re) || re.Rank != 1 {
					return fmt.Errorf("StepContext: %v, want a *dist.RankError naming rank 1", err)
				}
				if d := time.Since(start); d > 2*time.Second {
					return fmt.Errorf("StepContext took %v to fail", d)
				}
				z.Step()
				if z.Err() == nil {
					return errors.New("Step on a failed group: Err is nil")
				}
				return nil
			})
		})
	}
}

func TestNewErrors(t *testing.T) {
	disttest.Spawn(t, 1, func(g *dist.Group) error {
		mk := optimizers[0].make
		if _, err := zero.New(nil, mk, g, zero.Options{}); err == nil {
			return errors.New("New without parameters: no error")
		}
		mixed := []*autograd.Var{autograd.Param(tensor.Zeros(3)), autograd.Param(tensor.New(tensor.Float64, 2))}
		if _, err := zero.New(mixed, mk, g, zero.Options{ParametersAsBucketView: true}); err == nil {
			return errors.New("ParametersAsBucketView over two dtypes: no error")
		}
		z, err := zero.New(mixed, mk, g, zero.Options{})
		if err != nil {
			return err
		}
		if err := z.ConsolidateStateDict(context.Background(), 1); err == nil {
			return errors.New("consolidate to rank 1 of 1: no error")
		}
		if err := z.LoadStateDict(map[string]*tensor.Tensor{"state.9.momentum_buffer": tensor.Zeros(3)}); err == nil {
			return errors.New("LoadStateDict of parameter 9 of 2: no error")
		}
		return nil
	})
}

// grouped is AdamW with weight decay on the matrices alone: a constructor
// that reorders its parameters into groups.
func grouped(ps []*autograd.Var) optim.Optimizer {
	var decay, rest []*autograd.Var
	for _, p := range ps {
		if p.Value().Dim() >= 2 {
			decay = append(decay, p)
		} else {
			rest = append(rest, p)
		}
	}
	return optim.NewAdamWGroups([]optim.ParamGroup{{Params: decay, WeightDecay: 0.1}, {Params: rest}}, optim.AdamOptions{LR: 0.01})
}

// TestGroupedOptimizer: with a local optimizer that orders its parameters
// into groups, ZeRO still steps every parameter as the unsharded grouped
// optimizer does (bit for bit), and its consolidated state dict, loaded
// into new ZeRO optimizers, goes on exactly as the original.
func TestGroupedOptimizer(t *testing.T) {
	const steps = 4
	for _, world := range []int{2, 3} {
		ref := newParams(1)
		refOpt := grouped(ref)
		for s := range 2 * steps {
			setGrads(ref, s)
			refOpt.Step()
		}
		var mu sync.Mutex
		var full map[string]*tensor.Tensor
		disttest.Spawn(t, world, func(g *dist.Group) error {
			ctx := context.Background()
			ps := newParams(1)
			z, err := zero.New(ps, grouped, g, zero.Options{})
			if err != nil {
				return err
			}
			for s := range steps {
				setGrads(ps, s)
				if err := z.StepContext(ctx); err != nil {
					return err
				}
			}
			if err := z.ConsolidateStateDict(ctx, 0); err != nil {
				return err
			}
			if g.Rank() == 0 {
				mu.Lock()
				full = z.StateDict()
				mu.Unlock()
				// Every state sits under its parameter's own index.
				for i, p := range ps {
					if m, ok := full[fmt.Sprintf("state.%d.exp_avg", i)]; !ok || !slices.Equal(m.Shape(), p.Shape()) {
						return fmt.Errorf("state.%d.exp_avg: %v, want the shape of parameter %d, %v", i, m, i, p.Shape())
					}
				}
			}
			if err := g.Barrier(ctx); err != nil {
				return err
			}
			// New optimizers over copies of the parameters, loaded from the
			// consolidated state, take the remaining steps.
			mu.Lock()
			sd := full
			mu.Unlock()
			qs := cloneParams(ps)
			z2, err := zero.New(qs, grouped, g, zero.Options{})
			if err != nil {
				return err
			}
			if err := z2.LoadStateDict(sd); err != nil {
				return err
			}
			for s := steps; s < 2*steps; s++ {
				setGrads(qs, s)
				if err := z2.StepContext(ctx); err != nil {
					return err
				}
			}
			for i := range qs {
				if err := equalValues(fmt.Sprintf("world %d rank %d parameter %d", world, g.Rank(), i), qs[i].Value(), ref[i].Value()); err != nil {
					return err
				}
			}
			return nil
		})
	}
}
