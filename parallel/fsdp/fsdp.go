package fsdp

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/internal/precision"
	"github.com/godist/godist/tensor"
)

// FSDP wraps a module for fully sharded data-parallel training.
type FSDP struct {
	nn.Base
	Module nn.Layer
	group  *dist.Group
	shards *dist.Group // the ranks a flat parameter is sharded over
	// replicas, for HybridShard, are the ranks holding the same shard.
	replicas *dist.Group
	opt      Options
	units    []*unit // wrapped units, then the root's (last)
	roots    []*unit // the root's units, one per parameter group

	mu struct {
		sync.Mutex
		pending []pendingReduce
		err     error
		noSync  bool // inside NoSync: gradients accumulate unreduced
	}
	// paramDT and reduceDT are MixedPrecision's, resolved; limit is
	// LimitAllGathers's (0 for none); backPrefetch is the backward
	// prefetch policy, resolved.
	paramDT, reduceDT tensor.DType
	limit             int
	backPrefetch      BackwardPrefetch
	// deferred are prefetches the limit holds back, oldest first.
	deferred []*unit
	// exact makes gathers float32 whatever ParamDType is (inside
	// SummonFullParams).
	exact bool
	// Bytes of gathered flat parameters (at the gather's precision) and
	// of their float32 copies, now and at most; bytes sent.
	gathered, peak        int
	upcast, peakUpcast    int
	gatherBytes, redBytes int64
	// order is the order in which the wrapped units ran forward in the
	// last pass (recorded in this one, as next), for prefetching.
	order, next []*unit
	// summoned is set inside SummonFullParams: the module may be run
	// there (on one rank alone), and units stay gathered.
	summoned bool
	// trace, if set (by tests), is told each all-gather issued, each
	// gradient ready and each reduction issued, as "gather U", "prefetch
	// U", "grad U" and "reduce U" for unit U.
	trace func(event string)
}

// pendingReduce is a unit's gradient reduction in flight.
type pendingReduce struct {
	u    *unit
	grad *tensor.Tensor // the shard's gradient once work is done
	work *dist.Work
	// store is where the unit's gradients came from, and where the
	// shard's goes: Grad, or a distributed autograd context.
	store autograd.GradStore
}

// New wraps module for training over group. Every member must call it
// with the same architecture and options.
func New(ctx context.Context, module nn.Layer, group *dist.Group, opt Options) (*FSDP, error) {
	f := &FSDP{Module: module, group: group, shards: group, opt: opt, limit: opt.LimitAllGathers}
	f.RegisterModule("module", module)
	var err error
	if f.paramDT, f.reduceDT, err = opt.MixedPrecision.resolve(); err != nil {
		return nil, err
	}
	if f.backPrefetch, err = opt.backwardPrefetch(); err != nil {
		return nil, err
	}
	switch {
	case f.limit == 0:
		f.limit = 2
	case f.limit < 0:
		f.limit = 0
	}
	if opt.Strategy == HybridShard {
		shard, replica, err := hybridGroups(group.Topology().Hosts, group.Size(), group.Rank(), opt.ShardSize)
		if err != nil {
			return nil, err
		}
		if f.shards, err = group.Split(ctx, shard, group.Rank()); err != nil {
			return nil, fmt.Errorf("fsdp: shard groups: %w", err)
		}
		if f.replicas, err = group.Split(ctx, replica, group.Rank()); err != nil {
			return nil, fmt.Errorf("fsdp: replica groups: %w", err)
		}
	}
	if err := f.makeUnits(); err != nil {
		return nil, err
	}
	if !opt.NoSyncModuleStates {
		for _, p := range nn.NamedParameters(module) {
			if err := group.Broadcast(ctx, p.Value.Value(), 0); err != nil {
				return nil, fmt.Errorf("fsdp: broadcast parameter %s: %w", p.Name, err)
			}
		}
		for _, b := range nn.NamedBuffers(module) {
			if err := group.Broadcast(ctx, b.Value, 0); err != nil {
				return nil, fmt.Errorf("fsdp: broadcast buffer %s: %w", b.Name, err)
			}
		}
	}
	for _, u := range f.units {
		f.shardUnit(u)
	}
	return f, nil
}

