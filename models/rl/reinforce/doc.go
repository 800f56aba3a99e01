// Package reinforce is the learning side of PyTorch's "Getting Started
// with Distributed RPC Framework" tutorial: REINFORCE on CartPole-v1 with
// one agent and several observers.
//
// The Agent holds the policy network and the optimizer; an Observer holds
// a cartpole.Env and runs episodes, asking the agent for each action and
// reporting each reward through the small Actor interface. Nothing here
// sends a message: run in one process, the agent runs its observers one
// after another,
//
//	agent := reinforce.NewAgent(reinforce.Options{Seed: 543})
//	observers := []*reinforce.Observer{reinforce.NewObserver(1, 1), reinforce.NewObserver(2, 2)}
//	for !agent.Solved() {
//		for _, o := range observers {
//			if _, err := o.RunEpisode(agent, 5000/len(observers)); err != nil {
//				return err
//			}
//		}
//		ep, err := agent.FinishEpisode()
//		...
//	}
//
// and in the RPC example the observers live on other workers and their
// Actor is a stub whose calls go to the agent's worker.
package reinforce
