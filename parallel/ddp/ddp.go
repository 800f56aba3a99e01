package ddp

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/internal/precision"
	"github.com/godist/godist/parallel/join"
	"github.com/godist/godist/tensor"
)

// Options configure DDP. The zero value is PyTorch's default.
type Options struct {
	// BucketCapMB caps a bucket's size (default 25); the first bucket is
	// capped at FirstBucketCapMB (default 1).
	BucketCapMB, FirstBucketCapMB float64
	// AutoBucketCaps chooses the caps for the group's links instead, as
	// Horovod's autotuner chooses its fusion buffer: at the end of the
	// second iteration rank 0 takes the times at which its gradients
	// became ready and the group's cost model of an all-reduce
	// (dist.Group.Choice), and finds the caps that leave the least
	// communication after backward (ChooseBucketCaps). The model assumes
	// that communication runs beside backward, which a host with one CPU
	// a rank does only in part; so the choice, the options' caps and
	// two with larger buckets (BucketShortlist) are then each tried on
	// three real iterations, taking turns, and the one whose median from
	// the first ready gradient to the end of Wait is least (on rank 0) is
	// kept for the rest of training (BucketCaps and BucketTrials tell
	// which).
	// Slow links get small buckets that start early and hide under
	// backward; a link whose latency dominates gets few. A group on one
	// host, which the model does not cover, keeps BucketCapMB and
	// FirstBucketCapMB. The model prices a bucket as an all-reduce of
	// its float32 gradients, as the default CommHook sends them.
	AutoBucketCaps bool
	// FindUnusedParameters marks the parameters that a forward pass did not
	// use as ready (with zero gradients) so their buckets still complete.
	// Without it, a parameter that gets no gradient is an error naming it.
	FindUnusedParameters bool
	// NoBroadcastBuffers turns off broadcasting rank 0's buffers (BatchNorm
	// statistics) before every forward pass.
	NoBroadcastBuffers bool
	// GradientAsBucketView makes each gradient a view into its bucket, so
	// the averaged values need no copy back. The buckets are a shared
	// tensor of the group (dist.Group.NewSharedTensor), released by the
	// group's Destroy: clone a gradient that must outlive the group.
	GradientAsBucketView bool
	// CommHook reduces a bucket (default AllReduceHook: the average).
	CommHook CommHook
	// NoRebuildBuckets keeps the initial bucket plan instead of rebuilding
	// it after the first iteration in the order gradients became ready.
	NoRebuildBuckets bool
	// NoOverlap starts the buckets' reductions only in Wait, after the
	// whole backward pass, instead of from the grad-ready hooks. It exists
	// to measure what the overlap gains.
	NoOverlap bool
	// StaticGraph declares that every iteration gives the same parameters
	// gradients, each completed by as many backward passes (PyTorch's
	// static_graph). The first synchronised iteration only counts how many
	// times each parameter's gradient became ready before Wait, and Wait
	// reduces every bucket after the whole backward. Later iterations,
	// from what it recorded:
	//   - mark a parameter ready when its count is reached, so one whose
	//     gradient two backward passes an iteration complete (two losses,
	//     each backpropagated) is reduced after the second, where without
	//     StaticGraph that is a *ReadyTwiceError;
	//   - mark the parameters the first iteration gave no gradient ready,
	//     with zeros, when backward begins, with no walk of the graph
	//     (FindUnusedParameters walks it after every forward pass, and
	//     takes a parameter used only outside the forward pass, in the
	//     loss, for unused; StaticGraph counts it);
	//   - reduce buckets rebuilt in the order the first iteration's
	//     gradients became ready (their last time), while backward runs.
	// An iteration that departs from the first fails with a
	// *StaticGraphError. FindUnusedParameters is not needed with it.
	StaticGraph bool
	// MixedPrecision computes the forward pass (and the products of its
	// backward) in ParamDType and reduces the gradients in ReduceDType,
	// over float32 parameters and gradients, as PyTorch 2's DDP
	// mixed_precision and FSDP's MixedPrecision: see MixedPrecision.
	MixedPrecision MixedPrecision
}

