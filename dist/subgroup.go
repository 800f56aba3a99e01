package dist

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/godist/godist/tensor"
)

// NewGroup makes a subgroup of the members with the given group ranks of
// g. Every member of g must call it, in the same order relative to its
// other calls, with the same ranks (checked); members outside ranks get
// nil. The subgroup's rank i is ranks[i] after sorting.
func (g *Group) NewGroup(ctx context.Context, ranks []int) (*Group, error) {
	rs := slices.Clone(ranks)
	slices.Sort(rs)
	rs = slices.Compact(rs)
	if len(rs) == 0 || rs[0] < 0 || rs[len(rs)-1] >= g.Size() {
		return nil, &InputError{"new_group", fmt.Sprintf("ranks %v: want a non-empty list of ranks of this group of %d", ranks, g.Size())}
	}
	h := fnv.New64a()
	for _, r := range rs {
		fmt.Fprintf(h, "%d,", r)
	}
	// A barrier whose fingerprint carries the list: a member passing a
	// different list gets a desync error naming it.
	c := call{op: opNewGroup, count: int(h.Sum64() & (1<<40 - 1)), root: -1, via: g.route(0, nil)}
	if err := g.run(ctx, c, func(ctx context.Context, seq uint64) error { return g.barrier(ctx, seq, c) }); err != nil {
		return nil, err
	}
	id := g.childID(0)
	if !slices.Contains(rs, g.rank) {
		return nil, nil
	}
	global := make([]int, len(rs))
	for i, r := range rs {
		global[i] = g.ranks[r]
	}
	sub := newGroup(g.world, id, global, g.timeout)
	if err := sub.initCtl(ctx); err != nil {
		sub.Destroy()
		return nil, err
	}
	return sub, nil
}

// Split divides g into subgroups, one per distinct color, as MPI_Comm_split:
// members are ordered in their subgroup by (key, rank in g). Every member of
// g must call it. A negative color joins no subgroup (nil is returned).
func (g *Group) Split(ctx context.Context, color, key int) (*Group, error) {
	mine := tensor.FromInt64([]int64{int64(color), int64(key)})
	all := tensor.New(tensor.Int64, 2*g.Size())
	if err := g.AllGatherIntoTensor(ctx, all, mine); err != nil {
		return nil, err
	}
	v := all.Int64s()
	var colors []int64
	for r := range g.Size() {
		if c := v[2*r]; c >= 0 && !slices.Contains(colors, c) {
			colors = append(colors, c)
		}
	}
	slices.Sort(colors)
	n := g.nextChild()
	if color < 0 {
		return nil, nil
	}
	var members []int
	for r := range g.Size() {
		if v[2*r] == int64(color) {
			members = append(members, r)
		}
	}
	sort.SliceStable(members, func(i, j int) bool { return v[2*members[i]+1] < v[2*members[j]+1] })
	global := make([]int, len(members))
	for i, r := range members {
		global[i] = g.ranks[r]
	}
	id := childID(g.id, n, color)
	sub := newGroup(g.world, id, global, g.timeout)
	// Group ranks follow the split order, not ascending global ranks.
	sub.rank = slices.Index(global, g.world.rank)
	if err := sub.initCtl(ctx); err != nil {
		sub.Destroy()
		return nil, err
	}
	return sub, nil
}

// Group ids: a subgroup's id is a hash of its parent's id, how many
// subgroups the parent had made before (every member of the parent makes
// them in the same order, being collective calls) and the split color. So
// every member computes the same id without talking, whatever other groups
// it belongs to.

// nextChild counts one more subgroup-making call of g.
func (g *Group) nextChild() uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.children++
	return g.mu.children
}

func (g *Group) childID(color int) uint32 { return childID(g.id, g.nextChild(), color) }

func childID(parent, n uint32, color int) uint32 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%d/%d", parent, n, color)
	id := h.Sum32() &^ p2pBit
	if id == 0 {
		id = 1
	}
	return id
}

// Destroy leaves the group: it is unregistered and later calls fail. Once
// the calls in flight have ended (Destroy waits up to 5 s for them), it
// releases the group's shared tensors (NewSharedTensor): they must not be
// used afterwards. For the default group it also closes the connections
// and the store, and releases the shared tensors of every group.
func (g *Group) Destroy() error {
	g.flushAbort()
	g.fail(ErrDestroyed)
	g.mu.Lock()
	if g.mu.timer != nil {
		g.mu.timer.Stop()
	}
	g.mu.Unlock()
	g.world.mu.Lock()
	delete(g.world.mu.groups, g.id)
	others := slices.Collect(maps.Values(g.world.mu.groups))
	g.world.mu.Unlock()
	if g.id != 0 {
		g.releaseShared(destroyWait)
		return nil
	}
	// The subgroups' news too (an Abort, a desync) goes out before the
	// connections close.
	for _, o := range others {
		o.flushAbort()
	}
	if g.world.stopStatus != nil {
		g.world.stopStatus()
	}
	if g.world.stopSignal != nil {
		g.world.stopSignal()
	}
	unregisterWorld(g.world)
	err := g.world.ep.Close()
	for _, c := range g.world.closers {
		if cerr := c(); cerr != nil && err == nil {
			err = cerr
		}
	}
	// With the connections closed, the subgroups' calls fail too.
	for _, o := range append(others, g) {
		o.releaseShared(destroyWait)
	}
	return err
}

// destroyWait bounds how long Destroy waits for a group's calls in flight
// before releasing its shared tensors.
const destroyWait = 5 * time.Second