// hybridGroups returns, for HybridShard, the colours of rank's shard group
// and replica group (Group.Split's): with shardSize, consecutive runs of
// shardSize ranks shard and the ranks at one offset in them replicate;
// with shardSize 0, each host of hosts (the group's topology, ranks
// ascending) shards and the ranks at one place on their hosts replicate,
// so that gathers and reduce-scatters stay in the host's memory and only
// the replicas' all-reduces cross the network.
func hybridGroups(hosts [][]int, world, rank, shardSize int) (shard, replica int, err error) {
	if shardSize != 0 {
		if shardSize < 1 || world%shardSize != 0 {
			return 0, 0, fmt.Errorf("fsdp: HybridShard with ShardSize %d in a group of %d ranks: the shard size must divide the group", shardSize, world)
		}
		return rank / shardSize, rank % shardSize, nil
	}
	for h, rs := range hosts {
		if len(rs) != len(hosts[0]) {
			return 0, 0, fmt.Errorf("fsdp: HybridShard shards within each host, but host 0 holds %d of the group's ranks and host %d holds %d: every shard group must be the same size; set Options.ShardSize to shard otherwise", len(hosts[0]), h, len(rs))
		}
	}
	for h, rs := range hosts {
		rs = slices.Clone(rs)
		slices.Sort(rs)
		if i := slices.Index(rs, rank); i >= 0 {
			return h, i, nil
		}
	}
	return 0, 0, fmt.Errorf("fsdp: HybridShard: rank %d is on none of the group's hosts %v", rank, hosts)
}

// makeUnits makes a unit of each unit the planner chooses (planUnits)
// over the module's own parameters: wrapped units in registration order,
// then the root's.
func (f *FSDP) makeUnits() error {
	mods, named, vars := describe(f.Module, f.opt.Wrap)
	policy := planPolicy{minParams: f.opt.MinParams, world: f.shards.Size()}
	if f.opt.Group != nil {
		policy.group = func(name string, id int) int { return f.opt.Group(name, vars[id]) }
	}
	plans, err := planUnits(mods, policy)
	if err != nil {
		return err
	}
	for _, pl := range plans {
		u := &unit{unitPlan: pl}
		for _, id := range pl.ids {
			u.params = append(u.params, vars[id])
		}
		if pl.module == 0 {
			f.roots = append(f.roots, u)
		} else {
			u.layer = named[pl.module].Value.(nn.Layer)
		}
		f.units = append(f.units, u)
	}
	for _, u := range f.units {
		for _, p := range u.params {
			if p.DType() != tensor.Float32 {
				return fmt.Errorf("fsdp: parameter %s is %v; FSDP shards float32 parameters", u.names[0], p.DType())
			}
		}
	}
	return nil
}

// describe gives the planner the module tree of root: its modules (Wrap
// asked of each but the root, deepest first), nn.NamedModules' list of
// them, and every parameter, indexed by its id.
func describe(root nn.Module, wrap func(name string, m nn.Module) bool) ([]planModule, []nn.Named[nn.Module], []*autograd.Var) {
	var vars []*autograd.Var
	id := map[*autograd.Var]int{}
	for _, p := range nn.NamedParameters(root) {
		id[p.Value] = len(vars)
		vars = append(vars, p.Value)
	}
	named := nn.NamedModules(root)
	mods := make([]planModule, len(named))
	for i := len(named) - 1; i >= 0; i-- {
		m := named[i]
		_, layer := m.Value.(nn.Layer)
		mods[i] = planModule{name: m.Name, typ: fmt.Sprintf("%T", m.Value), layer: layer}
		mods[i].wrap = i > 0 && wrap != nil && wrap(m.Name, m.Value)
		for _, p := range nn.NamedParameters(m.Value) {
			mods[i].params = append(mods[i].params, planParam{name: p.Name, id: id[p.Value], numel: p.Value.Value().Numel(), trainable: p.Value.RequiresGrad()})
		}
	}
	return mods, named, vars
}

