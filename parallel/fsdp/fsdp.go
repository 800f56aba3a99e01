// Package fsdp is fully sharded data parallelism, PyTorch's
// FullyShardedDataParallel: each unit of a model keeps its parameters
// flattened into one flat parameter, padded to a multiple of the group's
// size, and each rank holds one shard of it. Before a unit's forward pass
// the shards are all-gathered into the full parameters; after it they are
// freed again (FullShard) or kept until backward (ShardGradOp); in backward
// they are gathered again where freed, and the unit's gradients are
// reduce-scattered into the shards' gradients the moment the unit's last
// gradient is ready, while the rest of backward runs.
//
//	model, err := fsdp.New(ctx, net, group, fsdp.Options{
//		Wrap: func(name string, m nn.Module) bool { _, ok := m.(*nn.TransformerBlock); return ok },
//	})
//	opt := optim.NewAdamW(model.Parameters(), optim.AdamOptions{LR: 1e-3}) // the shards
//	loss := lossOf(nn.Call(model, x))
//	err = model.Backward(ctx, loss) // gradients reduce-scattered into the shards
//	opt.Step()
//
// The optimizer steps the shards (Parameters), never the module's own
// parameters, whose values between steps are placeholders of the right
// shape and no memory: read them inside SummonFullParams.
//
// A unit is a module that the Wrap policy selects (or that holds at least
// MinParams parameters not already in a smaller unit) and that its parent
// calls through nn.Call, whose hooks gather and free it; the root unit
// holds every other parameter, gathered for the whole forward and backward
// pass. Every parameter must get a gradient in every backward pass.
//
// State dicts: FullStateDict and FullStateDictOn (one rank) give the
// module's whole parameters under its own names, FullOptimStateDict the
// optimizer's state whole by parameter name; CheckpointState is the
// sharded form, for checkpoint/dcp.
//
// Options.MixedPrecision gathers and reduces in bfloat16 or float16 over
// float32 master shards, and Options.LimitAllGathers bounds how many
// modules prefetching may hold gathered ahead of computation.
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
	"github.com/godist/godist/tensor"
)

// Strategy says what is sharded, as PyTorch's ShardingStrategy.
type Strategy int

const (
	// FullShard shards parameters, gradients and optimizer state; a
	// unit's full parameters exist only during its forward and backward.
	FullShard Strategy = iota
	// ShardGradOp shards gradients and optimizer state; a unit's full
	// parameters stay from its forward until its backward is done.
	ShardGradOp
	// NoShard keeps every parameter whole on every rank and all-reduces
	// the gradients, as DDP.
	NoShard
	// HybridShard is FullShard within groups of Options.ShardSize ranks
	// (a node's) and replication across them: parameters are gathered and
	// gradients reduce-scattered within a group, then the gradient shards
	// all-reduced across the groups.
	HybridShard
)

