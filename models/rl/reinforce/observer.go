package reinforce

import (
	"fmt"

	"github.com/godist/godist/models/rl/cartpole"
)

// Actor is the agent as an observer sees it. *Agent is one; the RPC
// example gives observers one whose methods are remote calls to the
// agent's worker.
type Actor interface {
	// SelectAction returns the action to take in observation obs. It does
	// not keep obs.
	SelectAction(observer int, obs []float64) (int, error)
	// ReportReward reports the reward that followed the last action.
	ReportReward(observer int, reward float64) error
}

var _ Actor = (*Agent)(nil)

// Observer is the tutorial's observer: it owns one CartPole environment
// and runs episodes in it, asking an Actor for every action and reporting
// every reward back.
type Observer struct {
	id  int
	env *cartpole.Env
}

// NewObserver returns observer id with an environment seeded with seed.
// (The tutorial seeds every observer's environment alike; give each its
// own seed to have them start from different states.)
func NewObserver(id int, seed uint64) *Observer {
	return &Observer{id: id, env: cartpole.New(seed)}
}

// ID returns the observer's id, the one it gives the Actor.
func (o *Observer) ID() int { return o.id }

// RunEpisode resets the environment and runs one episode of at most
// maxSteps steps (CartPole-v1 ends one after 500 anyway): for each step it
// asks a for an action, applies it and reports the reward. It returns the
// episode's total reward, or the first error of a, which ends the episode;
// an action that is not valid is an error too.
func (o *Observer) RunEpisode(a Actor, maxSteps int) (float64, error) {
	obs := o.env.Reset()
	total := 0.0
	for range maxSteps {
		action, err := a.SelectAction(o.id, obs[:])
		if err != nil {
			return total, fmt.Errorf("observer %d step %d: %w", o.id, o.env.Steps()+1, err)
		}
		if !cartpole.ValidAction(action) {
			return total, fmt.Errorf("observer %d step %d: the agent chose action %d, not %d or %d",
				o.id, o.env.Steps()+1, action, cartpole.Left, cartpole.Right)
		}
		var reward float64
		var terminated, truncated bool
		obs, reward, terminated, truncated = o.env.Step(action)
		total += reward
		if err := a.ReportReward(o.id, reward); err != nil {
			return total, fmt.Errorf("observer %d step %d: %w", o.id, o.env.Steps(), err)
		}
		if terminated || truncated {
			break
		}
	}
	return total, nil
}
