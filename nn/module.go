package nn

import (
	"fmt"
	"slices"
	"strings"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// Module is anything built on Base: it has parameters, buffers and
// submodules in registration order. Modules embed Base and register their
// parts in their constructor.
type Module interface {
	base() *Base
}

// Layer is a Module with one input and one output. Call runs a Layer with
// its hooks; code that composes layers should call Call rather than Forward.
type Layer interface {
	Module
	Forward(x *autograd.Var) *autograd.Var
}

// Base holds a module's registered parts and state. Its zero value is a
// module in training mode with nothing registered.
type Base struct {
	params    []named[*autograd.Var]
	buffers   []named[*tensor.Tensor]
	children  []named[Module]
	eval      bool
	preHooks  []hook[PreHook]
	postHooks []hook[PostHook]
	nextHook  int
}

func (b *Base) base() *Base { return b }

type named[T any] struct {
	name string
	v    T
}

type hook[F any] struct {
	id int
	fn F
}

// PreHook runs before a layer's Forward; a non-nil result replaces the
// input.
type PreHook func(m Module, x *autograd.Var) *autograd.Var

// PostHook runs after a layer's Forward; a non-nil result replaces the
// output.
type PostHook func(m Module, x, y *autograd.Var) *autograd.Var

func checkName(kind, name string, taken func(string) bool) {
	if name == "" || strings.Contains(name, ".") {
		panic(fmt.Sprintf("nn: %s name %q must be non-empty and contain no dot", kind, name))
	}
	if taken(name) {
		panic(fmt.Sprintf("nn: %s %q registered twice", kind, name))
	}
}

func (b *Base) has(name string) bool {
	return slices.ContainsFunc(b.params, func(p named[*autograd.Var]) bool { return p.name == name }) ||
		slices.ContainsFunc(b.buffers, func(p named[*tensor.Tensor]) bool { return p.name == name }) ||
		slices.ContainsFunc(b.children, func(p named[Module]) bool { return p.name == name })
}

// RegisterParameter adds a parameter under name. A nil v registers nothing
// (a layer built without bias).
func (b *Base) RegisterParameter(name string, v *autograd.Var) {
	if v == nil {
		return
	}
	checkName("parameter", name, b.has)
	b.params = append(b.params, named[*autograd.Var]{name, v})
}

// RegisterBuffer adds a buffer (state that is saved but not trained, such
// as BatchNorm's running mean) under name.
func (b *Base) RegisterBuffer(name string, t *tensor.Tensor) {
	checkName("buffer", name, b.has)
	b.buffers = append(b.buffers, named[*tensor.Tensor]{name, t})
}

// RegisterModule adds a submodule under name.
func (b *Base) RegisterModule(name string, m Module) {
	checkName("module", name, b.has)
	b.children = append(b.children, named[Module]{name, m})
}

// Buffer returns the buffer registered under name, or nil.
func (b *Base) Buffer(name string) *tensor.Tensor {
	for _, x := range b.buffers {
		if x.name == name {
			return x.v
		}
	}
	return nil
}

// setBuffer replaces a buffer's tensor.
func (b *Base) setBuffer(name string, t *tensor.Tensor) {
	for i := range b.buffers {
		if b.buffers[i].name == name {
			b.buffers[i].v = t
			return
		}
	}
	panic("nn: no buffer " + name)
}

// Training reports whether the module is in training mode.
func (b *Base) Training() bool { return !b.eval }

// RegisterForwardPreHook adds a hook run by Call before Forward and returns
// a function that removes it.
func (b *Base) RegisterForwardPreHook(fn PreHook) (remove func()) {
	b.nextHook++
	id := b.nextHook
	b.preHooks = append(b.preHooks, hook[PreHook]{id, fn})
	return func() {
		b.preHooks = slices.DeleteFunc(b.preHooks, func(h hook[PreHook]) bool { return h.id == id })
	}
}

// RegisterForwardHook adds a hook run by Call after Forward and returns a
// function that removes it.
func (b *Base) RegisterForwardHook(fn PostHook) (remove func()) {
	b.nextHook++
	id := b.nextHook
	b.postHooks = append(b.postHooks, hook[PostHook]{id, fn})
	return func() {
		b.postHooks = slices.DeleteFunc(b.postHooks, func(h hook[PostHook]) bool { return h.id == id })
	}
}

// Call runs l's forward pre-hooks, Forward, then its forward hooks, as
// PyTorch's Module.__call__.
func Call(l Layer, x *autograd.Var) *autograd.Var {
	b := l.base()
	for _, h := range b.preHooks {
		if r := h.fn(l, x); r != nil {
			x = r
		}
	}
	y := l.Forward(x)
	for _, h := range b.postHooks {
		if r := h.fn(l, x, y); r != nil {
			y = r
		}
	}
	return y
}

// Train puts m and all its submodules in training mode.
func Train(m Module) { setMode(m, false) }

// Eval puts m and all its submodules in evaluation mode (BatchNorm uses its
// running statistics, Dropout passes input through).
func Eval(m Module) { setMode(m, true) }

func setMode(m Module, eval bool) {
	b := m.base()
	b.eval = eval
	for _, c := range b.children {
		setMode(c.v, eval)
	}
}

// Named is a name and a value, as returned by NamedParameters.
type Named[T any] struct {
	Name  string
	Value T
}

// NamedParameters returns every parameter of m and its submodules with its
// dotted PyTorch name ("0.weight", "net1.bias"), in registration order,
// depth first. A parameter shared by two modules is listed once.
func NamedParameters(m Module) []Named[*autograd.Var] {
	var out []Named[*autograd.Var]
	seen := map[*autograd.Var]bool{}
	walk(m, "", func(prefix string, b *Base) {
		for _, p := range b.params {
			if !seen[p.v] {
				seen[p.v] = true
				out = append(out, Named[*autograd.Var]{prefix + p.name, p.v})
			}
		}
	})
	return out
}

// Parameters returns the parameters of m in NamedParameters' order.
func Parameters(m Module) []*autograd.Var {
	ps := NamedParameters(m)
	out := make([]*autograd.Var, len(ps))
	for i, p := range ps {
		out[i] = p.Value
	}
	return out
}

// ParamNames returns the name that NamedParameters gives each of ps in m,
// in ps's order: an optimizer's Params named for a state dict keyed by
// parameter name, as FSDP's full optimizer state and distributed
// checkpoints are. It takes the parameters as a list, not the optimizer,
// so that nn stays below optim. A parameter that is not one of m's is an
// error naming its index in ps.
func ParamNames(m Module, ps []*autograd.Var) ([]string, error) {
	byVar := map[*autograd.Var]string{}
	for _, p := range NamedParameters(m) {
		byVar[p.Value] = p.Name
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		n, ok := byVar[p]
		if !ok {
			return nil, fmt.Errorf("nn: parameter %d of %d is not one of the module's", i, len(ps))
		}
		names[i] = n
	}
	return names, nil
}

// NamedBuffers returns every buffer of m and its submodules with its dotted
// name, in registration order, depth first.
func NamedBuffers(m Module) []Named[*tensor.Tensor] {
	var out []Named[*tensor.Tensor]
	walk(m, "", func(prefix string, b *Base) {
		for _, x := range b.buffers {
			out = append(out, Named[*tensor.Tensor]{prefix + x.name, x.v})
		}
	})
	return out
}

func walk(m Module, prefix string, fn func(prefix string, b *Base)) {
	b := m.base()
	fn(prefix, b)
	for _, c := range b.children {
		walk(c.v, prefix+c.name+".", fn)
	}
}

// NamedModules returns m (named "") and every module below it with its
// dotted name, depth first in registration order, as PyTorch's
// named_modules. A module reachable by two paths is listed once, under the
// first.
func NamedModules(m Module) []Named[Module] {
	var out []Named[Module]
	seen := map[*Base]bool{}
	var visit func(m Module, name string)
	visit = func(m Module, name string) {
		b := m.base()
		if seen[b] {
			return
		}
		seen[b] = true
		out = append(out, Named[Module]{name, m})
		for _, c := range b.children {
			child := c.name
			if name != "" {
				child = name + "." + c.name
			}
			visit(c.v, child)
		}
	}
	visit(m, "")
	return out
}

// DirectParameters returns the parameters registered on m itself, not on
// its submodules, with their local names.
func DirectParameters(m Module) []Named[*autograd.Var] {
	var out []Named[*autograd.Var]
	for _, p := range m.base().params {
		if p.v != nil {
			out = append(out, Named[*autograd.Var]{p.name, p.v})
		}
	}
	return out
}

// StateDict returns m's parameters and buffers by PyTorch name. The tensors
// are the module's own (not copies): save them before changing the model.
// Within each module, parameters come before buffers, as in PyTorch;
// StateDictKeys gives that order.
func StateDict(m Module) map[string]*tensor.Tensor {
	sd := map[string]*tensor.Tensor{}
	walk(m, "", func(prefix string, b *Base) {
		for _, p := range b.params {
			sd[prefix+p.name] = p.v.Value()
		}
		for _, x := range b.buffers {
			sd[prefix+x.name] = x.v
		}
	})
	return sd
}

// StateDictKeys returns the state dict's names in PyTorch's order.
func StateDictKeys(m Module) []string {
	var keys []string
	walk(m, "", func(prefix string, b *Base) {
		for _, p := range b.params {
			keys = append(keys, prefix+p.name)
		}
		for _, x := range b.buffers {
			keys = append(keys, prefix+x.name)
		}
	})
	return keys
}

// LoadStateDict copies the tensors of sd into m's parameters and buffers,
// converting dtypes. Shapes must match. With strict, a name missing from sd
// or not in m is an error, as PyTorch's load_state_dict(strict=True).
func LoadStateDict(m Module, sd map[string]*tensor.Tensor, strict bool) error {
	var missing, shape []string
	used := map[string]bool{}
	load := func(name string, dst *tensor.Tensor) {
		src, ok := sd[name]
		if !ok {
			missing = append(missing, name)
			return
		}
		used[name] = true
		if !tensor.SameShape(src, dst) {
			shape = append(shape, fmt.Sprintf("%s: checkpoint %v, model %v", name, src.Shape(), dst.Shape()))
			return
		}
		dst.Copy(src)
	}
	walk(m, "", func(prefix string, b *Base) {
		for _, p := range b.params {
			load(prefix+p.name, p.v.Value())
		}
		for _, x := range b.buffers {
			load(prefix+x.name, x.v)
		}
	})
	var unexpected []string
	for k := range sd {
		if !used[k] {
			unexpected = append(unexpected, k)
		}
	}
	slices.Sort(unexpected)
	var errs []string
	if len(shape) > 0 {
		errs = append(errs, "shape mismatch for "+strings.Join(shape, "; "))
	}
	if strict && len(missing) > 0 {
		errs = append(errs, "missing keys "+strings.Join(missing, ", "))
	}
	if strict && len(unexpected) > 0 {
		errs = append(errs, "unexpected keys "+strings.Join(unexpected, ", "))
	}
	if len(errs) > 0 {
		return fmt.Errorf("nn: load state dict: %s", strings.Join(errs, "; "))
	}
	return nil
}

// ZeroGrad clears the gradients of all of m's parameters (see
// autograd.Var.ZeroGrad).
func ZeroGrad(m Module, setToNone bool) {
	for _, p := range Parameters(m) {
		p.ZeroGrad(setToNone)
	}
}

// NumParameters returns the number of scalar parameters of m.
func NumParameters(m Module) int {
	n := 0
	for _, p := range Parameters(m) {
		n += p.Value().Numel()
	}
	return n
}

// ReplaceModules walks m's submodules depth first and replaces each one for
// which fn returns a non-nil module (and does not descend into the
// replacement). It returns m, or fn(m) if that is non-nil. SyncBatchNorm's
// converter uses it.
func ReplaceModules(m Module, fn func(Module) Module) Module {
	if r := fn(m); r != nil {
		return r
	}
	b := m.base()
	for i := range b.children {
		b.children[i].v = ReplaceModules(b.children[i].v, fn)
	}
	if s, ok := m.(*Sequential); ok {
		for i := range s.Layers {
			s.Layers[i] = b.children[i].v.(Layer)
		}
	}
	return m
}
