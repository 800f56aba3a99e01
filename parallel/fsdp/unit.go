package fsdp

import (
	"context"
	"fmt"
	"slices"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// A unit's flat parameter is in one of three states on each rank
// (unitState). It starts sharded; a prefetch (startGather) makes it
// gathering while its all-gather is in flight; gather makes it gathered,
// from either state; free makes it sharded again, and so does Wait for a
// prefetch no pass took. Under NoShard in float32 a unit is gathered from
// New on and never freed: the flat parameter is computed on in place.

// unitState is where a unit's flat parameter is on this rank.
type unitState int

const (
	// sharded: this rank holds its shard alone, and the module's
	// parameters are placeholders of their shapes that hold no memory.
	sharded unitState = iota
	// gathering: a prefetch's all-gather is in flight (unit.inflight),
	// landing in unit.landing.
	gathering
	// gathered: unit.full holds the whole flat parameter, and the
	// module's parameters are views of it.
	gathered
)

var unitStates = [...]string{sharded: "sharded", gathering: "gathering", gathered: "gathered"}

func (s unitState) String() string {
	if s >= 0 && int(s) < len(unitStates) {
		return unitStates[s]
	}
	return fmt.Sprintf("unitState(%d)", int(s))
}

// unit is one flat parameter: its plan (the module parameters it holds
// and where each lies in the flat vector), this rank's shard, and the
// gathered whole.
type unit struct {
	unitPlan
	layer  nn.Layer // nil for the root
	params []*autograd.Var
	shard  *autograd.Var // this rank's piece (the whole, with NoShard)
	state  unitState
	full   *tensor.Tensor // the gathered flat parameters, when gathered
	// held and upcast are the bytes this unit counts in FSDP.gathered and
	// FSDP.upcast; rounded is set when full holds ParamDType's values.
	held, upcast int
	rounded      bool
	ready        int  // parameters whose gradient is ready this pass
	called       bool // gathered in this forward pass
	// A prefetch in flight (gathering): the gather's work and where it
	// lands.
	inflight *dist.Work
	landing  *tensor.Tensor
	// accum is the unit's whole flat gradient that NoSync's passes have
	// accumulated, float32, or nil.
	accum *tensor.Tensor
}

// viewParams points every parameter of u at its piece of u.full.
func (u *unit) viewParams() {
	for i, p := range u.params {
		shape := p.Shape()
		p.SetValue(u.full.Narrow(0, u.offsets[i], u.sizes[i]).Reshape(shape...))
	}
}

// free drops u's gathered parameters: each parameter's value becomes a
// placeholder of its shape that holds no memory. Prefetches that
// LimitAllGathers held back start, as far as the limit now lets them.
func (f *FSDP) free(u *unit) {
	f.gathered -= u.held
	f.upcast -= u.upcast
	u.held, u.upcast, u.rounded = 0, 0, false
	u.full = nil
	if u.state == gathered {
		u.state = sharded // a gather in flight is left to land
	}
	zero := tensor.New(tensor.Float32, 1)
	for _, p := range u.params {
		p.SetValue(zero.Reshape().Expand(p.Shape()...))
	}
	for len(f.deferred) > 0 && f.mayPrefetch(f.deferred[0]) {
		next := f.deferred[0]
		f.deferred = f.deferred[1:]
		f.startGather(next, "prefetch")
	}
}

// gather all-gathers u's shards into its full parameters, unless they are
// already there. A failure is kept for Backward; the parameters then hold
// zeros, so that the pass runs to its end.
func (f *FSDP) gather(u *unit) {
	u.called = true
	if i := slices.Index(f.deferred, u); i >= 0 {
		f.deferred = slices.Delete(f.deferred, i, i+1)
	}
	if u.state == gathered {
		return
	}
	f.startGather(u, "gather")
	if u.state == gathering {
		if err := f.wait(context.Background(), u.inflight); err != nil {
			f.setErr(fmt.Errorf("fsdp: gather unit %s: %w", u.name, err))
			// A call given up on may go on writing where it lands.
			u.landing = tensor.New(u.landing.DType(), u.padded)
		}
	}
	full := u.landing
	u.rounded = full.DType() != tensor.Float32
	if u.rounded {
		// Exactly the gathered values, in the kernels' float32.
		full = full.To(tensor.Float32)
		u.upcast = 4 * u.padded
		f.upcast += u.upcast
		f.peakUpcast = max(f.peakUpcast, f.upcast)
	}
	u.full, u.inflight, u.landing = full, nil, nil
	u.state = gathered
	u.viewParams()
}

// startGather starts gathering u's shards, at ParamDType unless f.exact,
// unless u is not sharded. Under NoShard (mixed precision only) it rounds
// the whole locally, and when the group has failed it starts nothing:
// either way u stays sharded, with what gather is to take in landing.
// why ("gather", needed now, or "prefetch") is for f.trace.
func (f *FSDP) startGather(u *unit, why string) {
	if u == nil || u.state != sharded {
		return
	}
	dt := f.paramDT
	if f.exact {
		dt = tensor.Float32
	}
	mine := u.shard.Value().To(dt) // the shard itself for float32
	if f.opt.Strategy == NoShard {
		u.landing = mine
		return
	}
	u.landing = tensor.New(dt, u.padded)
	if err := f.group.Err(); err != nil {
		// The group has failed, maybe through a rank outside the shard
		// group, which would still gather: start nothing (zeros land).
		f.setErr(fmt.Errorf("fsdp: gather unit %s: %w", u.name, err))
		return
	}
	u.held = u.padded * dt.Size()
	f.gathered += u.held
	f.peak = max(f.peak, f.gathered)
	f.gatherBytes += int64(len(mine.Bytes()))
	f.tracef(why, u)
	u.inflight = f.shards.AllGatherIntoTensorAsync(u.landing, mine)
	u.state = gathering
}

// request starts a prefetch of u, or queues it while LimitAllGathers
// holds it back.
func (f *FSDP) request(u *unit) {
	if u == nil || u.state != sharded || slices.Contains(f.deferred, u) {
		return
	}
	if !f.mayPrefetch(u) {
		f.deferred = append(f.deferred, u)
		return
	}
	f.startGather(u, "prefetch")
}

// mayPrefetch reports whether LimitAllGathers lets u's gather start now:
// u's module already counts, or fewer than the limit do.
func (f *FSDP) mayPrefetch(u *unit) bool {
	if f.limit == 0 || !f.reshardAfterForward() {
		return true
	}
	var busy []nn.Layer
	for _, v := range f.units {
		if v.layer == nil || v.state == sharded {
			continue
		}
		if v.layer == u.layer {
			return true
		}
		if !slices.Contains(busy, v.layer) {
			busy = append(busy, v.layer)
		}
	}
	return len(busy) < f.limit
}

// prefetch starts gathering the units of the module next to u's in the
// last forward pass's order: after it (d = 1) or before it (d = -1, the
// next in backward). A module's units (one per parameter group) are
// adjacent in that order and are prefetched together.
func (f *FSDP) prefetch(u *unit, d int) {
	i := slices.Index(f.order, u)
	if i < 0 {
		return
	}
	for i >= 0 && i < len(f.order) && f.order[i].layer == u.layer {
		i += d
	}
	for j := i; j >= 0 && j < len(f.order) && f.order[j].layer == f.order[i].layer; j += d {
		f.request(f.order[j])
	}
}
