package autograd

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/godist/godist/tensor"
)

// Var is a tensor value in the autograd graph. Its value and its gradient
// are kept apart: Value() is what the forward pass computed, Grad() what
// backward accumulated (nil until then).
//
// A Var made by NewVar is a leaf; a Var returned by an operation on inputs
// that require gradients records the operation (its node) so that Backward
// can run it in reverse.
type Var struct {
	value        *tensor.Tensor
	requiresGrad bool
	node         *node // the operation that made this Var; nil for leaves
	err          error // a failed forward (Fallible) this Var was computed from
	masked       bool  // an operation's backward skips v's gradient (split passes)
	// stor is the storage group of v's value, when that is a pooled
	// buffer a recorded operation made (own) or a view of one; transient
	// says MarkTransient was called. See storage.
	stor      *storage
	own       storage
	transient bool

	mu struct {
		sync.Mutex
		grad       *tensor.Tensor
		hooks      []hookEntry[func(*tensor.Tensor) *tensor.Tensor]
		readyHooks []hookEntry[func(*Var, GradStore)]
		retainGrad bool
		gradDst    *tensor.Tensor // where a fresh gradient may be computed (SetGradDestination)
		dstArmed   bool           // the engine allows the op being run to write into gradDst
	}
}

type hookEntry[F any] struct {
	id uint64
	fn F
}

var hookIDs atomic.Uint64

// NewVar returns a leaf holding t. With requiresGrad, backward passes
// accumulate into its gradient (a parameter); without, it is a constant.
func NewVar(t *tensor.Tensor, requiresGrad bool) *Var {
	return &Var{value: t, requiresGrad: requiresGrad}
}

// Param returns a leaf that requires gradients.
func Param(t *tensor.Tensor) *Var { return NewVar(t, true) }

// Const returns a leaf that does not require gradients.
func Const(t *tensor.Tensor) *Var { return NewVar(t, false) }

// Err returns the error of a failed operation (a Fallible Function, such
// as SyncBatchNorm's collectives) that v was computed from, or nil. Such a
// Var's value is unspecified, and Backward from it returns the error.
func (v *Var) Err() error { return v.err }

// Value returns the tensor computed in the forward pass. Code that changes
// it in place (an optimizer step) must do so outside a recorded graph.
//
// Value of a Var marked transient (MarkTransient) whose storage a backward
// pass has recycled panics; taking the value of one earlier keeps its
// storage from being recycled.
func (v *Var) Value() *tensor.Tensor {
	if v.stor != nil {
		v.stor.escape()
	}
	return v.value
}

// SetValue replaces the value of a leaf (loading a checkpoint, say).
func (v *Var) SetValue(t *tensor.Tensor) {
	if v.node != nil {
		panic("autograd: SetValue on a non-leaf Var")
	}
	v.value = t
}

// Shape returns the value's shape.
func (v *Var) Shape() []int { return v.value.Shape() }

// DType returns the value's dtype.
func (v *Var) DType() tensor.DType { return v.value.DType() }

// RequiresGrad reports whether gradients flow to v.
func (v *Var) RequiresGrad() bool { return v.requiresGrad }

// SetRequiresGrad turns gradient tracking of a leaf on or off.
func (v *Var) SetRequiresGrad(b bool) {
	if v.node != nil {
		panic("autograd: SetRequiresGrad on a non-leaf Var")
	}
	v.requiresGrad = b
}

// IsLeaf reports whether v was made by NewVar rather than by an operation.
func (v *Var) IsLeaf() bool { return v.node == nil }

// Detach returns a new constant leaf sharing v's value.
func (v *Var) Detach() *Var { return Const(v.Value()) }

// MarkTransient declares that nothing reads v's value once the backward
// pass through v's graph has freed the graph (a Backward without
// RetainGraph): v is an intermediate result that only the operations
// recorded from it use. That pass may then recycle the value's storage
// for the tensors of later steps, and Value on v panics afterwards.
//
// nn.Sequential marks the outputs of all its layers but the last, so a
// model built from Sequentials allocates no activations once warm. Mark
// only what no code keeps: a value read before the pass (Value, Detach)
// is never recycled, and nor is the storage of a Var that shares it with
// an unmarked one (a view: Reshape, Narrow, ...), one with tensor hooks or
// a retained gradient, or one an outside Function (Apply) saw.
func (v *Var) MarkTransient() {
	if v.transient {
		return
	}
	v.transient = true
	if v.stor != nil {
		v.stor.kept.Add(-1)
	}
}