// shardUnit flattens u's parameters, keeps this rank's shard and hooks the
// unit's forward and its parameters' gradients.
func (f *FSDP) shardUnit(u *unit) {
	flat := tensor.New(tensor.Float32, u.padded)
	for i, p := range u.params {
		flat.Narrow(0, u.offsets[i], p.Value().Numel()).Copy(p.Value().Reshape(-1))
	}
	if f.opt.Strategy == NoShard {
		u.shard = autograd.Param(flat)
		if f.paramDT == tensor.Float32 {
			u.full, u.state = flat, gathered // computed on in place; never freed
			u.viewParams()
		} else {
			f.free(u) // each forward rounds the whole anew
		}
	} else {
		lo, n := u.shardRange(f.shards.Rank(), f.shards.Size())
		u.shard = autograd.Param(flat.Narrow(0, lo, n).Clone())
		f.free(u)
	}
	for i, p := range u.params {
		p.RegisterGradReadyHookIn(func(_ *autograd.Var, s autograd.GradStore) { f.onGradReady(u, i, s) })
	}
	if h, ok := u.layer.(hookable); ok {
		h.RegisterForwardPreHook(func(nn.Module, *autograd.Var) *autograd.Var {
			if !f.summoned {
				f.next = append(f.next, u)
			}
			f.gather(u)
			if f.opt.ForwardPrefetch && !f.summoned {
				f.prefetch(u, 1)
			}
			return nil
		})
		h.RegisterForwardHook(func(_ nn.Module, _, y *autograd.Var) *autograd.Var {
			if !f.reshardAfterForward() || f.summoned {
				return nil
			}
			f.free(u)
			if y.RequiresGrad() {
				// Gather again when backward reaches the unit's output.
				y.RegisterHook(func(*tensor.Tensor) *tensor.Tensor {
					f.gather(u)
					if f.backPrefetch == BackwardPre {
						f.prefetch(u, -1)
					}
					return nil
				})
			}
			return nil
		})
	}
}

// hookable is a module with forward hooks (every module embedding
// nn.Base).
type hookable interface {
	RegisterForwardPreHook(nn.PreHook) (remove func())
	RegisterForwardHook(nn.PostHook) (remove func())
}

// reshardAfterForward reports whether units free their parameters after
// forward (and gather them again for backward).
func (f *FSDP) reshardAfterForward() bool {
	return f.opt.Strategy == FullShard || f.opt.Strategy == HybridShard
}

