// Package join lets the ranks of a data-parallel job train on uneven
// inputs, as PyTorch's torch.distributed.algorithms.join (Join, Joinable,
// JoinHook): a rank that runs out of data keeps answering the
// collectives of the ranks still training until every rank has run out,
// so that none of them hangs.
//
//	model, _ := ddp.New(ctx, net, g, ddp.Options{})
//	opt, _ := zero.New(nn.Parameters(net), newAdam, g, zero.Options{})
//	err := join.Join(ctx, g, []join.Joinable{model, opt}, func() error {
//		for batch := range myBatches { // fewer on some ranks
//			opt.ZeroGrad(true)
//			if err := model.Backward(ctx, loss(batch)); err != nil {
//				return err
//			}
//			if err := opt.StepContext(ctx); err != nil {
//				return err
//			}
//		}
//		return nil
//	})
//
// It is a package of its own, under parallel/ beside the strategies,
// because it is about training iterations, which dist knows nothing of,
// and because it belongs to no one strategy: DDP and ZeRO both join, and
// neither should have to import the other for that.
package join

import (
	"context"
	"fmt"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/tensor"
)

// Joinable is a participant in Join (PyTorch's Joinable with its
// JoinHook's main hook).
type Joinable interface {
	// SetJoin tells the Joinable that it runs under the Join c, or (nil)
	// no longer. While set, on a rank still training, it calls c.Notify
	// before the collectives of each iteration.
	SetJoin(c *Context)
	// Shadow runs, on a rank that has joined, the collectives one
	// iteration of this Joinable issues on a rank still training, in the
	// same order, with inputs that leave the result as the ranks still
	// training need it (zero gradients into an average, say). It blocks
	// until they complete and returns the group's error, if any.
	Shadow(ctx context.Context) error
}

// Options are Join's options, PyTorch's Join arguments.
type Options struct {
	// Disabled runs the loop as it is, the Joinables not told (PyTorch's
	// enable=False): for a job whose inputs are known to be even, which
	// then pays no per-iteration count.
	Disabled bool
	// ThrowOnEarlyTermination ends the job on every rank as soon as one
	// rank has run out of inputs, instead of shadowing it (PyTorch's
	// throw_on_early_termination): the ranks still training get an
	// *EarlyTerminationError from their next iteration's Notify, and the
	// rank that ran out gets one from Run.
	ThrowOnEarlyTermination bool
}

// EarlyTerminationError is what every rank of a Join with
// ThrowOnEarlyTermination returns once some rank has run out of inputs.
type EarlyTerminationError struct {
	Rank int // the rank that returns it
	// Exhausted is whether this rank is one that ran out of inputs.
	Exhausted bool
	// Training is the ranks still training at that iteration, World the
	// group's size.
	Training, World int
}

func (e *EarlyTerminationError) Error() string {
	if e.Exhausted {
		return fmt.Sprintf("join: rank %d exhausted its inputs while %d of %d ranks still trained; every rank stops (Options.ThrowOnEarlyTermination: shadowing needs it off)",
			e.Rank, e.Training, e.World)
	}
	return fmt.Sprintf("join: rank %d: %d of %d ranks exhausted their inputs; every rank stops (Options.ThrowOnEarlyTermination: shadowing needs it off)",
		e.Rank, e.World-e.Training, e.World)
}

// Context is one running Join, as its Joinables see it.
type Context struct {
	group *dist.Group
	first Joinable
	throw bool
}

// Notify is what a Joinable calls on a rank still training before its
// iteration's collectives. For the first Joinable given to Join it is one
// joined ranks answer; for the others it does nothing. It returns the
// group's error, or with ThrowOnEarlyTermination an
// *EarlyTerminationError once some rank has run out of inputs.
func (c *Context) Notify(ctx context.Context, j Joinable) error {
	if j != c.first {
		return nil
	}
	n, err := c.count(ctx, 1)
	if err == nil && c.throw && n < int64(c.group.Size()) {
		err = &EarlyTerminationError{Rank: c.group.Rank(), Training: int(n), World: c.group.Size()}
	}
	return err
}

// count all-reduces this rank's flag: the number of ranks still training.
func (c *Context) count(ctx context.Context, mine int64) (int64, error) {
	t := tensor.FromInt64([]int64{mine})
	if err := c.group.AllReduce(ctx, t, dist.Sum); err != nil {
		return 0, err
	}
	return t.Int64s()[0], nil
}

// Join runs fn, this rank's training loop over its own data, with the
// Joinables js set to this Join, then, once fn has returned, shadows the
// ranks still training until every rank has joined. Every member of g
// calls it with Joinables of the same kinds in the same order: the order
// in which their collectives run within an iteration (a DDP model before
// the ZeRO optimizer that steps after its backward pass). The first of
// them announces each iteration (Notify).
//
// Every iteration of a rank still training begins with an all-reduce of
// the count of such ranks, which a joined rank answers with zero; while
// the count is not zero, the joined rank then calls every Joinable's
// Shadow in order. When it is zero, every rank has joined and Join
// returns. Averages are still taken over the whole group, the joined
// ranks contributing zeros, as PyTorch's default
// divide_by_initial_world_size.
//
// fn's error is returned as it is, without shadowing (the others will
// then fail naming this rank, or time out); a failure while shadowing is
// returned wrapped, the group's typed error inside.
func Join(ctx context.Context, g *dist.Group, js []Joinable, fn func() error) error {
	return Run(ctx, g, js, Options{}, fn)
}

// Run is Join with options. Every member of g passes the same options.
func Run(ctx context.Context, g *dist.Group, js []Joinable, opts Options, fn func() error) error {
	if len(js) == 0 || opts.Disabled {
		return fn()
	}
	for i, j := range js {
		if j == nil {
			return fmt.Errorf("join: Joinable %d is nil", i)
		}
	}
	c := &Context{group: g, first: js[0], throw: opts.ThrowOnEarlyTermination}
	for _, j := range js {
		j.SetJoin(c)
	}
	defer func() {
		for _, j := range js {
			j.SetJoin(nil)
		}
	}()
	if err := fn(); err != nil {
		return err
	}
	for {
		n, err := c.count(ctx, 0)
		if err != nil {
			return fmt.Errorf("join: rank %d, counting the ranks still training: %w", g.Rank(), err)
		}
		if n == 0 {
			return nil
		}
		if c.throw {
			// The ranks still training learnt it from this count.
			return &EarlyTerminationError{Rank: g.Rank(), Exhausted: true, Training: int(n), World: g.Size()}
		}
		for _, j := range js {
			if err := j.Shadow(ctx); err != nil {
				return fmt.Errorf("join: rank %d, shadowing %d rank(s) still training: %w", g.Rank(), n, err)
			}
		}
	}
}
