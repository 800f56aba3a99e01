package fsdp

import "fmt"

// The unit planner decides which parameters go in which unit, where each
// lies in its unit's flat parameter, and which part of that each rank
// holds. Like ddp.PlanBuckets and zero.Partition it is pure: data in (the
// module tree as planModule describes it, and the policies), units out;
// no process group, tensors or autograd hooks. So every rank computes the
// same plan, and it is tested without a network (plan_test.go). New
// describes the module to it (describe), then makes a unit of each plan
// over the module's own parameters, shards it and hooks it.

// planModule is one module of the tree, in nn.NamedModules' order: depth
// first in registration order, the root (named "") first.
type planModule struct {
	name  string
	typ   string // its Go type, for errors
	layer bool   // an nn.Layer, whose forward hooks can gather it
	wrap  bool   // Options.Wrap chose it (never asked of the root)
	// params are the module's nn.NamedParameters, named within it.
	params []planParam
}

// planParam is one parameter of a module.
type planParam struct {
	name  string // within its module
	id    int    // the parameter itself: the same in every module holding it
	numel int
	// trainable is set when it requires a gradient: units hold only
	// those, the others staying whole on every rank.
	trainable bool
}

// planPolicy is what of Options the planner applies.
type planPolicy struct {
	minParams int // Options.MinParams
	// group is Options.Group, given the parameter's dotted name and id;
	// nil puts every parameter in group 0 and keeps units' names plain.
	group func(name string, id int) int
	// world is the shard group's size: every flat parameter is padded to
	// a multiple of it.
	world int
}

// unitPlan is one unit: a module's parameters of one parameter group,
// laid out in one flat parameter.
type unitPlan struct {
	name   string // the module's, "(root)" for the root's
	module int    // its module's index in the planner's modules (0: the root)
	group  int    // the parameter group of all its parameters
	ids    []int  // its parameters, in layout order
	layout
}

// layout is where a unit's parameters lie in its flat parameter: back to
// back in plan order, then zeros up to padded, which a world of ranks
// splits into equal shards.
type layout struct {
	names   []string // each parameter's dotted name, through the unit's module
	offsets []int    // where each starts in the flat vector
	sizes   []int    // and how many elements it has
	numel   int      // the parameters' elements, all told
	padded  int      // the flat vector's length: numel rounded up to a multiple of the world
}

// planUnits chooses the units of mods under policy: deepest module first,
// each module that Wrap chose, or that holds at least minParams trainable
// parameters no smaller unit holds, takes those parameters (a container
// that is no nn.Layer and that only the size policy would choose is passed
// over, so that the policy looks further up); the root takes every
// trainable parameter left. A module's parameters are split by group,
// one unit a group in order of first appearance. It returns the wrapped
// modules' units in registration order, then the root's.
func planUnits(mods []planModule, policy planPolicy) ([]unitPlan, error) {
	if len(mods) == 0 {
		return nil, nil
	}
	owned := map[int]bool{}
	var units []unitPlan
	// Deepest first: mods is depth first, so children come after their
	// parents; walk it backwards.
	for i := len(mods) - 1; i >= 1; i-- {
		m := mods[i]
		var free []planParam
		count := 0
		for _, p := range m.params {
			if !owned[p.id] && p.trainable {
				free = append(free, p)
				count += p.numel
			}
		}
		if !m.wrap && (policy.minParams <= 0 || count < policy.minParams) {
			continue
		}
		if !m.layer {
			if !m.wrap {
				continue // a container: the size policy looks further up
			}
			return nil, fmt.Errorf("fsdp: Wrap chose module %s (%s), which is no nn.Layer: no forward hooks could gather it", m.name, m.typ)
		}
		if len(free) == 0 {
			continue
		}
		names := make([]string, len(free))
		for k, p := range free {
			names[k] = m.name + "." + p.name
		}
		us, err := splitGroups(i, m.name, names, free, policy)
		if err != nil {
			return nil, err
		}
		for _, p := range free {
			owned[p.id] = true
		}
		units = append(us, units...) // registration order
	}
	var rest []planParam
	var names []string
	for _, p := range mods[0].params {
		if !owned[p.id] && p.trainable {
			rest = append(rest, p)
			names = append(names, p.name)
		}
	}
	roots, err := splitGroups(0, "(root)", names, rest, policy)
	if err != nil {
		return nil, err
	}
	units = append(units, roots...)
	for i := range units {
		l := &units[i].layout
		l.padded = (l.numel + policy.world - 1) / policy.world * policy.world
	}
	return units, nil
}

// splitGroups makes the units of module (named name) over ps, named
// names: one per parameter group.
func splitGroups(module int, name string, names []string, ps []planParam, policy planPolicy) ([]unitPlan, error) {
	var us []unitPlan
	byGroup := map[int]int{} // a group's unit's index in us
	for i, p := range ps {
		g := 0
		if policy.group != nil {
			g = policy.group(names[i], p.id)
		}
		if g < 0 {
			return nil, fmt.Errorf("fsdp: Group put parameter %s in group %d; groups are 0, 1, ...", names[i], g)
		}
		k, ok := byGroup[g]
		if !ok {
			u := unitPlan{name: name, module: module, group: g}
			if policy.group != nil {
				u.name = fmt.Sprintf("%s[group %d]", name, g)
			}
			k = len(us)
			byGroup[g] = k
			us = append(us, u)
		}
		us[k].ids = append(us[k].ids, p.id)
		us[k].add(names[i], p.numel)
	}
	return us, nil
}

// add lays a parameter of n elements out after the others.
func (l *layout) add(name string, n int) {
	l.names = append(l.names, name)
	l.offsets = append(l.offsets, l.numel)
	l.sizes = append(l.sizes, n)
	l.numel += n
}

// shardRange returns where rank's shard lies in the flat vector when world
// ranks shard it: n elements from lo.
func (l *layout) shardRange(rank, world int) (lo, n int) {
	n = l.padded / world
	return rank * n, n
}

// piece is the overlap of one parameter with a range of the flat vector
// (a rank's shard, say).
type piece struct {
	param int // the parameter's index in the unit
	from  int // where the overlap starts in the parameter, flattened
	at    int // and where in the range
	n     int // its elements
}

// pieces returns the overlap of each parameter with the n elements of the
// flat vector from lo, in parameter order; parameters outside the range
// have none, and padding belongs to none.
func (l *layout) pieces(lo, n int) []piece {
	var out []piece
	for k, off := range l.offsets {
		a, b := max(off, lo), min(off+l.sizes[k], lo+n)
		if a < b {
			out = append(out, piece{param: k, from: a - off, at: a - lo, n: b - a})
		}
	}
	return out
}
