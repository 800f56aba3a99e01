// Package cartpole is gym's CartPole-v1 environment: a pole hinged on a
// cart that moves along a track, balanced by pushing the cart left or
// right.
//
//	env := cartpole.New(seed)
//	obs := env.Reset()
//	for {
//		obs, reward, terminated, truncated := env.Step(action(obs))
//		total += reward
//		if terminated || truncated {
//			break
//		}
//	}
//
// The dynamics are gym's, step for step: the same constants, the same
// explicit-Euler update (kinematics_integrator = "euler"), the same
// termination tests (|x| > 2.4 or |θ| > 12°), a reward of 1 for every step
// including the one that ends the episode, and the TimeLimit of 500 steps
// that registers CartPole-v1, reported as truncation. The tests check the
// transitions against testdata/ref.json, written by a transcription of
// gym's step equations in plain Python (testdata/make_ref.py).
//
// One thing differs on purpose: Reset draws the four state variables
// uniformly from [-0.05, 0.05) with this package's own seeded generator,
// not numpy's. The distribution is gym's; the numbers for a given seed are
// not.
//
// An Env is not safe for concurrent use; an observer owns its own.
package cartpole