func (s Strategy) String() string {
	switch s {
	case FullShard:
		return "FullShard"
	case ShardGradOp:
		return "ShardGradOp"
	case NoShard:
		return "NoShard"
	case HybridShard:
		return "HybridShard"
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// Options configure FSDP.
type Options struct {
	Strategy Strategy
	// ShardSize is, for HybridShard, the number of consecutive ranks that
	// shard among themselves (ranks per node); it must divide the world.
	// Zero takes the groups from the group's topology (dist.Group.Topology):
	// the ranks of each host shard among themselves and replicate across
	// hosts, which needs the same number of ranks on every host.
	ShardSize int
	// Wrap, if set, makes a unit of every module for which it returns
	// true (PyTorch's ModuleWrapPolicy, e.g. every transformer block).
	Wrap func(name string, m nn.Module) bool
	// MinParams, if positive, also makes a unit of every module holding
	// at least this many parameters that no smaller unit holds
	// (PyTorch's size_based_auto_wrap_policy).
	MinParams int
	// Group, if set, puts each parameter (by its name in the module) in a
	// parameter group, 0, 1, ...: a unit keeps one flat parameter per
	// group, so that an optimizer can treat the groups apart (weight
	// decay on matrices only, say; ParamGroups lists them).
	Group func(name string, p *autograd.Var) int
	// ForwardPrefetch starts gathering the next unit (in the order of the
	// last forward pass) when a unit's forward begins; NoBackwardPrefetch
	// turns off gathering the next unit of backward when a unit's
	// backward begins (PyTorch's BACKWARD_PRE, on by default). Either
	// way a gather overlaps the computation before it.
	ForwardPrefetch, NoBackwardPrefetch bool
	// NoSyncModuleStates keeps each rank's initial parameters instead of
	// broadcasting rank 0's (PyTorch's sync_module_states, on here by
	// default).
	NoSyncModuleStates bool
	// MixedPrecision gathers and computes with parameters rounded to a
	// lower precision and reduces gradients in one, while the shards stay
	// float32 (PyTorch's MixedPrecision). The zero value is float32
	// throughout.
	MixedPrecision MixedPrecision
	// LimitAllGathers bounds how far gathering runs ahead of computation
	// (PyTorch's limit_all_gathers): a prefetch starts only while fewer
	// than this many wrapped modules hold gathered parameters or gathers
	// in flight, counting the ones computing; otherwise it waits, queued,
	// until a module is freed. 0 means 2, the running module and the next;
	// a negative value means no limit. A gather that computation needs
	// now is never held back, and the root, gathered for the whole pass,
	// is not counted; a module split into parameter groups (Group) counts
	// once. It applies where modules are freed after forward (FullShard,
	// HybridShard): ShardGradOp keeps every module gathered until its
	// backward by design.
	LimitAllGathers int
}

// MixedPrecision chooses the precision of FSDP's gathers, computation
// and gradient reduction, as PyTorch's MixedPrecision(param_dtype,
// reduce_dtype). Each field is tensor.BFloat16, tensor.Float16 or
// tensor.Float32; the zero value (tensor.Invalid) of ParamDType means
// Float32, that of ReduceDType means ParamDType (PyTorch's default).
//
// The shards, which the optimizer steps, and their gradients stay
// float32: they are the master copy. Before a unit runs, each rank rounds
// its shard to ParamDType and the all-gather moves the rounded values, so
// a 2-byte ParamDType halves the gather traffic and the gathered memory
// (Memory.Gathered counts it at that precision). godist's kernels are
// float32, so the unit then computes in float32 on the gathered values
// widened back exactly (counted apart, in Memory.Upcast): its parameters
// are exactly those of a bfloat16 computation, its arithmetic is not
// (activations and sums are not rounded). The gradients, computed in
// float32, are rounded to ReduceDType, reduce-scattered (averaged) in it,
// and widened into the float32 shard gradients, to which they are added.
// SummonFullParams, the state dicts and checkpoints always see the
// float32 shards. Buffers are not cast (there is no buffer_dtype).
type MixedPrecision struct {
	ParamDType, ReduceDType tensor.DType
}

// resolve returns the gather and reduction dtypes, or an error naming a
// dtype FSDP cannot use.
func (mp MixedPrecision) resolve() (param, reduce tensor.DType, err error) {
	param, reduce = mp.ParamDType, mp.ReduceDType
	if param == tensor.Invalid {
		param = tensor.Float32
	}
	if reduce == tensor.Invalid {
		reduce = param
	}
	for _, d := range []tensor.DType{param, reduce} {
		if d != tensor.Float32 && d != tensor.BFloat16 && d != tensor.Float16 {
			return 0, 0, fmt.Errorf("fsdp: MixedPrecision with %v: use tensor.BFloat16, tensor.Float16 or tensor.Float32", d)
		}
	}
	return param, reduce, nil
}

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
	}
	// paramDT and reduceDT are MixedPrecision's, resolved; limit is
	// LimitAllGathers's (0 for none).
	paramDT, reduceDT tensor.DType
	limit             int
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
}

// pendingReduce is a unit's gradient reduction in flight.
type pendingReduce struct {
	u    *unit
	grad *tensor.Tensor // the shard's gradient once work is done
	work *dist.Work
}