// wait waits for w, a call of the shard or replica group. Under
// HybridShard those are subgroups, which the death of a rank outside them
// does not fail; the whole group does fail at once, and wait then gives
// up with its error (naming the dead rank) instead of waiting for a peer
// that has given up too.
func (f *FSDP) wait(ctx context.Context, w *dist.Work) error {
	if f.replicas == nil {
		return w.Wait(ctx)
	}
	select {
	case <-w.Done():
		return w.Err()
	case <-f.group.Failed():
		return f.group.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *FSDP) setErr(err error) {
	f.mu.Lock()
	if f.mu.err == nil {
		f.mu.err = err
	}
	f.mu.Unlock()
}

// Forward gathers the root's parameters and runs the module.
func (f *FSDP) Forward(x *autograd.Var) *autograd.Var {
	for _, u := range f.units {
		u.called, u.ready = false, 0
	}
	f.next = f.next[:0]
	f.deferred = f.deferred[:0]
	if f.opt.Strategy == NoShard && f.paramDT != tensor.Float32 {
		for _, u := range f.units {
			f.free(u) // the last pass's rounding of the old parameters
		}
	}
	for _, u := range f.roots {
		f.gather(u)
	}
	if f.opt.ForwardPrefetch && len(f.order) > 0 {
		f.request(f.order[0])
	}
	// MixedPrecision computes in ParamDType: the products under
	// Autocast, the rest in float32 (the parameters they read are
	// ParamDType's values all the same).
	compute := f.paramDT
	if f.exact {
		compute = tensor.Float32
	}
	y := precision.Call(compute, f.Module, x)
	f.order = append(f.order[:0], f.next...)
	for _, u := range f.units {
		if !u.called {
			f.setErr(fmt.Errorf("fsdp: unit %s was never called through nn.Call in the forward pass, so it was never gathered; choose units its parent calls through nn.Call", u.name))
		}
	}
	return y
}

// onGradReady runs in autograd's grad-ready hook of u's parameter i, its
// gradient in s (Grad, or a distributed autograd context's store); when
// the unit's last one is ready it flattens the unit's gradients, added to
// what NoSync accumulated, and starts their reduction, or inside NoSync
// keeps them for the next synchronised pass. The shard's gradient goes to
// the same store.
func (f *FSDP) onGradReady(u *unit, i int, s autograd.GradStore) {
	f.tracef("grad", u)
	u.ready++
	if u.ready < len(u.params) {
		return
	}
	flat, fresh := u.accum, u.accum == nil
	if fresh {
		flat = tensor.New(tensor.Float32, u.padded)
	}
	for k, p := range u.params {
		if g := s.Grad(p); g != nil {
			dst := flat.Narrow(0, u.offsets[k], g.Numel())
			if fresh {
				dst.Copy(g.Reshape(-1))
			} else {
				dst.AddScaled(dst, 1, g.Reshape(-1))
			}
		}
		s.SetGrad(p, nil)
	}
	f.mu.Lock()
	reduce := !f.mu.noSync
	f.mu.Unlock()
	u.accum = nil
	if !reduce {
		u.accum = flat
	}
	sharded := f.opt.Strategy != NoShard
	if f.backPrefetch == BackwardPost && f.reshardAfterForward() {
		// PyTorch's order: free the unit, start gathering the next one
		// of backward (once the module's every unit is done), reduce.
		f.free(u)
		sharded = false
		if f.moduleReady(u) {
			f.prefetch(u, -1)
		}
	}
	if !reduce {
		if sharded {
			f.free(u)
		}
		return
	}
	flat = flat.To(f.reduceDT)
	f.redBytes += int64(len(flat.Bytes()))
	f.tracef("reduce", u)
	var pr pendingReduce
	if f.opt.Strategy == NoShard {
		pr = pendingReduce{u: u, grad: flat, work: f.group.AllReduceAsync(flat, dist.Avg), store: s}
	} else {
		grad := tensor.New(f.reduceDT, u.padded/f.shards.Size())
		pr = pendingReduce{u: u, grad: grad, work: f.shards.ReduceScatterTensorAsync(grad, flat, dist.Avg), store: s}
	}
	if sharded {
		f.free(u)
	}
	f.mu.Lock()
	f.mu.pending = append(f.mu.pending, pr)
	f.mu.Unlock()
}

// moduleReady reports whether every unit of u's module (one per
// parameter group) has all its gradients for this pass.
func (f *FSDP) moduleReady(u *unit) bool {
	for _, v := range f.units {
		if v.layer == u.layer && v.ready < len(v.params) {
			return false
		}
	}
	return true
}

// tracef tells f.trace, if set, of event on u.
func (f *FSDP) tracef(event string, u *unit) {
	if f.trace != nil {
		f.trace(event + " " + u.name)
	}
}

// NoSync runs fn with gradient synchronisation off, for gradient
// accumulation, as PyTorch's FullyShardedDataParallel.no_sync(): each
// backward pass inside fn (Backward, or loss.Backward and Wait) sends
// nothing. It keeps each unit's full, unsharded gradient on this rank,
// adding every pass's to it, and leaves the shards' gradients as they
// are; the first backward pass after NoSync returns adds its own
// gradients to the kept ones, reduce-scatters the sum as usual, and
// drops them. So k passes inside NoSync and one after it leave in the
// shards' gradients the average over ranks of the k+1 passes' summed
// gradients, what one pass over the k+1 micro-batches would give (with
// the loss summed rather than averaged over them); step the optimizer
// after that pass only.
//
// The memory cost: inside NoSync and until the next synchronised pass,
// each rank holds every unit's gradient whole, as DDP does (four bytes a
// parameter, Memory.UnshardedGrads), not the 1/world share FullShard
// and ShardGradOp otherwise keep. Parameters are still freed after each
// unit's backward as outside NoSync.
//
// Every member must run the same number of backward passes inside
// NoSync. The optimizer's ZeroGrad clears the shards' gradients only,
// not the kept ones; the mode is read as each unit's gradients become
// ready, so a pass is to run wholly inside fn or wholly outside it.
func (f *FSDP) NoSync(fn func() error) error {
	f.mu.Lock()
	was := f.mu.noSync
	f.mu.noSync = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.mu.noSync = was
		f.mu.Unlock()
	}()
	return fn()
}