// storage is what the Vars whose values share one pooled buffer (a
// recorded operation's output and the views recorded from it) know about
// it together: how many of them are not transient, and whether the buffer
// has been read out (Value) or recycled. A backward pass that frees the
// graph recycles the buffer when every Var viewing it is transient and
// none has been read out.
type storage struct {
	kept  atomic.Int32 // Vars viewing the buffer not marked transient
	state atomic.Int32 // storageLive, storageEscaped or storageRecycled
}

const (
	storageLive = iota
	storageEscaped
	storageRecycled
)

// escape records that code outside the graph holds the buffer.
func (s *storage) escape() {
	for {
		switch s.state.Load() {
		case storageEscaped:
			return
		case storageRecycled:
			panic("autograd: value of a transient Var after the backward pass that recycled it (MarkTransient; nn.Sequential marks the outputs of its inner layers): read or clone it before backward, or give the layer a forward hook")
		}
		if s.state.CompareAndSwap(storageLive, storageEscaped) {
			return
		}
	}
}

// recyclable reports whether the buffer may be recycled now, and if so
// marks it recycled: every Var viewing it is transient and none read it
// out. It is true again for the buffer's other Vars in the same pass.
func (s *storage) recyclable() bool {
	if s.kept.Load() != 0 {
		return false
	}
	return s.state.CompareAndSwap(storageLive, storageRecycled) || s.state.Load() == storageRecycled
}

// track puts v, just recorded, in a storage group: that of the input whose
// value its own value is a view of, if any (a view of an input outside
// every group is in none), else a group of its own when its value is a
// pooled buffer and v is in the graph. An input whose storage was
// recycled (code that kept a transient Var and computed with it in a
// later step) has just been read after another step took its memory: it
// panics, rather than let the wrong numbers go on.
func (v *Var) track(inputs []*Var) {
	for _, in := range inputs {
		if in != nil && in.stor != nil && in.stor.state.Load() == storageRecycled {
			panic("autograd: an operation on a transient Var whose storage a backward pass recycled (MarkTransient; nn.Sequential marks the outputs of its inner layers): a layer kept its input or output past the step")
		}
	}
	for _, in := range inputs {
		if in != nil && tensor.SharesStorage(v.value, in.value) {
			if in.stor != nil {
				v.stor = in.stor
				v.stor.kept.Add(1)
			}
			return
		}
	}
	if v.node != nil && v.value.Recyclable() {
		v.stor = &v.own
		v.stor.kept.Store(1)
	}
}

// untrack takes v out of its storage group for good: its value may be
// kept by code the package cannot see (an outside Function made it).
func (v *Var) untrack() {
	if v.stor != nil {
		v.stor.escape()
	}
}

// holdsGrad reports whether code outside the engine sees v's gradients
// (tensor hooks, a retained gradient).
func (v *Var) holdsGrad() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.mu.hooks) > 0 || v.mu.retainGrad
}

// Grad returns the accumulated gradient, or nil if none has been computed.
func (v *Var) Grad() *tensor.Tensor {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.mu.grad
}

// SetGrad replaces the gradient (nil clears it). DDP uses it to make the
// gradient a view into its bucket.
func (v *Var) SetGrad(g *tensor.Tensor) {
	if g != nil && !tensor.SameShape(g, v.value) {
		panic(fmt.Sprintf("autograd: gradient of shape %v for a value of shape %v", g.Shape(), v.value.Shape()))
	}
	v.mu.Lock()
	v.mu.grad = g
	v.mu.Unlock()
}