// MixedPrecision is DDP's mixed precision. ParamDType (tensor.BFloat16
// or tensor.Float16; the zero value, or tensor.Float32, is off) runs the
// wrapped module's forward pass under autograd.Autocast(ParamDType): its
// matrix products compute in ParamDType, the rest in float32, and
// backward follows. ReduceDType (default ParamDType) is the dtype the
// buckets are all-reduced in: the gradients are rounded to it, averaged
// in it and widened back, as FP16CompressHook and BF16CompressHook do
// (a CommHook given in Options takes precedence). The parameters, their
// gradients and the optimizer stay float32: the master copy. For
// float16, scale the loss with an optim.GradScaler.
type MixedPrecision struct {
	ParamDType, ReduceDType tensor.DType
}

// resolve returns the parameter and reduction dtypes, or an error
// naming a dtype DDP cannot use.
func (mp MixedPrecision) resolve() (param, reduce tensor.DType, err error) {
	return precision.Resolve("ddp", mp.ParamDType, mp.ReduceDType)
}

// DDP is DistributedDataParallel: it wraps a module so that, after every
// backward pass, each parameter's gradient is the average over the group.
// It broadcasts rank 0's parameters and buffers at construction, groups
// parameters into buckets, and starts a bucket's all-reduce from autograd's
// grad-ready hook the moment the bucket's last gradient is ready, so
// communication overlaps the rest of backward.
//
//	model, err := ddp.New(ctx, net, group, ddp.Options{})
//	loss := nn.CrossEntropy(nn.Call(model, x), y)
//	loss.Backward(nil)
//	err = model.Wait(ctx) // every bucket reduced; gradients averaged
//	opt.Step()
//
// Its state dict holds the module's under "module.", as PyTorch's.
type DDP struct {
	nn.Base
	Module nn.Layer
	group  *dist.Group
	opt    Options
	params []*autograd.Var // trainable, registration order
	index  map[*autograd.Var]int
	names  []string
	arena  *tensor.Tensor // the buckets' memory, one float32 per parameter element
	// paramDT is MixedPrecision's forward dtype (float32: off).
	paramDT tensor.DType

	mu struct {
		sync.Mutex
		buckets    []*bucket
		bucketOf   []int // parameter -> bucket
		posInBkt   []int // parameter -> position in its bucket
		next       int   // next bucket to launch
		ready      []bool
		readyOrder []int // this iteration's order of ready gradients
		// readyAt is when each gradient became ready this iteration
		// (AutoBucketCaps' measurement; zero: not yet).
		readyAt []time.Time
		rebuilt bool
		// caps are the bucket caps the plan is made with: the options',
		// then AutoBucketCaps' choice once tuned is set.
		caps  BucketCaps
		tuned bool
		trial trial
		// With StaticGraph: fired counts each parameter's grad-ready hooks
		// this iteration, and expected holds the counts of the first
		// iteration (nil until it is over: the recording iteration).
		// lastFired orders the recording iteration's last firings.
		fired       []int
		expected    []int
		lastFired   []int
		fireSeq     int
		iteration   int
		requireSync bool
		started     bool // a forward pass prepared this iteration
		unused      map[int]bool
		// unusedStatic are the parameters StaticGraph's recording
		// iteration gave no gradient.
		unusedStatic map[int]bool
		err          error
		joined       bool // a Join shadows this model
		// store is where this iteration's gradients are: each
		// parameter's Grad (autograd.VarGrads), or a distributed
		// autograd context's store; nil until the first is ready.
		store autograd.GradStore
	}
	join *join.Context // set by join.Join; guarded by mu
}

type bucket struct {
	params  []int
	offsets []int // element offset of each parameter in buf
	buf     *tensor.Tensor
	pending int
	work    *dist.Work
}