// unit is one flat parameter: the module parameters it holds, where each
// lies in the flat vector, this rank's shard, and the gathered whole.
type unit struct {
	name    string
	group   int      // the parameter group of all its parameters
	layer   nn.Layer // nil for the root
	params  []*autograd.Var
	names   []string
	offsets []int
	numel   int // real elements; the flat vector is padded to padded
	padded  int
	shard   *autograd.Var  // this rank's piece (the whole, with NoShard)
	full    *tensor.Tensor // the gathered flat parameters, nil when freed
	// held and upcast are the bytes this unit counts in FSDP.gathered and
	// FSDP.upcast; rounded is set when full holds ParamDType's values.
	held, upcast int
	rounded      bool
	ready        int  // parameters whose gradient is ready this pass
	called       bool // gathered in this forward pass
	// A prefetch in flight: the gather's work and where it lands.
	inflight *dist.Work
	landing  *tensor.Tensor
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
	if err := f.planUnits(); err != nil {
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

// planUnits chooses the units, deepest first, and the root.
func (f *FSDP) planUnits() error {
	mods := nn.NamedModules(f.Module)
	owner := map[*autograd.Var]*unit{}
	// Deepest first: NamedModules is depth first, so children come after
	// their parents; walk it backwards.
	for i := len(mods) - 1; i >= 1; i-- {
		m := mods[i]
		var free []nn.Named[*autograd.Var]
		for _, p := range nn.NamedParameters(m.Value) {
			if owner[p.Value] == nil && p.Value.RequiresGrad() {
				free = append(free, p)
			}
		}
		count := 0
		for _, p := range free {
			count += p.Value.Value().Numel()
		}
		wrap := f.opt.Wrap != nil && f.opt.Wrap(m.Name, m.Value)
		if !wrap && (f.opt.MinParams <= 0 || count < f.opt.MinParams) {
			continue
		}
		l, ok := m.Value.(nn.Layer)
		if !ok {
			if !wrap {
				continue // a container: the size policy looks further up
			}
			return fmt.Errorf("fsdp: Wrap chose module %s (%T), which is no nn.Layer: no forward hooks could gather it", m.Name, m.Value)
		}
		if len(free) == 0 {
			continue
		}
		var names []string
		for _, p := range free {
			names = append(names, m.Name+"."+p.Name)
		}
		us, err := f.split(m.Name, l, names, free)
		if err != nil {
			return err
		}
		for _, u := range us {
			for _, p := range u.params {
				owner[p] = u
			}
		}
		f.units = append(us, f.units...) // registration order
	}
	var rest []nn.Named[*autograd.Var]
	var names []string
	for _, p := range nn.NamedParameters(f.Module) {
		if owner[p.Value] == nil && p.Value.RequiresGrad() {
			rest = append(rest, p)
			names = append(names, p.Name)
		}
	}
	roots, err := f.split("(root)", nil, names, rest)
	if err != nil {
		return err
	}
	f.units = append(f.units, roots...)
	f.roots = roots
	for _, u := range f.units {
		for _, p := range u.params {
			if p.DType() != tensor.Float32 {
				return fmt.Errorf("fsdp: parameter %s is %v; FSDP shards float32 parameters", u.names[0], p.DType())
			}
		}
	}
	return nil
}

// split makes the units of one module: one per parameter group.
func (f *FSDP) split(name string, l nn.Layer, names []string, ps []nn.Named[*autograd.Var]) ([]*unit, error) {
	var us []*unit
	byGroup := map[int]*unit{}
	for i, p := range ps {
		g := 0
		if f.opt.Group != nil {
			g = f.opt.Group(names[i], p.Value)
		}
		if g < 0 {
			return nil, fmt.Errorf("fsdp: Group put parameter %s in group %d; groups are 0, 1, ...", names[i], g)
		}
		u := byGroup[g]
		if u == nil {
			u = &unit{name: name, layer: l, group: g}
			if f.opt.Group != nil {
				u.name = fmt.Sprintf("%s[group %d]", name, g)
			}
			byGroup[g] = u
			us = append(us, u)
		}
		u.add(names[i], p.Value)
	}
	return us, nil
}

func (u *unit) add(name string, p *autograd.Var) {
	u.names = append(u.names, name)
	u.params = append(u.params, p)
	u.offsets = append(u.offsets, u.numel)
	u.numel += p.Value().Numel()
}

// shardUnit flattens u's parameters, keeps this rank's shard and hooks the
// unit's forward and its parameters' gradients.
func (f *FSDP) shardUnit(u *unit) {
	world, rank := f.shards.Size(), f.shards.Rank()
	u.padded = (u.numel + world - 1) / world * world
	flat := tensor.New(tensor.Float32, u.padded)
	for i, p := range u.params {
		flat.Narrow(0, u.offsets[i], p.Value().Numel()).Copy(p.Value().Reshape(-1))
	}
	if f.opt.Strategy == NoShard {
		u.shard = autograd.Param(flat)
		if f.paramDT == tensor.Float32 {
			u.full = flat // computed on in place; never freed
			u.viewParams()
		} else {
			f.free(u) // each forward rounds the whole anew
		}
	} else {
		n := u.padded / world
		u.shard = autograd.Param(flat.Narrow(0, rank*n, n).Clone())
		f.free(u)
	}
	for i, p := range u.params {
		p.RegisterGradReadyHook(func(*autograd.Var) { f.onGradReady(u, i) })
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
					if !f.opt.NoBackwardPrefetch {
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

// viewParams points every parameter of u at its piece of u.full.
func (u *unit) viewParams() {
	for i, p := range u.params {
		shape := p.Shape()
		p.SetValue(u.full.Narrow(0, u.offsets[i], numel(shape)).Reshape(shape...))
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
	zero := tensor.New(tensor.Float32, 1)
	for _, p := range u.params {
		p.SetValue(zero.Reshape().Expand(p.Shape()...))
	}
	for len(f.deferred) > 0 && f.mayPrefetch(f.deferred[0]) {
		next := f.deferred[0]
		f.deferred = f.deferred[1:]
		f.startGather(next)
	}
}

func numel(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// gather all-gathers u's shards into its full parameters, unless they are
// already there. A failure is kept for Backward; the parameters then hold
// zeros, so that the pass runs to its end.
func (f *FSDP) gather(u *unit) {
	u.called = true
	if i := slices.Index(f.deferred, u); i >= 0 {
		f.deferred = slices.Delete(f.deferred, i, i+1)
	}
	if u.full != nil {
		return
	}
	f.startGather(u)
	if u.inflight != nil {
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
	u.viewParams()
}

// startGather starts gathering u's shards, at ParamDType unless f.exact,
// unless they are gathered or on their way. Under NoShard (mixed
// precision only) it rounds the whole locally.
func (f *FSDP) startGather(u *unit) {
	if u == nil || u.full != nil || u.inflight != nil {
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
	u.inflight = f.shards.AllGatherIntoTensorAsync(u.landing, mine)
}

// request starts a prefetch of u, or queues it while LimitAllGathers
// holds it back.
func (f *FSDP) request(u *unit) {
	if u == nil || u.full != nil || u.inflight != nil || slices.Contains(f.deferred, u) {
		return
	}
	if !f.mayPrefetch(u) {
		f.deferred = append(f.deferred, u)
		return
	}
	f.startGather(u)
}

// mayPrefetch reports whether LimitAllGathers lets u's gather start now:
// u's module already counts, or fewer than the limit do.
func (f *FSDP) mayPrefetch(u *unit) bool {
	if f.limit == 0 || !f.reshardAfterForward() {
		return true
	}
	var busy []nn.Layer
	for _, v := range f.units {
		if v.layer == nil || (v.full == nil && v.inflight == nil) {
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
	y := nn.Call(f.Module, x)
	f.order = append(f.order[:0], f.next...)
	for _, u := range f.units {
		if !u.called {
			f.setErr(fmt.Errorf("fsdp: unit %s was never called through nn.Call in the forward pass, so it was never gathered; choose units its parent calls through nn.Call", u.name))
		}
	}
	return y
}

// onGradReady runs in autograd's grad-ready hook of u's parameter i; when
// the unit's last one is ready it starts the reduction of its gradients.
func (f *FSDP) onGradReady(u *unit, i int) {
	u.ready++
	if u.ready < len(u.params) {
		return
	}
	flat := tensor.New(tensor.Float32, u.padded)
	for k, p := range u.params {
		if g := p.Grad(); g != nil {
			flat.Narrow(0, u.offsets[k], g.Numel()).Copy(g.Reshape(-1))
		}
		p.ZeroGrad(true)
	}
	flat = flat.To(f.reduceDT)
	f.redBytes += int64(len(flat.Bytes()))
	var pr pendingReduce
	if f.opt.Strategy == NoShard {
		pr = pendingReduce{u: u, grad: flat, work: f.group.AllReduceAsync(flat, dist.Avg)}
	} else {
		grad := tensor.New(f.reduceDT, u.padded/f.shards.Size())
		pr = pendingReduce{u: u, grad: grad, work: f.shards.ReduceScatterTensorAsync(grad, flat, dist.Avg)}
		f.free(u)
	}
	f.mu.Lock()
	f.mu.pending = append(f.mu.pending, pr)
	f.mu.Unlock()
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
		if g := pr.u.shard.Grad(); g != nil {
			g.Add(g, grad)
		} else {
			pr.u.shard.SetGrad(grad)
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
		if u.inflight != nil {
			if err := f.wait(ctx, u.inflight); err != nil {
				f.setErr(err)
				return fmt.Errorf("fsdp: gather unit %s: %w", u.name, err)
			}
			u.inflight, u.landing = nil, nil
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
	world, rank := f.shards.Size(), f.shards.Rank()
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
		n := u.padded / world
		u.shard.Value().Copy(u.full.Narrow(0, rank*n, n))
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
