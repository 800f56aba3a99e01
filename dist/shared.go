package dist

import (
	"context"
	"errors"
	"fmt"

	"github.com/godist/godist/dist/internal/samehost"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// NewSharedTensor returns a zeroed contiguous tensor that, when all of g
// is on one host, every member maps from every other. Collectives whose
// input is it, or a piece of at least 128 KiB of it, then send no payload
// (package samehost's Tensors):
//   - AllReduce (the same piece on every member): each member reduces its
//     share straight out of the others' copies and writes the result into
//     them;
//   - Broadcast (the same piece everywhere): each member copies root's
//     piece into its own, one copy where a transfer makes two;
//   - AllGatherIntoTensor and ReduceScatterTensor (each member's input
//     anywhere in its copy, such as its own chunk of a shared output):
//     each member reads the others' inputs where they lie.
//
// DDP keeps its gradient buckets in such a tensor.
//
// Every member must call it, in the same order as its other collectives.
// Unless all of g is on one host with shared memory on (members on other
// hosts, the in-process transport, Options.SharedMemory off) it returns an
// ordinary tensor, and says why to the logger of Options.Logger; the
// result behaves the same either way.
//
// A shared tensor stays mapped until its Release (tensor.Tensor.Release,
// of it or of any view) or g's Destroy, which releases every shared tensor
// of g once the calls in flight on g have ended; the collector never frees
// it. After either, neither it, its views nor any slice of its memory may
// be used (built with the tag godist_guard, a use through the tensor
// panics, naming who released it). Release it only when no call in flight
// uses it. An ordinary tensor returned instead ignores Release.
func (g *Group) NewSharedTensor(ctx context.Context, d tensor.DType, shape ...int) (*tensor.Tensor, error) {
	t, _, err := g.newShared(ctx, d, shape...)
	return t, err
}

// newShared is NewSharedTensor, also returning the tensor as g's
// same-host engine knows it (nil for an ordinary tensor).
func (g *Group) newShared(ctx context.Context, d tensor.DType, shape ...int) (*tensor.Tensor, *samehost.Tensor, error) {
	if g.Size() == 1 {
		return tensor.New(d, shape...), nil, nil
	}
	n := d.Size()
	for _, s := range shape {
		n *= s
	}
	// The transport's peer memory, when it offers any (transport.PeerMemory).
	pm, ok := g.world.ep.PeerMemory()
	var mine regionDesc
	var region *transport.Region
	var regionErr error
	if !ok {
		regionErr = errors.New("the transport offers no shared memory")
	} else {
		region, regionErr = pm.NewRegion(n)
	}
	if regionErr == nil {
		mine = regionDesc{region.ID(), region.Name(), n}
		defer region.Unlink()
	}
	fail := func(err error) (*tensor.Tensor, *samehost.Tensor, error) {
		if region != nil {
			region.Close()
		}
		return nil, nil, fmt.Errorf("dist: rank %d: new shared tensor: %w", g.rank, err)
	}
	descs, err := AllGatherObject(ctx, g, mine)
	if err != nil {
		return fail(err)
	}
	// Map the members' regions that this rank can read.
	var mapped []int
	for q, dq := range descs {
		peer := g.ranks[q]
		if q == g.rank || dq.Name == "" || pm == nil || !pm.SharesMemoryWith(peer) {
			continue
		}
		if pm.MapRegion(peer, dq.ID, dq.Name, dq.N) == nil {
			mapped = append(mapped, q)
		}
	}
	oks, err := AllGatherObject(ctx, g, mapped)
	if err != nil {
		return fail(err)
	}
	// Shared only when every member mapped every other's copy: then
	// all-reduces of the tensor go through shared memory (samehost.Tensors).
	// In a group that spans hosts it is an ordinary tensor, and this rank
	// lets go of the copies it mapped.
	full := region != nil
	for q, ok := range oks {
		full = full && len(ok) == g.Size()-1 && descs[q].Name != ""
	}
	if !full {
		g.logNotShared(descs, oks, regionErr)
		for _, q := range mapped {
			pm.UnmapRegion(g.ranks[q], descs[q].ID)
		}
		if region != nil {
			region.Close()
		}
		return tensor.New(d, shape...), nil, nil
	}
	ids := make([]uint8, g.Size())
	for q, dq := range descs {
		ids[q] = dq.ID
	}
	// The release forgets the tensor before its memory is unmapped;
	// Region.Close waits for a shared all-reduce still reading the memory.
	var st *samehost.Tensor
	t := tensor.NewMapped(d, region.Bytes(), func() { g.host.Tensors.Remove(st); region.Close() }, shape...)
	st = g.host.Tensors.Add(region.Bytes(), pm, ids, t.Release)
	return t, st, nil
}

// regionDesc is what a member of NewSharedTensor says of its region: none
// when Name is "".
type regionDesc struct {
	ID   uint8
	Name string
	N    int
}

// logNotShared tells the endpoint's logger why NewSharedTensor returns an
// ordinary tensor: which members (by global rank) made no region to share
// (this rank's own error, if it is one) and which could not map every
// other member's.
func (g *Group) logNotShared(descs []regionDesc, mapped [][]int, regionErr error) {
	var noRegion, partial []int
	for q := range descs {
		switch {
		case descs[q].Name == "":
			noRegion = append(noRegion, g.ranks[q])
		case len(mapped[q]) != g.Size()-1:
			partial = append(partial, g.ranks[q])
		}
	}
	args := []any{"group", g.id, "members", g.ranks, "rank", g.ranks[g.rank], "no_region", noRegion, "mapped_not_all", partial}
	if regionErr != nil {
		args = append(args, "err", regionErr)
	}
	g.world.ep.Logger().Info("dist: NewSharedTensor returns an ordinary tensor: not all of the group can map each other's memory (members on other hosts, shared memory off, or the in-process transport)", args...)
}