// New wraps module for data-parallel training over group. Every member
// must call it with the same model architecture.
func New(ctx context.Context, module nn.Layer, group *dist.Group, opt Options) (*DDP, error) {
	if opt.BucketCapMB == 0 {
		opt.BucketCapMB = 25
	}
	if opt.FirstBucketCapMB == 0 {
		opt.FirstBucketCapMB = 1
	}
	paramDT, reduceDT, err := opt.MixedPrecision.resolve()
	if err != nil {
		return nil, err
	}
	if opt.CommHook == nil {
		switch reduceDT {
		case tensor.BFloat16:
			opt.CommHook = BF16CompressHook
		case tensor.Float16:
			opt.CommHook = FP16CompressHook
		default:
			opt.CommHook = AllReduceHook
		}
	}
	d := &DDP{Module: module, group: group, opt: opt, index: map[*autograd.Var]int{}, paramDT: paramDT}
	d.mu.caps = BucketCaps{First: int64(opt.FirstBucketCapMB * (1 << 20)), Rest: int64(opt.BucketCapMB * (1 << 20))}
	d.RegisterModule("module", module)
	for _, p := range nn.NamedParameters(module) {
		if !p.Value.RequiresGrad() {
			continue
		}
		if p.Value.DType() != tensor.Float32 {
			return nil, fmt.Errorf("ddp: parameter %s is %v; DDP reduces float32 gradients", p.Name, p.Value.DType())
		}
		d.index[p.Value] = len(d.params)
		d.params = append(d.params, p.Value)
		d.names = append(d.names, p.Name)
	}
	// Every replica starts from rank 0's state.
	for _, p := range nn.NamedParameters(module) {
		if err := group.Broadcast(ctx, p.Value.Value(), 0); err != nil {
			return nil, fmt.Errorf("ddp: broadcast parameter %s: %w", p.Name, err)
		}
	}
	if err := d.broadcastBuffers(ctx); err != nil {
		return nil, err
	}
	// The buckets are pieces of one tensor that the group's same-host
	// members share, so that their all-reduces go through shared memory
	// (dist.Group.NewSharedTensor); elsewhere it is an ordinary tensor.
	// The group's Destroy releases it.
	total := 0
	for _, p := range d.params {
		total += p.Value().Numel()
	}
	if total > 0 {
		arena, err := group.NewSharedTensor(ctx, tensor.Float32, total)
		if err != nil {
			return nil, fmt.Errorf("ddp: bucket memory: %w", err)
		}
		d.arena = arena
	} else {
		d.arena = tensor.New(tensor.Float32, 0)
	}
	order := make([]int, len(d.params))
	for i := range order {
		order[i] = len(d.params) - 1 - i // reverse registration order
	}
	d.plan(order)
	d.mu.requireSync = true
	for i, p := range d.params {
		p.RegisterGradReadyHookIn(func(_ *autograd.Var, s autograd.GradStore) { d.onReady(i, s) })
	}
	return d, nil
}

func (d *DDP) broadcastBuffers(ctx context.Context) error {
	for _, b := range nn.NamedBuffers(d.Module) {
		t := b.Value
		if !t.IsContiguous() {
			return fmt.Errorf("ddp: buffer %s is not contiguous", b.Name)
		}
		if err := d.group.Broadcast(ctx, t, 0); err != nil {
			return fmt.Errorf("ddp: broadcast buffer %s: %w", b.Name, err)
		}
	}
	return nil
}

// sizes returns each parameter's gradient size in bytes.
func (d *DDP) sizes() []int64 {
	sizes := make([]int64, len(d.params))
	for i, p := range d.params {
		sizes[i] = int64(p.Value().Numel() * 4)
	}
	return sizes
}

// plan builds buckets for the given readiness order with the current caps.
func (d *DDP) plan(order []int) {
	d.layout(PlanBuckets(order, d.sizes(), d.mu.caps.First, d.mu.caps.Rest))
}

// orderLocked returns the current plan's parameters in bucket order.
func (d *DDP) orderLocked() []int {
	var order []int
	for _, bk := range d.mu.buckets {
		order = append(order, bk.params...)
	}
	return order
}

