package fsdp

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// tree is a small model as nn.NamedModules lists it, each parameter
// with its id and elements:
//
//	emb          weight (id 0, 12)
//	blocks       a container, no nn.Layer
//	blocks.0.fc  weight (1, 6), bias (2, 3)
//	blocks.1.fc  weight (3, 6), bias (4, 3)
//	head         weight (5, 8), tied (emb's weight)
//	(root)       scale (6, 1), frozen
func tree() []planModule {
	p := func(name string, id, n int) planParam {
		return planParam{name: name, id: id, numel: n, trainable: true}
	}
	emb, scale := p("weight", 0, 12), planParam{name: "scale", id: 6, numel: 1}
	fc0w, fc0b, fc1w, fc1b := p("weight", 1, 6), p("bias", 2, 3), p("weight", 3, 6), p("bias", 4, 3)
	head := p("weight", 5, 8)
	in := func(prefix string, ps ...planParam) []planParam {
		out := make([]planParam, len(ps))
		for i, q := range ps {
			out[i] = q
			if prefix != "" {
				out[i].name = prefix + "." + q.name
			}
		}
		return out
	}
	return []planModule{
		{name: "", layer: true, params: append(append(in("emb", emb), in("blocks", append(in("0.fc", fc0w, fc0b), in("1.fc", fc1w, fc1b)...)...)...), append(in("head", head), scale)...)},
		{name: "emb", layer: true, params: []planParam{emb}},
		{name: "blocks", typ: "*nn.ModuleList", params: append(in("0.fc", fc0w, fc0b), in("1.fc", fc1w, fc1b)...)},
		{name: "blocks.0", layer: true, params: in("fc", fc0w, fc0b)},
		{name: "blocks.0.fc", layer: true, params: []planParam{fc0w, fc0b}},
		{name: "blocks.1", layer: true, params: in("fc", fc1w, fc1b)},
		{name: "blocks.1.fc", layer: true, params: []planParam{fc1w, fc1b}},
		{name: "head", layer: true, params: []planParam{head, {name: "tied", id: 0, numel: 12, trainable: true}}},
	}
}

// wrapping returns tree() with Wrap choosing the named modules.
func wrapping(names ...string) []planModule {
	mods := tree()
	for i := range mods {
		for _, n := range names {
			if mods[i].name == n {
				mods[i].wrap = true
			}
		}
	}
	return mods
}

