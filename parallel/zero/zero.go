package zero

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/join"
	"github.com/godist/godist/tensor"
)

// Options configure a ZeRO optimizer.
type Options struct {
	// ParametersAsBucketView sends the updated parameters of each rank as
	// one flat buffer (one broadcast from each rank) instead of one
	// broadcast a parameter. Every parameter must then have the same
	// dtype. The parameters are copied into and out of the buffer; they
	// are not views of it as in PyTorch, so the model's tensors stay its
	// own.
	ParametersAsBucketView bool
	// OverlapWithDDP is PyTorch's overlap_with_ddp: the step runs inside
	// the DDP model's backward pass, bucket by bucket, from the
	// communication hook ddp.HookWithZeroStep (which must be the model's
	// CommHook), overlapping the rest of backward, and StepContext only
	// checks that it did. The parameters stay partitioned as without it
	// (Partition); ParametersAsBucketView is ignored, the updated
	// parameters being broadcast a parameter at a time, bucket by bucket.
	OverlapWithDDP bool
}

// ZeRO is a ZeroRedundancyOptimizer: every rank holds optimizer state
// for its partition of the parameters only, steps that partition, and
// broadcasts the result to the others.
type ZeRO struct {
	group  *dist.Group
	opt    Options
	params []*autograd.Var // all, in the caller's order: the global index
	// starts[g] is the global index of parameter group g's first
	// parameter; starts[len(starts)-1] is len(params).
	starts []int
	per    [][]int         // per[r]: global indices of rank r's partition, in local order
	local  optim.Optimizer // over params of per[rank]
	// global[j] is the global index of the local optimizer's parameter j
	// (its Params order, which a constructor with parameter groups may
	// change from per[rank]'s).
	global []int
	// buckets[r] is rank r's flat buffer (ParametersAsBucketView only);
	// nil for a rank without parameters.
	buckets []*tensor.Tensor
	// full is the state dict consolidated to this rank, nil if none.
	full map[string]*tensor.Tensor
	err  error         // the first error of Step
	join *join.Context // set by join.Join

	// With OverlapWithDDP: the global index of each parameter, its
	// owner, and (for this rank's) the proxy the local optimizer steps,
	// which shares the parameter's value and takes the bucket's gradient.
	index map[*autograd.Var]int
	owner []int
	proxy []*autograd.Var
	mu    struct {
		sync.Mutex
		hooked int   // parameters the hook stepped and sent since StepContext
		err    error // the hook's first error
	}
}

var (
	_ optim.Optimizer  = (*ZeRO)(nil)
	_ optim.Groups     = (*ZeRO)(nil)
	_ optim.GroupAdder = (*ZeRO)(nil)
	_ join.Joinable    = (*ZeRO)(nil)
)

// New partitions params over the members of group (see Partition) and
// makes this rank's optimizer with newOpt over its partition, given in the
// partition's order; the optimizer may order them its own way (a
// constructor that splits them into parameter groups, decayed and not,
// does). Every member must call New with the same parameter shapes in the
// same order and an equivalent newOpt; nothing is sent.
// newOpt may be called with no parameters (more ranks than parameters)
// and must then still return an optimizer.
//
// It returns an error if params is empty or holds nil, or if
// ParametersAsBucketView is set and the parameters' dtypes differ.
func New(params []*autograd.Var, newOpt func(params []*autograd.Var) optim.Optimizer, group *dist.Group, opt Options) (*ZeRO, error) {
	if len(params) == 0 {
		return nil, errors.New("zero: New without parameters")
	}
	return newZeRO([][]*autograd.Var{params}, func(mine [][]*autograd.Var) optim.Optimizer { return newOpt(mine[0]) }, group, opt)
}