// layout lays out the buckets of plan (parameter indices, in reduction
// order) in the arena.
func (d *DDP) layout(plan [][]int) {
	// A new plan lays the buckets out afresh in the same memory: keep the
	// gradients that live there before the views move over them.
	var grads []*tensor.Tensor
	if d.opt.GradientAsBucketView {
		grads = make([]*tensor.Tensor, len(d.params))
		for i, p := range d.params {
			if g := p.Grad(); g != nil {
				grads[i] = g.Clone()
			}
		}
	}
	d.mu.buckets = make([]*bucket, len(plan))
	d.mu.bucketOf = make([]int, len(d.params))
	d.mu.posInBkt = make([]int, len(d.params))
	at := 0 // element offset of the next bucket in the arena
	for b, ps := range plan {
		bk := &bucket{params: ps}
		n := 0
		for k, i := range ps {
			bk.offsets = append(bk.offsets, n)
			n += d.params[i].Value().Numel()
			d.mu.bucketOf[i], d.mu.posInBkt[i] = b, k
		}
		bk.buf = d.arena.Narrow(0, at, n)
		bk.buf.Zero()
		at += n
		d.mu.buckets[b] = bk
		if d.opt.GradientAsBucketView {
			for k, i := range ps {
				p := d.params[i]
				view := d.view(bk, k)
				if g := grads[i]; g != nil {
					view.Copy(g)
				}
				p.SetGrad(view)
				// After ZeroGrad(true), backward computes the gradient
				// straight into the bucket: no allocation, no copy.
				p.SetGradDestination(view)
			}
		}
	}
}

// view returns parameter k of bucket bk as a view of the bucket shaped like
// the parameter.
func (d *DDP) view(bk *bucket, k int) *tensor.Tensor {
	p := d.params[bk.params[k]].Value()
	return bk.buf.Narrow(0, bk.offsets[k], p.Numel()).Reshape(p.Shape()...)
}

// Buckets returns each bucket's parameter names, in reduction order.
func (d *DDP) Buckets() [][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([][]string, len(d.mu.buckets))
	for b, bk := range d.mu.buckets {
		for _, i := range bk.params {
			out[b] = append(out[b], d.names[i])
		}
	}
	return out
}

// Group returns the process group.
func (d *DDP) Group() *dist.Group { return d.group }

// Forward prepares the reducer for this iteration (and, unless turned off,
// broadcasts rank 0's buffers), then runs the module.
//
// Forward has nn.Layer's signature, with no error: when its collective
// part fails (a peer died, the group timed out) it keeps the error, still
// runs the module so that the caller's code goes on as written, and
// Backward and Wait return the error. Call Prepare first to get it here.
func (d *DDP) Forward(x *autograd.Var) *autograd.Var {
	if err := d.prepare(context.Background()); err != nil {
		d.setErr(err)
		return precision.Call(d.paramDT, d.Module, x)
	}
	y := precision.Call(d.paramDT, d.Module, x)
	d.mu.Lock()
	sync, find := d.mu.requireSync, d.opt.FindUnusedParameters
	d.mu.Unlock()
	if sync && find && !d.opt.StaticGraph && autograd.GradEnabled() {
		reached := autograd.Leaves(y)
		d.mu.Lock()
		d.mu.unused = map[int]bool{}
		for i, p := range d.params {
			if !reached[p] {
				d.mu.unused[i] = true
			}
		}
		d.mu.Unlock()
	}
	return y
}

// Prepare does Forward's collective part explicitly: the Join
// notification, rebuilding buckets after the first iteration, and the
// buffer broadcast. Forward calls it; calling it first returns its error
// as a value, and Forward then does not repeat it.
func (d *DDP) Prepare(ctx context.Context) error { return d.prepare(ctx) }

