package rpc

import "context"

// Run is a worker's life in the RPC framework, the tutorials' init_rpc,
// work, shutdown: it starts an agent (Init with name and opt), calls fn
// with it, and then shuts the agent down gracefully, so that a worker
// whose fn returns at once (a parameter server, an observer) keeps
// serving the others until every worker is done. It returns fn's error,
// or else Init's or Shutdown's.
//
//	err := rpc.Run(ctx, name, rpc.Options{Group: g, Functions: reg}, func(ctx context.Context, a *rpc.Agent) error {
//		if g.Rank() == 0 {
//			return train(ctx, a)
//		}
//		return nil // served until the trainer is done
//	})
func Run(ctx context.Context, name string, opt Options, fn func(context.Context, *Agent) error) error {
	a, err := Init(ctx, name, opt)
	if err != nil {
		return err
	}
	err = fn(ctx, a)
	if serr := a.Shutdown(ctx, true); err == nil {
		err = serr
	}
	return err
}
