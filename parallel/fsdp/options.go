package fsdp

import (
	"errors"
	"fmt"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/internal/precision"
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
	// last forward pass) when a unit's forward begins, so that the gather
	// overlaps the unit's computation.
	ForwardPrefetch bool
	// BackwardPrefetch says when backward starts gathering the next unit
	// of backward (PyTorch's backward_prefetch): BackwardPre, the
	// default, when a unit's backward begins; BackwardPost once its
	// gradients are computed; BackwardNone only when backward reaches
	// the unit. NoBackwardPrefetch is BackwardNone too, kept from before
	// this field; New refuses it together with BackwardPost.
	BackwardPrefetch   BackwardPrefetch
	NoBackwardPrefetch bool
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

// BackwardPrefetch is when FSDP starts all-gathering the parameters of
// the next unit of backward (the unit before this one in the last
// forward pass), as PyTorch's BackwardPrefetch. It matters where units
// are freed after forward (FullShard, HybridShard): there backward must
// gather each unit again, and a prefetch lets that gather overlap the
// computation of the unit before it. Every policy computes the same
// gradients, bit for bit; they differ in overlap and memory.
type BackwardPrefetch int

const (
	// BackwardPre (PyTorch's BACKWARD_PRE, the default) issues the next
	// unit's all-gather when backward reaches a unit, before the unit's
	// gradients are computed: the gather overlaps all of that
	// computation, and for that time the unit's parameters, its
	// gradients and the next unit's parameters are held at once.
	BackwardPre BackwardPrefetch = iota
	// BackwardPost (BACKWARD_POST) issues the next unit's all-gather once
	// a unit's gradients are computed (for a module split into parameter
	// groups, once all of its units' are), after its parameters are
	// freed and before its gradients are reduce-scattered: it overlaps
	// the reduce-scatter only, but at most one wrapped module is
	// gathered at a time.
	BackwardPost
	// BackwardNone prefetches nothing: backward gathers a unit when it
	// reaches it, and waits for the gather.
	BackwardNone
)

func (p BackwardPrefetch) String() string {
	switch p {
	case BackwardPre:
		return "BackwardPre"
	case BackwardPost:
		return "BackwardPost"
	case BackwardNone:
		return "BackwardNone"
	}
	return fmt.Sprintf("BackwardPrefetch(%d)", int(p))
}

// backwardPrefetch returns the policy o asks for, or an error if its
// fields contradict each other or name no policy.
func (o Options) backwardPrefetch() (BackwardPrefetch, error) {
	p := o.BackwardPrefetch
	switch {
	case p < BackwardPre || p > BackwardNone:
		return 0, fmt.Errorf("fsdp: Options.BackwardPrefetch is %v: use BackwardPre, BackwardPost or BackwardNone", p)
	case o.NoBackwardPrefetch && p == BackwardPost:
		return 0, errors.New("fsdp: Options.NoBackwardPrefetch with BackwardPrefetch BackwardPost: choose one (NoBackwardPrefetch is BackwardNone)")
	case o.NoBackwardPrefetch:
		return BackwardNone, nil
	}
	return p, nil
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
// (Memory.Gathered counts it at that precision). The gathered values are
// widened back exactly into float32 storage (counted apart, in
// Memory.Upcast), and the forward pass runs under
// autograd.Autocast(ParamDType): its matrix products (and theirs in
// backward) compute in ParamDType, every other operation in float32 on
// ParamDType's values, as under torch.autocast. The gradients are
// rounded to ReduceDType, reduce-scattered (averaged) in it, and widened
// into the float32 shard gradients, to which they are added.
// SummonFullParams, the state dicts and checkpoints always see the
// float32 shards. Buffers are not cast (there is no buffer_dtype).
type MixedPrecision struct {
	ParamDType, ReduceDType tensor.DType
}

// resolve returns the parameter and reduction dtypes, or an error
// naming a dtype FSDP cannot use.
func (mp MixedPrecision) resolve() (param, reduce tensor.DType, err error) {
	return precision.Resolve("fsdp", mp.ParamDType, mp.ReduceDType)
}