func (d *DDP) prepare(ctx context.Context) error {
	d.mu.Lock()
	if d.mu.started {
		if d.mu.requireSync && slices.Contains(d.mu.ready, true) {
			// Backward ran, and Wait did not: its buckets are in flight.
			err := fmt.Errorf("ddp: rank %d: a forward pass after a backward pass that was not waited for; call Wait after backward (DDP.Backward does both) before the next forward", d.group.Rank())
			d.mu.Unlock()
			return err
		}
		d.mu.Unlock()
		return nil
	}
	if d.mu.err != nil {
		err := d.mu.err
		d.mu.Unlock()
		return err
	}
	if d.mu.iteration > 0 && d.mu.requireSync && d.mu.next < len(d.mu.buckets) && d.hasPendingLocked() {
		err := d.unreadyErrorLocked()
		d.mu.Unlock()
		return err
	}
	rebuild := d.mu.iteration == 1 && !d.mu.rebuilt && !d.opt.NoRebuildBuckets && len(d.mu.readyOrder) == len(d.params)
	order := append([]int(nil), d.mu.readyOrder...)
	// AutoBucketCaps measures the second iteration (the first faults in
	// fresh memory, and the order is rebuilt after it), then tries its
	// candidates; whether a step is due is the same on every rank, since
	// all must broadcast.
	tune := d.tuneDueLocked()
	var tuneOrder []int
	var tuneReady []time.Duration
	if tune && d.mu.iteration == 2 && d.group.Rank() == 0 {
		tuneOrder, tuneReady = d.orderLocked(), d.readyTimesLocked()
	}
	jc := d.join
	d.mu.Unlock()

	if jc != nil {
		if err := jc.Notify(ctx, d); err != nil {
			return err
		}
	}
	if rebuild {
		// Every rank must use the same plan: rank 0's observed order.
		if err := dist.BroadcastObject(ctx, d.group, &order, 0); err != nil {
			return fmt.Errorf("ddp: share the rebuilt bucket order: %w", err)
		}
		d.mu.Lock()
		d.plan(order)
		d.mu.rebuilt = true
		d.mu.Unlock()
	}
	if tune {
		if err := d.tune(ctx, tuneOrder, tuneReady); err != nil {
			return err
		}
	}
	if !d.opt.NoBroadcastBuffers {
		if err := d.broadcastBuffers(ctx); err != nil {
			return err
		}
	}
	d.mu.Lock()
	d.resetLocked()
	d.mu.started = true
	d.mu.Unlock()
	return nil
}

func (d *DDP) resetLocked() {
	d.mu.next = 0
	d.mu.ready = resize(d.mu.ready, len(d.params))
	d.mu.readyOrder = d.mu.readyOrder[:0]
	if d.opt.AutoBucketCaps && !d.mu.tuned {
		d.mu.readyAt = resize(d.mu.readyAt, len(d.params))
	}
	d.mu.unused = nil
	d.mu.store = nil
	if d.opt.StaticGraph {
		d.mu.fired = resize(d.mu.fired, len(d.params))
		d.mu.lastFired = resize(d.mu.lastFired, len(d.params))
		if d.mu.expected != nil {
			// The parameters the first iteration gave no gradient are
			// marked ready when backward begins.
			d.mu.unused = d.mu.unusedStatic
		}
	}
	for _, bk := range d.mu.buckets {
		bk.pending = len(bk.params)
		bk.work = nil
	}
}

// resize returns s cleared, with n elements, reusing its memory.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func (d *DDP) hasPendingLocked() bool {
	for _, r := range d.mu.ready {
		if !r {
			return true
		}
	}
	return false
}

func (d *DDP) unreadyErrorLocked() error {
	if d.opt.StaticGraph && d.mu.expected != nil {
		return d.staticErrorLocked()
	}
	var names []string
	for i, r := range d.mu.ready {
		if !r {
			names = append(names, d.names[i])
		}
	}
	return &UnusedParameterError{Rank: d.group.Rank(), Params: names}
}

// UnusedParameterError reports parameters that received no gradient in an
// iteration while DDP expected every parameter to: their buckets could not
// be reduced.
type UnusedParameterError struct {
	Rank   int
	Params []string
}