// NewGroups is New over parameter groups, PyTorch's
// ZeroRedundancyOptimizer over param_groups: the groups are partitioned
// one after the other (PartitionGroups), and newOpt makes this rank's
// optimizer over its share of every group, given as groups[g] with Params
// replaced by the share (empty where this rank holds none of the group),
// so that it keeps each group's hyper-parameters: optim.NewAdamWGroups
// or optim.NewSGDGroups with the same options on every rank. Its
// parameter group g must be groups[g] (schedulers and GroupLR see group
// g's rate there); it may order the parameters within a group its own
// way. A parameter's index (Params, the state dict) counts through the
// groups in order, as an unsharded optimizer over groups numbers them,
// and the consolidated state dict is such an optimizer's.
//
// It returns an error if there are no groups or no parameters, if a
// parameter is nil or given twice, or with OverlapWithDDP and more than
// one group (as PyTorch).
func NewGroups(groups []optim.ParamGroup, newOpt func(groups []optim.ParamGroup) optim.Optimizer, group *dist.Group, opt Options) (*ZeRO, error) {
	n := 0
	params := make([][]*autograd.Var, len(groups))
	for g, pg := range groups {
		params[g] = pg.Params
		n += len(pg.Params)
	}
	switch {
	case n == 0:
		return nil, fmt.Errorf("zero: NewGroups with %d parameter groups and no parameters", len(groups))
	case opt.OverlapWithDDP && len(groups) > 1:
		return nil, fmt.Errorf("zero: OverlapWithDDP with %d parameter groups: it steps one group; use NewGroups without it, or New", len(groups))
	}
	if err := checkDistinct(nil, params); err != nil {
		return nil, err
	}
	return newZeRO(params, func(mine [][]*autograd.Var) optim.Optimizer {
		local := slices.Clone(groups)
		for g := range local {
			local[g].Params = mine[g]
		}
		return newOpt(local)
	}, group, opt)
}

// checkDistinct returns an error naming a parameter of groups that is
// nil, or also in have or elsewhere in groups (groups numbered after
// have's len(have) parameters).
func checkDistinct(have []*autograd.Var, groups [][]*autograd.Var) error {
	at := map[*autograd.Var]int{}
	for i, p := range have {
		at[p] = i
	}
	i := len(have)
	for g, ps := range groups {
		for _, p := range ps {
			if p == nil || p.Value() == nil {
				return fmt.Errorf("zero: parameter %d (of group %d) is nil", i, g)
			}
			if j, dup := at[p]; dup {
				return fmt.Errorf("zero: parameter %d (of group %d) is parameter %d too; give each parameter once", i, g, j)
			}
			at[p] = i
			i++
		}
	}
	return nil
}

// newZeRO is New over groups of parameters, with newOpt given this
// rank's share of each group.
func newZeRO(groups [][]*autograd.Var, newOpt func(mine [][]*autograd.Var) optim.Optimizer, group *dist.Group, opt Options) (*ZeRO, error) {
	var params []*autograd.Var
	starts := []int{0}
	sizes := make([][]int, len(groups))
	for g, ps := range groups {
		for _, p := range ps {
			i := len(params)
			if p == nil || p.Value() == nil {
				return nil, fmt.Errorf("zero: parameter %d is nil", i)
			}
			if opt.ParametersAsBucketView && len(params) > 0 && p.DType() != params[0].DType() {
				return nil, fmt.Errorf("zero: ParametersAsBucketView with parameters of dtypes %v (parameter 0) and %v (parameter %d); use one dtype or leave it off", params[0].DType(), p.DType(), i)
			}
			sizes[g] = append(sizes[g], p.Value().Numel())
			params = append(params, p)
		}
		starts = append(starts, len(params))
	}
	if opt.OverlapWithDDP {
		opt.ParametersAsBucketView = false
	}
	z := &ZeRO{group: group, opt: opt, params: params, starts: starts, per: PartitionGroups(sizes, group.Size())}
	mine := z.share(z.per[group.Rank()])
	if opt.OverlapWithDDP {
		z.index = map[*autograd.Var]int{}
		for i, p := range params {
			if _, dup := z.index[p]; dup {
				return nil, fmt.Errorf("zero: parameter %d is given twice", i)
			}
			z.index[p] = i
		}
		z.owner = make([]int, len(params))
		for r, idx := range z.per {
			for _, i := range idx {
				z.owner[i] = r
			}
		}
		z.proxy = make([]*autograd.Var, len(params))
		for _, ps := range mine {
			for j, p := range ps {
				i := z.index[p]
				z.proxy[i] = autograd.Param(p.Value())
				ps[j] = z.proxy[i]
			}
		}
	}
	z.local = newOpt(mine)
	at := map[*autograd.Var]int{}
	n := 0
	for g, ps := range mine {
		for j, p := range ps {
			at[p] = z.per[group.Rank()][n+j]
		}
		n += len(mine[g])
	}
	lp := z.local.Params()
	if len(lp) != n {
		return nil, fmt.Errorf("zero: newOpt made an optimizer over %d parameters, given %d", len(lp), n)
	}
	z.global = make([]int, len(lp))
	for j, p := range lp {
		i, ok := at[p]
		if !ok {
			return nil, fmt.Errorf("zero: newOpt's optimizer steps a parameter (its %d) it was not given", j)
		}
		z.global[j] = i
	}
	z.makeBuckets()
	return z, nil
}

