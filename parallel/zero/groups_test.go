package zero_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/zero"
	"github.com/godist/godist/tensor"
)

func TestPartitionGroups(t *testing.T) {
	for _, c := range []struct {
		sizes [][]int
		world int
		want  [][]int
	}{
		// Group 1 goes on from group 0's loads (48 against 44).
		{[][]int{{48, 8, 32, 4}, {6, 6}}, 2, [][]int{{0, 5}, {2, 1, 3, 4}}},
		{[][]int{{48, 8, 32, 4}}, 2, [][]int{{0}, {2, 1, 3}}}, // Partition's
		{[][]int{{5}, {5}, {5}}, 3, [][]int{{0}, {1}, {2}}},
		{[][]int{{}, {3, 1}}, 2, [][]int{{0}, {1}}},
		{[][]int{{2}, {}, {1}}, 3, [][]int{{0}, {1}, nil}},
	} {
		if got := zero.PartitionGroups(c.sizes, c.world); !reflect.DeepEqual(got, c.want) {
			t.Errorf("PartitionGroups(%v, %d) = %v, want %v", c.sizes, c.world, got, c.want)
		}
	}
}

// twoGroups splits ps (newParams') into the matrices, which decay at the
// default rate, and the rest, with a rate of their own and no decay.
func twoGroups(ps []*autograd.Var) []optim.ParamGroup {
	var mats, rest []*autograd.Var
	for _, p := range ps {
		if p.Value().Dim() >= 2 {
			mats = append(mats, p)
		} else {
			rest = append(rest, p)
		}
	}
	return []optim.ParamGroup{{Params: mats, WeightDecay: 0.1}, {Params: rest, LR: 0.03}}
}

// flat is the groups' parameters in group order: the numbering of an
// optimizer over the groups.
func flat(groups []optim.ParamGroup) []*autograd.Var {
	var out []*autograd.Var
	for _, g := range groups {
		out = append(out, g.Params...)
	}
	return out
}

var groupOptimizers = []struct {
	name string
	make func([]optim.ParamGroup) optim.Optimizer
}{
	{"sgd-momentum", func(gs []optim.ParamGroup) optim.Optimizer {
		return optim.NewSGDGroups(gs, optim.SGDOptions{LR: 0.1, Momentum: 0.9})
	}},
	{"adamw", func(gs []optim.ParamGroup) optim.Optimizer {
		return optim.NewAdamWGroups(gs, optim.AdamOptions{LR: 0.01})
	}},
}

// TestGroupsSameAsUnsharded: ZeRO over two parameter groups (their own
// learning rates and weight decay) at worlds 2 and 3 gives the
// parameters that the unsharded optimizer over the same groups gives on
// one rank, bit for bit, after steps steps with a warm-up cosine schedule
// that scales each group from its own rate; each rank's local optimizer
// has both groups (an empty share where it holds none of one); the
// consolidated state dict is the unsharded optimizer's, group members
// included; and a new ZeRO loaded from it goes on as the unsharded one.
func TestGroupsSameAsUnsharded(t *testing.T) {
	const steps, more = 6, 3
	for _, o := range groupOptimizers {
		for _, bucket := range []bool{false, true} {
			for _, world := range []int{2, 3} {
				t.Run(fmt.Sprintf("%s/bucket=%v/world=%d", o.name, bucket, world), func(t *testing.T) {
					run := func(n int) ([]*autograd.Var, optim.Optimizer) {
						gs := twoGroups(newParams(1))
						ps := flat(gs)
						opt := o.make(gs)
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
					disttest.Spawn(t, world, func(g *dist.Group) error {
						ctx := context.Background()
						gs := twoGroups(newParams(1))
						ps := flat(gs)
						z, err := zero.NewGroups(gs, o.make, g, zero.Options{ParametersAsBucketView: bucket})
						if err != nil {
							return err
						}
						if got := z.Partition(); !reflect.DeepEqual(got, zero.PartitionGroups([][]int{sizesOf(gs[0].Params), sizesOf(gs[1].Params)}, world)) {
							return fmt.Errorf("partition %v, not PartitionGroups'", got)
						}
						if n := z.NumGroups(); n != 2 || z.GroupLR(1) != 0.03 {
							return fmt.Errorf("%d groups, group 1's rate %v: want 2 and 0.03 on every rank", n, z.GroupLR(1))
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
						if err := z.ConsolidateStateDict(ctx, 0); err != nil {
							return err
						}
						if g.Rank() == 0 {
							sd := z.StateDict()
							if !slices.Equal(slices.Sorted(maps.Keys(sd)), slices.Sorted(maps.Keys(refState))) {
								return fmt.Errorf("consolidated keys %v, want %v", slices.Sorted(maps.Keys(sd)), slices.Sorted(maps.Keys(refState)))
							}
							for k, v := range refState {
								if err := equalValues(k, sd[k], v); err != nil {
									return err
								}
							}
						}
						gs2 := twoGroups(cloneParams(ps))
						ps2 := flat(gs2)
						z2, err := zero.NewGroups(gs2, o.make, g, zero.Options{ParametersAsBucketView: bucket})
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
							if err := equalValues(fmt.Sprintf("rank %d parameter %d", g.Rank(), i), ps[i].Value(), refEnd[i].Value()); err != nil {
								return err
							}
							if err := equalValues(fmt.Sprintf("loaded: rank %d parameter %d", g.Rank(), i), ps2[i].Value(), refEnd[i].Value()); err != nil {
								return err
							}
						}
						return nil
					})
				})
			}
		}
	}
}

func sizesOf(ps []*autograd.Var) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = p.Value().Numel()
	}
	return out
}