// TestPlanUnits: the units, their parameters' names and the flat layout,
// padded to the world, for each policy; and the policies' errors.
func TestPlanUnits(t *testing.T) {
	// want is a unit as "name: param@offset ... /numel/padded".
	for _, c := range []struct {
		name   string
		mods   []planModule
		policy planPolicy
		want   []string
	}{
		{"everything in the root", tree(), planPolicy{world: 4}, []string{
			"(root): emb.weight@0 blocks.0.fc.weight@12 blocks.0.fc.bias@18 blocks.1.fc.weight@21 blocks.1.fc.bias@27 head.weight@30 /38/40",
		}},
		{"world 1 pads nothing", tree(), planPolicy{world: 1}, []string{
			"(root): emb.weight@0 blocks.0.fc.weight@12 blocks.0.fc.bias@18 blocks.1.fc.weight@21 blocks.1.fc.bias@27 head.weight@30 /38/38",
		}},
		{"wrapped blocks, in registration order", wrapping("blocks.0", "blocks.1"), planPolicy{world: 3}, []string{
			"blocks.0: blocks.0.fc.weight@0 blocks.0.fc.bias@6 /9/9",
			"blocks.1: blocks.1.fc.weight@0 blocks.1.fc.bias@6 /9/9",
			"(root): emb.weight@0 head.weight@12 /20/21",
		}},
		{"nested: the deeper unit first takes its parameters", wrapping("blocks.0", "blocks.0.fc"), planPolicy{world: 2}, []string{
			"blocks.0.fc: blocks.0.fc.weight@0 blocks.0.fc.bias@6 /9/10",
			"(root): emb.weight@0 blocks.1.fc.weight@12 blocks.1.fc.bias@18 head.weight@21 /29/30",
		}},
		// The walk reaches head before emb: emb has nothing left.
		{"a tied parameter goes to the first module the walk reaches", wrapping("emb", "head"), planPolicy{world: 5}, []string{
			"head: head.weight@0 head.tied@8 /20/20",
			"(root): blocks.0.fc.weight@0 blocks.0.fc.bias@6 blocks.1.fc.weight@9 blocks.1.fc.bias@15 /18/20",
		}},
		{"MinParams", tree(), planPolicy{minParams: 9, world: 2}, []string{
			"blocks.0.fc: blocks.0.fc.weight@0 blocks.0.fc.bias@6 /9/10",
			"blocks.1.fc: blocks.1.fc.weight@0 blocks.1.fc.bias@6 /9/10",
			"head: head.weight@0 head.tied@8 /20/20",
		}},
		{"groups split a module's unit", wrapping("blocks.1"), planPolicy{world: 2, group: func(name string, id int) int {
			if strings.HasSuffix(name, "bias") {
				return 1
			}
			return 0
		}}, []string{
			"blocks.1[group 0]: blocks.1.fc.weight@0 /6/6",
			"blocks.1[group 1]: blocks.1.fc.bias@0 /3/4",
			"(root)[group 0]: emb.weight@0 blocks.0.fc.weight@12 head.weight@18 /26/26",
			"(root)[group 1]: blocks.0.fc.bias@0 /3/4",
		}},
		// blocks holds 18, but is a container: the size policy passes it
		// over, to the root.
		{"MinParams passes a container over", tree(), planPolicy{minParams: 18, world: 2}, []string{
			"head: head.weight@0 head.tied@8 /20/20",
			"(root): blocks.0.fc.weight@0 blocks.0.fc.bias@6 blocks.1.fc.weight@9 blocks.1.fc.bias@15 /18/18",
		}},
		{"MinParams with Wrap", wrapping("blocks.0"), planPolicy{minParams: 20, world: 1}, []string{
			"blocks.0: blocks.0.fc.weight@0 blocks.0.fc.bias@6 /9/9",
			"head: head.weight@0 head.tied@8 /20/20",
			"(root): blocks.1.fc.weight@0 blocks.1.fc.bias@6 /9/9",
		}},
		{"no modules", nil, planPolicy{world: 2}, nil},
	} {
		units, err := planUnits(c.mods, c.policy)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got []string
		for _, u := range units {
			got = append(got, planString(u))
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}

	for _, c := range []struct {
		name   string
		mods   []planModule
		policy planPolicy
		want   string
	}{
		{"Wrap chose a container", wrapping("blocks"), planPolicy{world: 1}, "module blocks (*nn.ModuleList), which is no nn.Layer"},
		{"a negative group", tree(), planPolicy{world: 1, group: func(string, int) int { return -1 }}, "parameter emb.weight in group -1"},
	} {
		if _, err := planUnits(c.mods, c.policy); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// planString writes a unit's plan as TestPlanUnits wants it.
func planString(u unitPlan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", u.name)
	for k, n := range u.names {
		fmt.Fprintf(&b, " %s@%d", n, u.offsets[k])
	}
	fmt.Fprintf(&b, " /%d/%d", u.numel, u.padded)
	return b.String()
}

// TestPieces: the ranks' shards of a flat vector split each parameter
// into pieces that cover it once, in order, at the places the shards
// hold them; padding belongs to no parameter.
func TestPieces(t *testing.T) {
	for _, sizes := range [][]int{{1}, {5}, {3, 0, 4}, {7, 1, 1, 9}, {2, 2, 2, 2}} {
		for _, world := range []int{1, 2, 3, 5, 8} {
			var l layout
			for k, n := range sizes {
				l.add(fmt.Sprint(k), n)
			}
			l.padded = (l.numel + world - 1) / world * world
			// flat[i] is the parameter and element that element i of the
			// flat vector holds, as "k:j".
			flat := make([]string, l.padded)
			for rank := range world {
				lo, n := l.shardRange(rank, world)
				if lo != rank*l.padded/world || n != l.padded/world {
					t.Fatalf("sizes %v, world %d: rank %d's shard at %d, %d elements", sizes, world, rank, lo, n)
				}
				for _, pc := range l.pieces(lo, n) {
					if pc.n <= 0 || pc.at < 0 || pc.at+pc.n > n {
						t.Fatalf("sizes %v, world %d, rank %d: piece %+v outside the shard", sizes, world, rank, pc)
					}
					for j := range pc.n {
						at := &flat[lo+pc.at+j]
						if *at != "" {
							t.Fatalf("sizes %v, world %d: element %d in two pieces", sizes, world, lo+pc.at+j)
						}
						*at = fmt.Sprintf("%d:%d", pc.param, pc.from+j)
					}
				}
			}
			var want []string
			for k, n := range sizes {
				for j := range n {
					want = append(want, fmt.Sprintf("%d:%d", k, j))
				}
			}
			for range l.padded - l.numel {
				want = append(want, "")
			}
			if !reflect.DeepEqual(flat, want) {
				t.Errorf("sizes %v, world %d: the pieces lay out %q, want %q", sizes, world, flat, want)
			}
		}
	}
	// One by hand: parameters of 5 and 4 elements, padded to 12 over 3
	// ranks; rank 1 holds elements 4 to 7.
	var l layout
	l.add("a", 5)
	l.add("b", 4)
	l.padded = 12
	lo, n := l.shardRange(1, 3)
	want := []piece{{param: 0, from: 4, at: 0, n: 1}, {param: 1, from: 0, at: 1, n: 3}}
	if got := l.pieces(lo, n); !reflect.DeepEqual(got, want) {
		t.Errorf("rank 1 of 3: pieces %+v, want %+v", got, want)
	}
	if got := l.pieces(8, 4); len(got) != 1 || got[0] != (piece{param: 1, from: 3, at: 0, n: 1}) {
		t.Errorf("rank 2 of 3: pieces %+v, want b's last element then padding", got)
	}
}

// TestUnitStateString: errors and traces name a unit's state.
func TestUnitStateString(t *testing.T) {
	for s, want := range map[unitState]string{sharded: "sharded", gathering: "gathering", gathered: "gathered", 7: "unitState(7)"} {
		if got := s.String(); got != want {
			t.Errorf("%d: %q, want %q", int(s), got, want)
		}
	}
}