// share splits idx, a rank's global indices in group order, into that
// rank's parameters of each group.
func (z *ZeRO) share(idx []int) [][]*autograd.Var {
	out := make([][]*autograd.Var, len(z.starts)-1)
	for _, i := range idx {
		g := sort.SearchInts(z.starts, i+1) - 1
		out[g] = append(out[g], z.params[i])
	}
	return out
}

// makeBuckets makes each rank's flat buffer (ParametersAsBucketView).
func (z *ZeRO) makeBuckets() {
	if !z.opt.ParametersAsBucketView {
		return
	}
	z.buckets = make([]*tensor.Tensor, z.group.Size())
	for r, idx := range z.per {
		n := 0
		for _, i := range idx {
			n += z.params[i].Value().Numel()
		}
		if n > 0 {
			z.buckets[r] = tensor.New(z.params[0].DType(), n)
		}
	}
}

// AddParamGroup appends a parameter group, as PyTorch's
// ZeroRedundancyOptimizer.add_param_group: its parameters are
// partitioned after every earlier group's (PartitionGroups; the earlier
// assignments stay), numbered after every earlier parameter, and this
// rank's share of them (maybe none) goes to the local optimizer's
// AddParamGroup with pg's hyper-parameters. Every member must call it
// with the same group, between steps; nothing is sent.
//
// It returns an error, changing nothing, if the local optimizer is no
// optim.GroupAdder or does not hold one group per ZeRO group (a newOpt
// that split a plain list into groups of its own), with OverlapWithDDP
// (as PyTorch), if a parameter is nil or already given, or if
// ParametersAsBucketView is set and a parameter's dtype differs.
func (z *ZeRO) AddParamGroup(pg optim.ParamGroup) error {
	me := z.group.Rank()
	adder, ok := z.local.(optim.GroupAdder)
	switch {
	case z.opt.OverlapWithDDP:
		return fmt.Errorf("zero: rank %d: AddParamGroup with OverlapWithDDP: the DDP model's buckets step the parameters; make the optimizer with every group instead", me)
	case !ok:
		return fmt.Errorf("zero: rank %d: AddParamGroup: the local optimizer, a %T, cannot add a parameter group (it is no optim.GroupAdder)", me, z.local)
	case z.NumGroups() != len(z.starts)-1:
		return fmt.Errorf("zero: rank %d: AddParamGroup: the local optimizer has %d parameter groups and the ZeRO optimizer %d; newOpt must make one group per ZeRO group (use NewGroups)", me, z.NumGroups(), len(z.starts)-1)
	}
	if err := checkDistinct(z.params, [][]*autograd.Var{pg.Params}); err != nil {
		return err
	}
	for k, p := range pg.Params {
		if z.opt.ParametersAsBucketView && p.DType() != z.params[0].DType() {
			return fmt.Errorf("zero: ParametersAsBucketView with parameters of dtypes %v (parameter 0) and %v (parameter %d); use one dtype or leave it off", z.params[0].DType(), p.DType(), len(z.params)+k)
		}
	}
	var sizes [][]int
	for g := range len(z.starts) - 1 {
		var gs []int
		for _, p := range z.params[z.starts[g]:z.starts[g+1]] {
			gs = append(gs, p.Value().Numel())
		}
		sizes = append(sizes, gs)
	}
	var gs []int
	for _, p := range pg.Params {
		gs = append(gs, p.Value().Numel())
	}
	per := PartitionGroups(append(sizes, gs), z.group.Size())
	for r := range per {
		if !slices.Equal(per[r][:len(z.per[r])], z.per[r]) {
			panic(fmt.Sprintf("zero: adding a group moved rank %d's parameters from %v to %v", r, z.per[r], per[r]))
		}
	}
	added := per[me][len(z.per[me]):]
	mine := make([]*autograd.Var, len(added))
	at := map[*autograd.Var]int{}
	for k, i := range added {
		mine[k] = pg.Params[i-len(z.params)]
		at[mine[k]] = i
	}
	local := pg
	local.Params = mine
	before := len(z.local.Params())
	if err := adder.AddParamGroup(local); err != nil {
		return fmt.Errorf("zero: rank %d: AddParamGroup: %w", me, err)
	}
	lp := z.local.Params()
	if len(lp) != before+len(mine) {
		return fmt.Errorf("zero: rank %d: the local optimizer took a group of %d parameters and grew from %d to %d", me, len(mine), before, len(lp))
	}
	global := slices.Clone(z.global)
	for j, p := range lp[before:] {
		i, ok := at[p]
		if !ok {
			return fmt.Errorf("zero: rank %d: the local optimizer's new parameter %d is not one it was given", me, before+j)
		}
		global = append(global, i)
	}
	z.global = global
	z.params = append(z.params, pg.Params...)
	z.starts = append(z.starts, len(z.params))
	z.per = per
	z.makeBuckets()
	return nil
}

