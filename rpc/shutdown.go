package rpc

import "context"

type shutdownState struct{}

func (a *Agent) onShutdown(src int, msg []byte)    {}
func (a *Agent) shutdownPeerDown(r int, err error) {}

// Shutdown stops the agent.
func (a *Agent) Shutdown(ctx context.Context, graceful bool) error {
	a.mu.Lock()
	if a.mu.closed {
		a.mu.Unlock()
		return nil
	}
	a.mu.closed = true
	pending := a.mu.pending
	a.mu.pending = map[uint64]*call{}
	a.mu.Unlock()
	for _, c := range pending {
		c.complete(nil, ErrShutdown)
	}
	a.detach()
	if a.ownG {
		return a.group.Destroy()
	}
	return nil
}