// Backward runs loss.Backward, then waits for every unit's gradient
// reduction and leaves the average gradient of each shard in its Grad
// (added to what is there, so gradients accumulate across passes as
// PyTorch's). A dead peer, a timeout or a desync comes back as the
// group's typed error.
func (f *FSDP) Backward(ctx context.Context, loss *autograd.Var) error {
	if err := f.takeErr(); err != nil {
		return err
	}
	if err := loss.Backward(nil); err != nil {
		f.setErr(err)
		return fmt.Errorf("fsdp: backward: %w", err)
	}
	return f.Wait(ctx)
}

func (f *FSDP) takeErr() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.err
}

// Wait waits for the gradient reductions of the last backward pass (call
// it after loss.Backward when not using Backward).
func (f *FSDP) Wait(ctx context.Context) error {
	f.mu.Lock()
	pending := f.mu.pending
	f.mu.pending = nil
	err := f.mu.err
	f.mu.Unlock()
	if err != nil {
		return err
	}
	var unready []string
	for _, u := range f.units {
		if u.ready != len(u.params) {
			unready = append(unready, u.name)
		}
	}
	for _, pr := range pending {
		err := f.wait(ctx, pr.work)
		if err == nil && f.replicas != nil {
			// Every member waits in the same order, so these all-reduces
			// are issued in the same order too.
			err = f.wait(ctx, f.replicas.AllReduceAsync(pr.grad, dist.Avg))
		}
		if err != nil {
			f.setErr(err)
			return fmt.Errorf("fsdp: reduce the gradients of unit %s: %w", pr.u.name, err)
		}
		grad := pr.grad.To(tensor.Float32) // widened exactly
		if g := pr.store.Grad(pr.u.shard); g != nil {
			g.Add(g, grad)
		} else {
			pr.store.SetGrad(pr.u.shard, grad)
		}
	}
	if len(unready) > 0 {
		err := fmt.Errorf("fsdp: rank %d: units %s did not get a gradient for every parameter in the last backward pass; FSDP needs every parameter to get one", f.group.Rank(), strings.Join(unready, ", "))
		f.setErr(err)
		return err
	}
	f.deferred = f.deferred[:0]
	for _, u := range f.units {
		u.ready = 0
		// A prefetch no backward consumed would hand the next forward
		// these (old) parameters: drop it.
		if u.state == gathering {
			if err := f.wait(ctx, u.inflight); err != nil {
				f.setErr(err)
				return fmt.Errorf("fsdp: gather unit %s: %w", u.name, err)
			}
			u.inflight, u.landing, u.state = nil, nil, sharded
			f.gathered -= u.held
			u.held = 0
		}
	}
	return nil
}

// Parameters returns what the optimizer steps: each unit's shard of its
// flat parameter (the whole flat parameter with NoShard), wrapped units
// first, the root last.
func (f *FSDP) Parameters() []*autograd.Var {
	out := make([]*autograd.Var, len(f.units))
	for i, u := range f.units {
		out[i] = u.shard
	}
	return out
}

// ParamGroups returns the shards of each parameter group (Options.Group),
// for an optimizer's groups: group g's shards are ParamGroups()[g].
func (f *FSDP) ParamGroups() [][]*autograd.Var {
	var out [][]*autograd.Var
	for _, u := range f.units {
		for len(out) <= u.group {
			out = append(out, nil)
		}
		out[u.group] = append(out[u.group], u.shard)
	}
	return out
}

// Units returns the name of each unit and the names of its parameters, in
// the order of Parameters.
func (f *FSDP) Units() [][]string {
	out := make([][]string, len(f.units))
	for i, u := range f.units {
		out[i] = append([]string{u.name}, u.names...)
	}
	return out
}

// ClipGradNorm clips the shards' gradients to a global L2 norm of at most
// maxNorm, the norm taken over every rank's shards (one all-reduce), as
// torch's FSDP.clip_grad_norm_. It returns the norm before clipping.
func (f *FSDP) ClipGradNorm(ctx context.Context, maxNorm float64) (float64, error) {
	sq := tensor.FromFloat64([]float64{nn.GradNormSquared(f.Parameters())})
	if f.opt.Strategy != NoShard {
		// The shard group's shards make up every parameter once.
		if err := f.wait(ctx, f.shards.AllReduceAsync(sq, dist.Sum)); err != nil {
			return 0, fmt.Errorf("fsdp: gradient norm: %w", err)
		}
	}
	total := math.Sqrt(sq.Float64s()[0])
	nn.ClipGradsWithNorm(f.Parameters(), maxNorm, total)
	return total, nil
}