// Partition returns, for each rank, the global indices (positions in the
// parameters given to New) of the parameters it updates, in the order of
// its local optimizer. The caller may not modify it.
func (z *ZeRO) Partition() [][]int { return z.per }

// Local returns this rank's optimizer over its partition.
func (z *ZeRO) Local() optim.Optimizer { return z.local }

// Params returns every parameter, this rank's and the others'.
func (z *ZeRO) Params() []*autograd.Var { return z.params }

// StateBytes returns the bytes of optimizer state this rank holds (its
// local optimizer's state tensors; hyper-parameters not counted).
func (z *ZeRO) StateBytes() int { return optim.StateBytes(z.local) }

// StepContext updates this rank's partition with the local optimizer and
// then brings every rank's updated parameters to every other rank: by
// default one broadcast a parameter from its owner, in rank order and
// within a rank in partition order (as PyTorch); with
// ParametersAsBucketView one broadcast of each rank's flat buffer. It is a
// collective: every member calls it, in the same order as the group's
// other calls. It blocks until all parameters have arrived.
//
// An error of the group (a *dist.RankError for a peer that died, a
// *dist.TimeoutError, the context's error) is returned as is; the
// parameters other ranks own may then be stale, and the group has failed.
//
// Under join.Join, if ZeRO is the Join's first Joinable, the step begins
// with the Join's notification.
//
// With OverlapWithDDP the step has happened in the DDP model's backward
// pass (its Wait waits for it): StepContext returns the hook's first
// error, or an error if the hook did not step and send every parameter
// exactly once since the last StepContext (it is not the model's
// CommHook, say).
//
// After a Step that failed, StepContext steps nothing and returns that
// step's error (see Step).
func (z *ZeRO) StepContext(ctx context.Context) error {
	if z.err != nil {
		return z.err // a step that Step ran and failed: nothing steps after it
	}
	if z.join != nil {
		if err := z.join.Notify(ctx, z); err != nil {
			return err
		}
	}
	if z.opt.OverlapWithDDP {
		z.mu.Lock()
		n, err := z.mu.hooked, z.mu.err
		z.mu.hooked, z.mu.err = 0, nil
		z.mu.Unlock()
		if err != nil {
			return err
		}
		if n != len(z.params) {
			return fmt.Errorf("zero: rank %d: OverlapWithDDP, but ddp.HookWithZeroStep stepped %d parameter(s) of %d since the last step; make it the DDP model's CommHook, and call StepContext once after each backward pass", z.group.Rank(), n, len(z.params))
		}
		return nil
	}
	return z.step(ctx)
}