// SetGradDestination names a tensor (of the value's shape and dtype) into
// which a backward pass may compute this leaf's gradient when the leaf has
// none yet, instead of allocating one: the gradient then is dst. DDP with
// GradientAsBucketView passes the parameter's view into its bucket, so the
// weight gradient's GEMM writes straight into the bucket. nil removes it.
// The pass uses dst only when the leaf is used once in the graph and has
// no tensor hooks; otherwise it allocates as usual.
func (v *Var) SetGradDestination(dst *tensor.Tensor) {
	if dst != nil && (!tensor.SameShape(dst, v.value) || dst.DType() != v.value.DType() || !dst.IsContiguous()) {
		panic(fmt.Sprintf("autograd: gradient destination %v%v for a value %v%v (contiguous, same shape and dtype)", dst.DType(), dst.Shape(), v.value.DType(), v.value.Shape()))
	}
	v.mu.Lock()
	v.mu.gradDst = dst
	v.mu.Unlock()
}

// arm lets the op about to run write this leaf's gradient into its
// destination, if it has one and no gradient or hooks.
func (v *Var) arm() {
	v.mu.Lock()
	v.mu.dstArmed = v.mu.gradDst != nil && v.mu.grad == nil && len(v.mu.hooks) == 0
	v.mu.Unlock()
}

func (v *Var) disarm() {
	v.mu.Lock()
	v.mu.dstArmed = false
	v.mu.Unlock()
}

// gradOut is the tensor an op's backward computes v's gradient into: the
// armed destination (once), else a new unsized tensor.
func (v *Var) gradOut() *tensor.Tensor {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.mu.dstArmed {
		v.mu.dstArmed = false
		return v.mu.gradDst
	}
	return nt()
}

// ZeroGrad clears the gradient: with setToNone the tensor is dropped (the
// next backward allocates a new one), else it is filled with zeros in place.
func (v *Var) ZeroGrad(setToNone bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if setToNone {
		v.mu.grad = nil
	} else if v.mu.grad != nil {
		v.mu.grad.Zero()
	}
}

// RetainGrad makes a non-leaf Var keep its gradient after backward.
func (v *Var) RetainGrad() {
	v.mu.Lock()
	v.mu.retainGrad = true
	v.mu.Unlock()
}

// RegisterHook adds a tensor hook: during backward, when the gradient with
// respect to v has been computed (summed over all its uses), fn is called
// with it; a non-nil result replaces it. For a leaf this happens before the
// gradient is accumulated. It returns a function that removes the hook.
func (v *Var) RegisterHook(fn func(grad *tensor.Tensor) *tensor.Tensor) (remove func()) {
	id := hookIDs.Add(1)
	v.mu.Lock()
	v.mu.hooks = append(v.mu.hooks, hookEntry[func(*tensor.Tensor) *tensor.Tensor]{id, fn})
	v.mu.Unlock()
	return func() {
		v.mu.Lock()
		v.mu.hooks = removeHook(v.mu.hooks, id)
		v.mu.Unlock()
	}
}

// RegisterGradReadyHook adds a hook to a leaf that fires once per backward
// pass, the moment the leaf's gradient for that pass is complete and has
// been accumulated into Grad() (PyTorch's post-accumulate-grad hook). The
// engine knows the moment by counting the leaf's uses in the graph, so the
// hook fires while the rest of backward is still running: DDP starts its
// all-reduce here. It returns a function that removes the hook.
//
// A distributed backward pass (rpc/distautograd) fires it too, with the
// gradient in the pass's context, not in Grad(): a hook that reads or
// replaces the gradient registers with RegisterGradReadyHookIn.
func (v *Var) RegisterGradReadyHook(fn func(*Var)) (remove func()) {
	return v.RegisterGradReadyHookIn(func(v *Var, _ GradStore) { fn(v) })
}

// RegisterGradReadyHookIn is RegisterGradReadyHook for a hook that is
// told where the gradient is: VarGrads (Grad itself) after ordinary
// backward, a distributed autograd context's store after a distributed
// pass (PyTorch's DDP reducer reads and writes a context's gradients the
// same way when it runs inside one).
func (v *Var) RegisterGradReadyHookIn(fn func(v *Var, s GradStore)) (remove func()) {
	if v.node != nil {
		panic("autograd: RegisterGradReadyHook on a non-leaf Var")
	}
	id := hookIDs.Add(1)
	v.mu.Lock()
	v.mu.readyHooks = append(v.mu.readyHooks, hookEntry[func(*Var, GradStore)]{id, fn})
	v.mu.Unlock()
	return func() {
		v.mu.Lock()
		v.mu.readyHooks = removeHook(v.mu.readyHooks, id)
		v.mu.Unlock()
	}
}