func (e *UnusedParameterError) Error() string {
	return fmt.Sprintf("ddp: rank %d: parameters %s received no gradient in the last backward pass, so their buckets were never reduced; if the model does not use them in every iteration, set Options.FindUnusedParameters (or make the loss depend on them)",
		e.Rank, strings.Join(e.Params, ", "))
}

func (d *DDP) setErr(err error) {
	d.mu.Lock()
	if d.mu.err == nil {
		d.mu.err = err
	}
	d.mu.Unlock()
}

// onReady runs in autograd's grad-ready hook: parameter i's gradient for
// this pass is complete, in s (Grad, or a distributed autograd context).
func (d *DDP) onReady(i int, s autograd.GradStore) {
	if d.onReadyLocked(i, s) > 0 {
		// Let the reductions just started send their first frames before
		// backward goes on: with one P per worker (GOMAXPROCS = CPUs /
		// workers, as godist run sets), they would otherwise wait for the
		// rest of backward, and nothing would overlap.
		runtime.Gosched()
	}
}

// onReadyLocked marks parameter i ready and returns how many buckets it
// launched.
func (d *DDP) onReadyLocked(i int, s autograd.GradStore) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.mu.requireSync || d.mu.ready == nil || !d.mu.started {
		return 0 // (without a DDP forward: nothing to reduce)
	}
	switch {
	case d.mu.store == nil:
		d.mu.store = s
	case d.mu.store != s:
		if d.mu.err == nil {
			d.mu.err = fmt.Errorf("ddp: rank %d: parameter %s's gradient is in another place (another distributed autograd context, or Grad) than the rest of this iteration's; run the iteration's backward passes in one context", d.group.Rank(), d.names[i])
		}
		return 0
	}
	if d.opt.StaticGraph {
		d.mu.fired[i]++
		d.mu.fireSeq++
		d.mu.lastFired[i] = d.mu.fireSeq
		switch {
		case d.mu.expected == nil:
			return 0 // the recording iteration: Wait reduces
		case d.mu.fired[i] > d.mu.expected[i]:
			if d.mu.err == nil {
				d.mu.err = d.staticErrorLocked()
			}
			return 0
		case d.mu.fired[i] < d.mu.expected[i]:
			return 0
		}
	} else if d.mu.ready[i] {
		if d.mu.err == nil {
			d.mu.err = &ReadyTwiceError{Rank: d.group.Rank(), Param: d.names[i]}
		}
		return 0
	}
	d.markReadyLocked(i)
	// With FindUnusedParameters, the first ready gradient is the moment to
	// mark the unused ones: the graph is known and backward has begun.
	if d.mu.unused != nil {
		for j := range d.mu.unused {
			if !d.mu.ready[j] {
				d.setGradLocked(j, zeroGradLike(d.params[j], d.gradLocked(j)))
				d.markReadyLocked(j)
			}
		}
		d.mu.unused = nil
	}
	if d.opt.NoOverlap {
		return 0
	}
	return d.launchLocked()
}

// storeLocked is where this iteration's gradients are: Grad unless a
// distributed autograd pass said otherwise.
func (d *DDP) storeLocked() autograd.GradStore {
	if d.mu.store == nil {
		return autograd.VarGrads
	}
	return d.mu.store
}

func (d *DDP) gradLocked(i int) *tensor.Tensor { return d.storeLocked().Grad(d.params[i]) }

func (d *DDP) setGradLocked(i int, g *tensor.Tensor) { d.storeLocked().SetGrad(d.params[i], g) }

func zeroGradLike(p *autograd.Var, g *tensor.Tensor) *tensor.Tensor {
	if g != nil {
		return g
	}
	return tensor.New(p.DType(), p.Shape()...)
}

func (d *DDP) markReadyLocked(i int) {
	d.mu.ready[i] = true
	if d.mu.readyAt != nil {
		d.mu.readyAt[i] = time.Now()
	}
	d.mu.readyOrder = append(d.mu.readyOrder, i)
	bk := d.mu.buckets[d.mu.bucketOf[i]]
	k := d.mu.posInBkt[i]
	view := d.view(bk, k)
	g := d.gradLocked(i)
	asView := d.opt.GradientAsBucketView && d.storeLocked() == autograd.VarGrads
	switch {
	case g == nil:
		view.Zero()
	case asView && tensor.SharesStorage(g, view):
		// already in place
	default:
		view.Copy(g)
		if asView {
			d.params[i].SetGrad(view)
		}
	}
	bk.pending--
}