// SummonFullParams gathers every unit's parameters, runs fn (the module's
// parameters hold their full values: read or change them there; changes
// are kept), then writes them back into the shards and frees them again.
// It is a collective; fn may run the module without its wrapper, on one
// rank alone (to generate text, say): the units stay gathered meanwhile.
func (f *FSDP) SummonFullParams(ctx context.Context, fn func() error) error {
	if err := f.takeErr(); err != nil {
		return err
	}
	f.exact = true
	for _, u := range f.units {
		if u.rounded {
			f.free(u) // ParamDType's values; fn sees the float32 shards
		}
		f.gather(u)
	}
	f.exact = false
	if err := f.takeErr(); err != nil {
		return err
	}
	f.summoned = true
	ferr := fn()
	f.summoned = false
	for _, u := range f.units {
		// Parameters fn replaced or changed are copied back into the flat
		// vector before this rank keeps its shard of it.
		for i, p := range u.params {
			dst := u.full.Narrow(0, u.offsets[i], p.Value().Numel())
			if !tensor.SharesStorage(dst, p.Value()) {
				dst.Copy(p.Value().Reshape(-1))
			}
		}
		if f.opt.Strategy == NoShard {
			u.shard.Value().Copy(u.full)
			continue
		}
		lo, n := u.shardRange(f.shards.Rank(), f.shards.Size())
		u.shard.Value().Copy(u.full.Narrow(0, lo, n))
		f.free(u)
	}
	return ferr
}

// FullStateDict returns the module's state dict with every parameter
// whole, under the module's own names (loadable by the plain module, and
// by PyTorch), gathered on every rank.
func (f *FSDP) FullStateDict(ctx context.Context) (map[string]*tensor.Tensor, error) {
	var sd map[string]*tensor.Tensor
	err := f.SummonFullParams(ctx, func() error {
		sd = map[string]*tensor.Tensor{}
		for k, v := range nn.StateDict(f.Module) {
			sd[k] = v.Clone()
		}
		return nil
	})
	return sd, err
}

// Memory is a rank's memory for parameters and gradients under FSDP, in
// bytes.
type Memory struct {
	Params   int // the shards this rank holds (whole flat parameters with NoShard)
	Grads    int // the shards' gradients
	Gathered int // full parameters gathered now, or on their way
	// PeakGathered is the most gathered at once since New or ResetPeak:
	// what FullShard saves over ShardGradOp. Gathered parameters count at
	// the precision they are gathered in (MixedPrecision.ParamDType).
	PeakGathered int
	// Upcast and PeakUpcast are the float32 copies of parameters gathered
	// in a lower precision, which godist's float32 kernels compute on
	// (zero without mixed precision): kernels of that precision would not
	// need them.
	Upcast, PeakUpcast int
	// UnshardedGrads are the whole gradients NoSync keeps until the next
	// synchronised backward pass (padded flat parameters, float32).
	UnshardedGrads int
}

// Memory returns this rank's parameter and gradient memory. The
// optimizer's state is optim.StateBytes of the optimizer over Parameters.
func (f *FSDP) Memory() Memory {
	var m Memory
	for _, u := range f.units {
		m.Params += u.shard.Value().Numel() * 4
		if g := u.shard.Grad(); g != nil {
			m.Grads += g.Numel() * 4
		}
		if u.accum != nil {
			m.UnshardedGrads += u.accum.Numel() * 4
		}
	}
	m.Gathered, m.PeakGathered = f.gathered, f.peak
	m.Upcast, m.PeakUpcast = f.upcast, f.peakUpcast
	return m
}

// ResetPeak starts a new measure of Memory's PeakGathered and PeakUpcast.
func (f *FSDP) ResetPeak() { f.peak, f.peakUpcast = f.gathered, f.upcast }

// Traffic is what a rank has put into FSDP's collectives since New, in
// bytes: its shards into parameter all-gathers (at ParamDType) and its
// flat gradients into reduce-scatters (all-reduces under NoShard, at
// ReduceDType). The bytes on the wire are proportional to these.
type Traffic struct {
	Gather, Reduce int64
}

// Traffic returns this rank's bytes handed to FSDP's collectives.
func (f *FSDP) Traffic() Traffic { return Traffic{Gather: f.gatherBytes, Reduce: f.redBytes} }