func removeHook[F any](hs []hookEntry[F], id uint64) []hookEntry[F] {
	out := hs[:0:0]
	for _, h := range hs {
		if h.id != id {
			out = append(out, h)
		}
	}
	return out
}

// runHooks passes g through v's tensor hooks.
func (v *Var) runHooks(g *tensor.Tensor) *tensor.Tensor {
	v.mu.Lock()
	hooks := v.mu.hooks
	v.mu.Unlock()
	for _, h := range hooks {
		if r := h.fn(g); r != nil {
			g = r
		}
	}
	return g
}

// accumulate adds a complete gradient for this pass into a leaf and fires
// its grad-ready hooks. When the leaf has no gradient yet and steal says the
// engine's tensor may be kept, the leaf takes it without a copy.
func (v *Var) accumulate(g *tensor.Tensor, steal func(*tensor.Tensor) bool) {
	if g != nil {
		g = v.runHooks(g)
	}
	v.mu.Lock()
	switch {
	case g == nil:
	case v.mu.grad == nil && g == v.mu.gradDst:
		v.mu.grad = g // computed in place (SetGradDestination)
	case v.mu.grad == nil:
		if g.DType() == v.value.DType() && steal(g) {
			v.mu.grad = g
			break
		}
		v.mu.grad = tensor.New(v.value.DType(), v.value.Shape()...).Copy(g)
	default:
		v.mu.grad.Add(v.mu.grad, g)
	}
	ready := v.mu.readyHooks
	v.mu.Unlock()
	for _, h := range ready {
		h.fn(v, VarGrads)
	}
}

// GradStore holds leaves' gradients. VarGrads is each leaf's own Grad;
// distributed autograd keeps a context's gradients apart from Grad in
// one of its own (PyTorch's dist_autograd.get_gradients), so that
// passes of several contexts over the same parameters do not mix.
type GradStore interface {
	// Grad returns v's gradient in the store, or nil.
	Grad(v *Var) *tensor.Tensor
	// SetGrad replaces v's gradient in the store (nil removes it).
	SetGrad(v *Var, g *tensor.Tensor)
}

// VarGrads is the GradStore of ordinary backward: a leaf's own Grad.
var VarGrads GradStore = varGrads{}

type varGrads struct{}

func (varGrads) Grad(v *Var) *tensor.Tensor       { return v.Grad() }
func (varGrads) SetGrad(v *Var, g *tensor.Tensor) { v.SetGrad(g) }

// AccumulateIn is a leaf's gradient g, complete for a backward pass that
// an outside engine runs (distributed autograd), arriving: v's tensor
// hooks run on g, the result is added into v's gradient in s (a copy
// when s has none), and v's grad-ready hooks fire, told s. g is not kept.
func (v *Var) AccumulateIn(s GradStore, g *tensor.Tensor) {
	if v.node != nil {
		panic("autograd: AccumulateIn on a non-leaf Var")
	}
	if g == nil {
		return
	}
	g = v.runHooks(g)
	if old := s.Grad(v); old != nil {
		old.Add(old, g)
	} else {
		s.SetGrad(v, tensor.New(v.value.DType(), v.value.Shape()...).Copy(g))
	}
	v.mu.Lock()
	ready := v.mu.readyHooks
	v.mu.Unlock()
	for _, h := range ready {
		h.fn(v, s)
	}
}

// grad mode

var noGradDepth atomic.Int32

// GradEnabled reports whether operations are being recorded.
func GradEnabled() bool { return noGradDepth.Load() == 0 }

// NoGrad runs fn with recording turned off: operations return constants,
// as under torch.no_grad(). The switch is process-wide, not per goroutine:
// do not run training and NoGrad evaluation concurrently in one process.
func NoGrad(fn func()) {
	noGradDepth.Add(1)
	defer noGradDepth.Add(-1)
	fn()
}