// launchLocked starts the all-reduce of every ready bucket, in bucket
// order (so every rank issues them in the same order).
func (d *DDP) launchLocked() int {
	n := 0
	for d.mu.next < len(d.mu.buckets) && d.mu.buckets[d.mu.next].pending == 0 {
		b := d.mu.next
		bk := d.mu.buckets[b]
		bk.work = d.opt.CommHook(d.group, &GradBucket{Index: b, Buffer: bk.buf, IsLast: b == len(d.mu.buckets)-1, params: bk, ddp: d})
		d.mu.next++
		n++
	}
	return n
}

// Wait blocks until every bucket of this iteration has been reduced and
// leaves the averaged gradient in each parameter's Grad. Call it after
// backward and before the optimizer step. Inside a distributed autograd
// context (rpc/distautograd: the DDP model is part of a model that spans
// RPC workers) the gradients are the context's, and so are the averages:
// call Wait after distautograd.Backward, then step with the context's
// gradients (distoptim), as PyTorch's DDP with distributed autograd does;
// Grad is left alone. It returns an
// *UnusedParameterError if some parameter got no gradient (without
// FindUnusedParameters), or the group's error.
func (d *DDP) Wait(ctx context.Context) error {
	d.mu.Lock()
	if !d.mu.requireSync {
		d.mu.started = false
		d.mu.Unlock()
		return nil
	}
	if d.mu.err != nil {
		err := d.mu.err
		d.mu.Unlock()
		return err
	}
	if !d.mu.started {
		d.mu.Unlock()
		return errors.New("ddp: Wait without a forward pass through the DDP model")
	}
	if d.opt.StaticGraph && d.mu.expected == nil {
		if err := d.group.Err(); err != nil {
			// A backward pass that stopped at a failed collective
			// counted too few gradients: record nothing.
			d.mu.err = err
			d.mu.Unlock()
			return err
		}
		d.recordStaticLocked()
	}
	if d.hasPendingLocked() {
		// A backward pass that stopped at a failed collective (its error
		// ignored) leaves gradients unready: the group's failure is the
		// cause to report, not unused parameters.
		err := d.group.Err()
		if err == nil {
			err = d.unreadyErrorLocked()
		}
		d.mu.err = err
		d.mu.Unlock()
		return err
	}
	d.launchLocked() // all of them with NoOverlap; none left otherwise
	buckets := d.mu.buckets
	d.mu.Unlock()
	for b, bk := range buckets {
		if err := bk.work.Wait(ctx); err != nil {
			d.setErr(err)
			return fmt.Errorf("ddp: reduce bucket %d: %w", b, err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// The averages go where the gradients are: Grad, or a distributed
	// autograd context (as copies there, never views of the buckets,
	// which the next iteration reuses).
	if s := d.storeLocked(); !d.opt.GradientAsBucketView || s != autograd.VarGrads {
		for _, bk := range buckets {
			for k, i := range bk.params {
				p := d.params[i]
				view := d.view(bk, k)
				if g := s.Grad(p); g != nil {
					g.Copy(view)
				} else {
					s.SetGrad(p, view.Clone())
				}
			}
		}
	}
	if d.opt.AutoBucketCaps {
		d.recordTrialLocked()
	}
	d.mu.store = nil
	d.mu.iteration++
	d.mu.started = false
	return nil
}

// recordStaticLocked ends StaticGraph's recording iteration, in Wait: it
// keeps how many times each parameter's gradient became ready, marks every
// parameter ready (those that got none with zeros) and sets the order to
// rebuild the buckets in: the unused ones first (later iterations mark
// them first), then by the last time each became ready.
func (d *DDP) recordStaticLocked() {
	d.mu.expected = slices.Clone(d.mu.fired)
	d.mu.unusedStatic = map[int]bool{}
	for i, n := range d.mu.expected {
		if n == 0 {
			d.mu.unusedStatic[i] = true
		}
	}
	order := make([]int, len(d.params))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return d.mu.lastFired[a] - d.mu.lastFired[b] })
	for _, i := range order {
		if d.mu.expected[i] == 0 {
			d.setGradLocked(i, zeroGradLike(d.params[i], d.gradLocked(i)))
		}
		d.markReadyLocked(i)
	}
}

func (d *DDP) staticErrorLocked() error {
	e := &StaticGraphError{Rank: d.group.Rank()}
	for i, n := range d.mu.fired {
		if n != d.mu.expected[i] {
			e.Params = append(e.Params, d.names[i])
			e.Ready = append(e.Ready, n)
			e.Want = append(e.Want, d.mu.expected[i])
		}
	}
	return e
}

// StaticGraphError reports an iteration of a model with
// Options.StaticGraph whose graph departed from the first iteration's:
// each of Params had its gradient become ready Ready[k] times (so far, if
// the error came during backward) where the first iteration had Want[k].
type StaticGraphError struct {
	Rank        int
	Params      []string
	Ready, Want []int
}

func (e *StaticGraphError) Error() string {
	var b strings.Builder
	for k, p := range e.Params {
		if k > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d times (first iteration %d)", p, e.Ready[k], e.Want[k])
	}
	return fmt.Sprintf("ddp: rank %d: with StaticGraph every iteration must give the parameters gradients as the first did, but this one readied %s; drop StaticGraph (with FindUnusedParameters if parameters go unused) for a model whose graph changes", e.Rank, b.String())
}

// ReadyTwiceError reports a parameter whose gradient became ready a
// second time in one iteration, after its bucket's reduction may have
// started without the second part: two backward passes before Wait, or a
// parameter used outside the forward pass (in the loss) that
// FindUnusedParameters had taken for unused.
type ReadyTwiceError struct {
	Rank  int
	Param string
}

func (e *ReadyTwiceError) Error() string {
	return fmt.Sprintf("ddp: rank %d: parameter %s's gradient became ready twice in one iteration (two backward passes before Wait, or a use outside the forward pass that FindUnusedParameters took for unused), so its reduction would miss part of it; set Options.StaticGraph if every iteration does this alike", e.Rank, e.Param)
}

// Backward runs loss.Backward and Wait. A failure of the group (a dead
// peer, a timeout, a desync), in this iteration's forward pass or its
// backward pass, comes back as the group's typed error (*dist.RankError,
// *dist.TimeoutError, *dist.DesyncError, wrapped: use errors.As).
func (d *DDP) Backward(ctx context.Context, loss *autograd.Var) error {
	d.mu.Lock()
	err := d.mu.err // Forward's, say: the first failure is the one to tell
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if err := loss.Backward(nil); err != nil {
		d.setErr(err)
		return fmt.Errorf("ddp: backward: %w", err)
	}
	return d.Wait(ctx)
}

// NoSync runs fn with gradient synchronisation off: gradients accumulate
// locally, and the next synchronised iteration reduces the sum, as
// PyTorch's no_sync() context.
func (d *DDP) NoSync(fn func() error) error {
	d.mu.Lock()
	d.mu.requireSync = false
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.mu.requireSync = true
		d.mu.started = false
		d.mu.Unlock()
	}()
	return fn()
}

// StateDict returns the wrapped module's state under "module." names, as
// PyTorch's DDP. It does not hold the bucket plan: a run resumed from it
// reduces its first step in the initial layout where the run that never
// stopped used the rebuilt one, and from world 3 on the layout decides
// each gradient element's summation order, so the two part in the last
// bits. SaveCheckpoint and LoadCheckpoint keep the plan: resume is then
// exact.
func (d *DDP) StateDict() map[string]*tensor.Tensor { return nn.StateDict(d) }