// TestAddParamGroup: a ZeRO optimizer given its second group by
// AddParamGroup after some steps (one made by New over a plain list, one
// by NewGroups) steps as the unsharded optimizer given the same group at
// the same step, bit for bit, at worlds 2 and 3; the earlier parameters
// keep their owners and every parameter has one.
func TestAddParamGroup(t *testing.T) {
	const steps, at = 6, 3
	for _, o := range groupOptimizers {
		for _, world := range []int{2, 3} {
			for _, plain := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/world=%d/plain=%v", o.name, world, plain), func(t *testing.T) {
					gs := twoGroups(newParams(1))
					ref := flat(gs)
					refOpt := o.make(gs[:1])
					for s := range steps {
						if s == at {
							if err := refOpt.(optim.GroupAdder).AddParamGroup(gs[1]); err != nil {
								t.Fatal(err)
							}
						}
						setGrads(ref, s)
						refOpt.Step()
					}
					disttest.Spawn(t, world, func(g *dist.Group) error {
						ctx := context.Background()
						gs := twoGroups(newParams(1))
						ps := flat(gs)
						var z *zero.ZeRO
						var err error
						if plain {
							z, err = zero.New(gs[0].Params, func(mine []*autograd.Var) optim.Optimizer {
								return o.make([]optim.ParamGroup{{Params: mine, WeightDecay: gs[0].WeightDecay}})
							}, g, zero.Options{})
						} else {
							z, err = zero.NewGroups(gs[:1], o.make, g, zero.Options{})
						}
						if err != nil {
							return err
						}
						for s := range steps {
							if s == at {
								before := slices.Clone(z.Partition())
								if err := z.AddParamGroup(gs[1]); err != nil {
									return err
								}
								for r, idx := range before {
									if !slices.Equal(z.Partition()[r][:len(idx)], idx) {
										return fmt.Errorf("rank %d's parameters %v became %v", r, idx, z.Partition()[r])
									}
								}
								owned := map[int]int{}
								for _, idx := range z.Partition() {
									for _, i := range idx {
										owned[i]++
									}
								}
								for i := range ps {
									if owned[i] != 1 {
										return fmt.Errorf("parameter %d has %d owners", i, owned[i])
									}
								}
								if len(z.Params()) != len(ps) || z.NumGroups() != 2 {
									return fmt.Errorf("%d parameters in %d groups after AddParamGroup, want %d in 2", len(z.Params()), z.NumGroups(), len(ps))
								}
							}
							setGrads(ps, s)
							if err := z.StepContext(ctx); err != nil {
								return err
							}
						}
						for i := range ps {
							if err := equalValues(fmt.Sprintf("rank %d parameter %d", g.Rank(), i), ps[i].Value(), ref[i].Value()); err != nil {
								return err
							}
						}
						return nil
					})
				})
			}
		}
	}
}

// noAdder is an optimizer that cannot add a group.
type noAdder struct{ optim.Optimizer }

// TestGroupErrors: what NewGroups and AddParamGroup refuse, each with an
// error that says why, changing nothing.
func TestGroupErrors(t *testing.T) {
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		mk := groupOptimizers[0].make
		ps := newParams(1)
		a, b := ps[:4], ps[4:]
		for _, c := range []struct {
			name   string
			groups []optim.ParamGroup
			opt    zero.Options
			want   string
		}{
			{"no groups", nil, zero.Options{}, "no parameters"},
			{"shared", []optim.ParamGroup{{Params: a}, {Params: ps[3:]}}, zero.Options{}, "parameter 4 (of group 1) is parameter 3 too"},
			{"nil", []optim.ParamGroup{{Params: []*autograd.Var{nil}}}, zero.Options{}, "parameter 0 (of group 0) is nil"},
			{"overlap", []optim.ParamGroup{{Params: a}, {Params: b}}, zero.Options{OverlapWithDDP: true}, "OverlapWithDDP with 2 parameter groups"},
		} {
			if _, err := zero.NewGroups(c.groups, mk, g, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
				return fmt.Errorf("NewGroups, %s: %v, want an error saying %q", c.name, err, c.want)
			}
		}
		z, err := zero.NewGroups([]optim.ParamGroup{{Params: a}}, mk, g, zero.Options{})
		if err != nil {
			return err
		}
		if err := z.AddParamGroup(optim.ParamGroup{Params: ps[2:]}); err == nil || !strings.Contains(err.Error(), "is parameter 2 too") {
			return fmt.Errorf("AddParamGroup of a parameter given already: %v", err)
		}
		if len(z.Params()) != 4 || z.NumGroups() != 1 {
			return errors.New("a refused AddParamGroup changed the optimizer")
		}
		wrapped, err := zero.New(a, func(mine []*autograd.Var) optim.Optimizer {
			return noAdder{optim.NewSGD(mine, optim.SGDOptions{LR: 0.1})}
		}, g, zero.Options{})
		if err != nil {
			return err
		}
		if err := wrapped.AddParamGroup(optim.ParamGroup{Params: b}); err == nil || !strings.Contains(err.Error(), "no optim.GroupAdder") {
			return fmt.Errorf("AddParamGroup over an optimizer without it: %v", err)
		}
		own, err := zero.New(ps, grouped, g, zero.Options{})
		if err != nil {
			return err
		}
		if err := own.AddParamGroup(optim.ParamGroup{Params: []*autograd.Var{autograd.Param(tensor.Zeros(2))}}); err == nil || !strings.Contains(err.Error(), "one group per ZeRO group") {
			return fmt.Errorf("AddParamGroup over a newOpt that made groups of its own: %v", err)
		}
		return nil
	})
}