// SetJoin is join.Joinable's.
func (z *ZeRO) SetJoin(c *join.Context) { z.join = c }

// Shadow is join.Joinable's: on a rank that has joined, it is the step
// of a rank still training. This rank steps its own partition with the
// gradients its parameters hold, and takes part in bringing every
// partition to every rank, so that the ranks still training get this
// rank's updated parameters and this rank theirs. Joined after a DDP
// model (join.Join(ctx, g, []join.Joinable{model, opt}, ...)), those
// gradients are the iteration's average, which DDP's Shadow leaves in
// them; joined alone, the gradients are whatever the caller left there.
// With OverlapWithDDP it does nothing: DDP's Shadow runs the model's
// CommHook, ddp.HookWithZeroStep, which steps and sends as in training.
func (z *ZeRO) Shadow(ctx context.Context) error {
	if z.opt.OverlapWithDDP {
		z.mu.Lock()
		z.mu.hooked = 0
		z.mu.Unlock()
		return nil
	}
	return z.step(ctx)
}

// step is StepContext after the Join's notification.
func (z *ZeRO) step(ctx context.Context) error {
	z.local.Step()
	var works []*dist.Work
	if z.opt.ParametersAsBucketView {
		me := z.group.Rank()
		if z.buckets[me] != nil {
			z.copyBucket(me, true)
		}
		for r, b := range z.buckets {
			if b != nil {
				works = append(works, z.group.BroadcastAsync(b, r))
			}
		}
	} else {
		for r, idx := range z.per {
			for _, i := range idx {
				works = append(works, z.group.BroadcastAsync(z.params[i].Value(), r))
			}
		}
	}
	var first error
	for _, w := range works {
		if err := w.Wait(ctx); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	if z.opt.ParametersAsBucketView {
		for r, b := range z.buckets {
			if b != nil && r != z.group.Rank() {
				z.copyBucket(r, false)
			}
		}
	}
	return nil
}

// copyBucket copies rank r's parameters into its bucket (in) or out of it.
func (z *ZeRO) copyBucket(r int, in bool) {
	off := 0
	for _, i := range z.per[r] {
		v := z.params[i].Value()
		n := v.Numel()
		view := z.buckets[r].Narrow(0, off, n).Reshape(v.Shape()...)
		if in {
			view.Copy(v)
		} else {
			v.Copy(view)
		}
		off += n
	}
}

// Step is StepContext without a deadline, for code that takes an
// optim.Optimizer, whose Step returns nothing. So that its error is not
// lost, Step keeps it, returns it from Err and from every later
// StepContext (and optim.Step), does nothing when called again, and says
// it once on stderr. Prefer StepContext, or optim.Step(ctx, opt) in code
// written against optim.Optimizer, which return it.
func (z *ZeRO) Step() {
	if z.err != nil {
		return
	}
	if err := z.StepContext(context.Background()); err != nil {
		z.err = err
		fmt.Fprintf(stderr, "zero: rank %d: Step failed, and later steps will do nothing: %v (Step cannot return it: call StepContext or optim.Step, or check Err)\n", z.group.Rank(), err)
	}
}

// stderr is where Step says that it failed; tests replace it.
var stderr io.Writer = os.Stderr

// Err returns the error of the step Step ran and failed, or nil. (The
// errors of StepContext are its caller's: they are not kept here.)
func (z *ZeRO) Err() error { return z.err }

// ZeroGrad clears the gradients of every parameter, this rank's and the
// others' (as PyTorch's zero_grad over all param_groups).
func (z *ZeRO) ZeroGrad(setToNone bool) {
	for _, p := range z.params {
		p.ZeroGrad(setToNone)
	}
}

// LR returns the local optimizer's (first group's) learning rate; SetLR
// sets it. Every rank must set the same rate, as a scheduler stepped on
// every rank does.
func (z *ZeRO) LR() float64      { return z.local.LR() }
func (z *ZeRO) SetLR(lr float64) { z.local.SetLR(lr) }

// NumGroups, GroupLR and SetGroupLR are the local optimizer's groups
// (one if it has no Groups), so that schedulers such as
// optim.NewWarmupCosine scale them as they would an unsharded optimizer's.
func (z *ZeRO) NumGroups() int {
	if g, ok := z.local.(optim.Groups); ok {
		return g.NumGroups()
	}
	return 1
}

func (z *ZeRO) GroupLR(g int) float64 {
	if gs, ok := z.local.(optim.Groups); ok {
		return gs.GroupLR(g)
	}
	if g != 0 {
		panic(fmt.Sprintf("zero: group %d of 1", g))
	}
	return z.local.LR()
}

func (z *ZeRO) SetGroupLR(g int, lr float64) {
	if gs, ok := z.local.(optim.Groups); ok {
		gs.SetGroupLR(g, lr)
		return
	}
	if g != 0 {
		panic(fmt.Sprintf("zero: group %d of 1", g))
	}
	z.local.SetLR(lr)
}

// entry is one state tensor on the wire: a global state-dict key and the
// tensor's dtype, shape and bytes.
type entry struct {
	Key   string
	DType tensor.DType
	Shape []int
	Data  []byte
}

// globalState returns the local optimizer's state dict with global
// parameter indices ("state.I.name", I a position in Params).
func (z *ZeRO) globalState() (map[string]*tensor.Tensor, error) {
	out := map[string]*tensor.Tensor{}
	for k, t := range z.local.StateDict() {
		if rest, ok := strings.CutPrefix(k, "state."); ok {
			idx, name, _ := strings.Cut(rest, ".")
			j, err := strconv.Atoi(idx)
			if err != nil || j < 0 || j >= len(z.global) {
				return nil, fmt.Errorf("zero: local optimizer's state dict has key %q for %d parameters", k, len(z.global))
			}
			k = fmt.Sprintf("state.%d.%s", z.global[j], name)
		} else if strings.HasSuffix(k, ".params") {
			// Group membership in local indices; not meaningful globally.
			continue
		}
		out[k] = t
	}
	return out, nil
}

// ConsolidateStateDict gathers every rank's optimizer state to rank to,
// where StateDict then returns it. It is a collective (one gather); every
// member calls it. The other ranks' consolidated state, if any, is
// dropped. It returns the group's errors as they are.
func (z *ZeRO) ConsolidateStateDict(ctx context.Context, to int) error {
	if to < 0 || to >= z.group.Size() {
		return fmt.Errorf("zero: consolidate state dict to rank %d of a group of %d", to, z.group.Size())
	}
	sd, err := z.globalState()
	if err != nil {
		return err
	}
	var mine []entry
	for _, k := range slices.Sorted(maps.Keys(sd)) {
		t := sd[k]
		if !t.IsContiguous() {
			t = t.Clone()
		}
		mine = append(mine, entry{Key: k, DType: t.DType(), Shape: t.Shape(), Data: slices.Clone(t.Bytes())})
	}
	all, err := dist.GatherObject(ctx, z.group, mine, to)
	if err != nil {
		return err
	}
	z.full = nil
	if z.group.Rank() != to {
		return nil
	}
	full := map[string]*tensor.Tensor{}
	for r, es := range all {
		for _, e := range es {
			t := tensor.New(e.DType, e.Shape...)
			if len(t.Bytes()) != len(e.Data) {
				return fmt.Errorf("zero: rank %d sent %d bytes for %s of shape %v", r, len(e.Data), e.Key, e.Shape)
			}
			copy(t.Bytes(), e.Data)
			if _, dup := full[e.Key]; dup && strings.HasPrefix(e.Key, "state.") {
				return fmt.Errorf("zero: rank %d sent state %s that another rank sent too (partitions differ across ranks?)", r, e.Key)
			}
			full[e.Key] = t
		}
	}
	if len(z.starts) > 2 {
		// Each group's members, as an unsharded optimizer over the
		// groups lists them.
		for g := range len(z.starts) - 1 {
			idx := tensor.New(tensor.Int64, z.starts[g+1]-z.starts[g])
			for j := range idx.Int64s() {
				idx.Int64s()[j] = int64(z.starts[g] + j)
			}
			full[fmt.Sprintf("param_groups.%d.params", g)] = idx
		}
	}
	z.full = full
	return nil
}

// StateDict returns the state dict consolidated to this rank by the last
// ConsolidateStateDict, laid out as an unsharded optimizer over all
// parameters would lay it out ("state.I.name" with I the position in
// Params, the hyper-parameters "param_groups.G.name" as they were then
// and, with several groups, "param_groups.G.params", the positions of
// group G's parameters). It is nil on a rank that has none. The map is the caller's; its
// tensors are shared with later calls.
func (z *ZeRO) StateDict() map[string]*tensor.Tensor {
	if z.full == nil {
		return nil
	}
	return maps.Clone(z.full)
}

// checkGroupParams checks a state dict's "param_groups.G.params" entry t
// against group G's parameters.
func (z *ZeRO) checkGroupParams(key string, t *tensor.Tensor) error {
	g, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(key, "param_groups."), ".params"))
	if err != nil || g < 0 || g >= len(z.starts)-1 {
		return fmt.Errorf("zero: load state dict: %q is for parameter group %s; the optimizer has %d", key, strings.TrimSuffix(strings.TrimPrefix(key, "param_groups."), ".params"), len(z.starts)-1)
	}
	lo, hi := z.starts[g], z.starts[g+1]
	v := t.Values()
	ok := t.Dim() == 1 && len(v) == hi-lo
	for j := 0; ok && j < len(v); j++ {
		ok = v[j] == float64(lo+j)
	}
	if !ok {
		return fmt.Errorf("zero: load state dict: %s lists parameters %v, this optimizer's group %d holds %d to %d (groups made differently?)", key, v, g, lo, hi-1)
	}
	return nil
}

