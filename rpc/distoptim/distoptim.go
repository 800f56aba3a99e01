// Package distoptim is the distributed optimizer (PyTorch's
// torch.distributed.optim.DistributedOptimizer): it takes an optimizer
// constructor and RRefs of the parameters to optimize, creates an
// optimizer on each parameter's owner, and steps them all with the
// gradients distributed autograd computed in a context.
//
//	distoptim.Register(reg)                                   // every worker, before rpc.Init
//	distoptim.RegisterConstructor("sgd", func(ps []*autograd.Var) optim.Optimizer {
//		return optim.NewSGD(ps, optim.SGDOptions{LR: 0.05})
//	})                                                        // every worker
//	opt, err := distoptim.New(ctx, agent, "sgd", paramRRefs)
//	...
//	err = distautograd.Backward(ctx, id, loss)
//	err = opt.Step(ctx, id)
//
// Constructors are named, not sent: code never crosses the wire, so each
// worker registers the same constructors (the same binary does). On each
// owner, Step lends the context's gradients to the parameters' Grad for
// the length of the optimizer's step (restoring what Grad held), under
// one lock per process, so that trainers stepping concurrently
// (Hogwild-style, as PyTorch's parameter-server tutorial) take turns on
// each owner: each trainer's New makes its own local optimizer there, and
// they lend gradients to the same parameters' Grad. (PyTorch's
// _LocalOptimizer shares one global lock the same way.)
package distoptim

import (
	"context"
	"fmt"
	"sync"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/tensor"
)

// ParameterRRefs returns an RRef, owned by a's worker, to each trainable
// parameter of m, in nn.Parameters' order: what New takes for a module
// of this worker (PyTorch's [RRef(p) for p in model.parameters()], and
// the body of a RemoteModule's remote_parameters, which a worker holding
// a module for others serves by returning this). Release each when done.
func ParameterRRefs(a *rpc.Agent, m nn.Module) []*rpc.RRef[*autograd.Var] {
	ps := nn.Parameters(m)
	refs := make([]*rpc.RRef[*autograd.Var], len(ps))
	for i, p := range ps {
		refs[i] = rpc.NewRRef(a, p)
	}
	return refs
}

// Constructor builds an optimizer over parameters.
type Constructor func(params []*autograd.Var) optim.Optimizer

var ctors struct {
	sync.Mutex
	m map[string]Constructor
}

// RegisterConstructor names a constructor; New refers to it by name on
// every owner. Register the same names on every worker.
func RegisterConstructor(name string, c Constructor) {
	ctors.Lock()
	defer ctors.Unlock()
	if ctors.m == nil {
		ctors.m = map[string]Constructor{}
	}
	ctors.m[name] = c
}

// local is the optimizer on one owner.
type local struct {
	opt optim.Optimizer
}

// stepMu serialises every local optimizer's step in this process: two
// optimizers (two trainers' New) over the same parameters must not lend
// their gradients to the same Grad at once. Readers of the parameters
// take its read side (ReadParams).
var stepMu sync.RWMutex

// ReadParams runs fn while no distributed optimizer steps a parameter of
// this process: a parameter server's forward pass, which reads weights
// that other trainers' optimizers step Hogwild-style, copies what it
// needs inside fn (an embedding lookup copies its rows; a layer whose
// backward reads its weight must copy the weight too). Steps wait for fn,
// and fn for a step under way. Without it, such a read is a data race.
func ReadParams(fn func()) {
	stepMu.RLock()
	defer stepMu.RUnlock()
	fn()
}

type createArgs struct {
	Ctor   string
	Params []*rpc.RRef[*autograd.Var]
}

var (
	createFn = rpc.Func[createArgs, *local]("distoptim.create")
	stepFn   = rpc.MethodOf[*local, int64, struct{}]("distoptim.step")
)

// Register registers the distributed optimizer's functions on r; every
// worker that owns parameters must, before rpc.Init.
func Register(r rpc.Registrar) error {
	if _, err := rpc.Register(r, createFn.Name(), create); err != nil {
		return err
	}
	_, err := rpc.RegisterMethod(r, stepFn.Name(), step)
	return err
}

func create(ctx context.Context, a createArgs) (*local, error) {
	ctors.Lock()
	c := ctors.m[a.Ctor]
	ctors.Unlock()
	if c == nil {
		return nil, fmt.Errorf("distoptim: no optimizer constructor %q registered here", a.Ctor)
	}
	ps := make([]*autograd.Var, len(a.Params))
	for i, r := range a.Params {
		v, err := r.LocalValue(ctx)
		if err != nil {
			return nil, err
		}
		ps[i] = v
	}
	return &local{opt: c(ps)}, nil
}

func step(ctx context.Context, l *local, id int64) (struct{}, error) {
	a, _ := rpc.AgentFrom(ctx)
	grads, err := distautograd.GetGradients(distautograd.WithAgent(ctx, a), distautograd.ContextID(id))
	if err != nil {
		return struct{}{}, err
	}
	stepMu.Lock()
	defer stepMu.Unlock()
	ps := l.opt.Params()
	saved := make([]*tensor.Tensor, len(ps))
	for i, p := range ps {
		saved[i] = p.Grad()
		p.SetGrad(grads[p]) // nil: no gradient in this context, no update
	}
	defer func() {
		for i, p := range ps {
			p.SetGrad(saved[i])
		}
	}()
	l.opt.Step()
	return struct{}{}, nil
}

// Optimizer steps the local optimizers on the parameters' owners.
type Optimizer struct {
	a      *rpc.Agent
	remote []*rpc.RRef[*local]
}

// New creates, by RPC, an optimizer made by the constructor registered
// as ctor on each owner of params, over that owner's parameters (in the
// order given). A constructor that fails on an owner (an unknown name)
// fails the first Step, as the creation runs remotely.
func New(ctx context.Context, a *rpc.Agent, ctor string, params []*rpc.RRef[*autograd.Var]) (*Optimizer, error) {
	byOwner := map[string][]*rpc.RRef[*autograd.Var]{}
	var owners []string
	for _, p := range params {
		o := p.Owner().Name
		if _, ok := byOwner[o]; !ok {
			owners = append(owners, o)
		}
		byOwner[o] = append(byOwner[o], p)
	}
	opt := &Optimizer{a: a}
	for _, o := range owners {
		r, err := createFn.Remote(ctx, a, o, createArgs{Ctor: ctor, Params: byOwner[o]})
		if err != nil {
			opt.Release()
			return nil, fmt.Errorf("distoptim: creating the optimizer on %s: %w", o, err)
		}
		opt.remote = append(opt.remote, r)
	}
	return opt, nil
}

// Step steps every owner's optimizer, concurrently, with the gradients
// of context id, and returns the first error.
func (o *Optimizer) Step(ctx context.Context, id distautograd.ContextID) error {
	futs := make([]*rpc.Future[struct{}], len(o.remote))
	for i, r := range o.remote {
		futs[i] = stepFn.Go(ctx, o.a, r, int64(id))
	}
	if _, err := rpc.WaitAll(ctx, futs); err != nil {
		return fmt.Errorf("distoptim: step of context %v: %w", id, err)
	}
	return nil
}

// Release drops the optimizers on the owners.
func (o *Optimizer) Release() {
	for _, r := range o.remote {
		r.Release()
	}
	o.remote = nil
}