// LoadStateDict takes a full state dict (StateDict's layout, or that of
// an unsharded optimizer made by the same newOpt over all parameters) and
// loads into the local optimizer the state of this rank's partition and
// the hyper-parameters. Every rank calls it with the same dict; nothing is
// sent. On error nothing changes.
func (z *ZeRO) LoadStateDict(sd map[string]*tensor.Tensor) error {
	local := map[int]int{}
	for j, i := range z.global {
		local[i] = j
	}
	out := map[string]*tensor.Tensor{}
	for k, t := range sd {
		rest, ok := strings.CutPrefix(k, "state.")
		if !ok {
			if strings.HasPrefix(k, "param_groups.") && strings.HasSuffix(k, ".params") {
				// Global membership, which must be this optimizer's
				// groups where it has several (NewGroups); the local
				// optimizer has its own.
				if len(z.starts) > 2 {
					if err := z.checkGroupParams(k, t); err != nil {
						return err
					}
				}
				continue
			}
			out[k] = t
			continue
		}
		idx, name, _ := strings.Cut(rest, ".")
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 || i >= len(z.params) || name == "" {
			return fmt.Errorf("zero: load state dict: bad key %q for %d parameters", k, len(z.params))
		}
		if j, ok := local[i]; ok {
			out[fmt.Sprintf("state.%d.%s", j, name)] = t
		}
	}
	if err := z.local.LoadStateDict(out); err != nil {
		return fmt.Errorf("zero: load state dict on rank %d: %w", z.group.Rank(), err)
	}
	return nil
}
