package cartpole

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Gym's CartPole-v1 constants.
const (
	Gravity  = 9.8
	MassCart = 1.0
	MassPole = 0.1
	// Length is half the pole's length, as gym's "length".
	Length   = 0.5
	ForceMag = 10.0
	// Tau is the time step in seconds.
	Tau = 0.02

	// ThetaThreshold is the pole angle, in radians (12°), beyond which the
	// episode terminates: gym's 12*2*math.pi/360 evaluated in float64 from
	// left to right. (Go's exact constant arithmetic would give the next
	// float64 up.)
	ThetaThreshold = 0.20943951023931953
	// XThreshold is the cart position beyond which the episode terminates.
	XThreshold = 2.4
	// MaxEpisodeSteps is CartPole-v1's TimeLimit: the step with this number
	// reports truncated.
	MaxEpisodeSteps = 500
	// RewardThreshold is CartPole-v1's reward_threshold: an agent whose
	// average episode reward exceeds it has solved the task.
	RewardThreshold = 475.0

	// ResetBound bounds the state Reset draws: each variable is uniform in
	// [-ResetBound, ResetBound).
	ResetBound = 0.05

	totalMass      = MassPole + MassCart
	poleMassLength = MassPole * Length
)

// The two actions.
const (
	Left  = 0 // push the cart with -ForceMag
	Right = 1 // push the cart with +ForceMag
)

// NumActions is the size of the action space.
const NumActions = 2

// Obs is an observation: the cart's position and velocity, the pole's angle
// from vertical (radians) and its angular velocity, in gym's order. Gym
// hands out a float32 copy of its float64 state; Obs is the float64 state
// itself.
type Obs [4]float64

// Env is one CartPole-v1 environment with its own random generator.
type Env struct {
	rng   *rand.Rand
	state Obs
	steps int  // steps taken in this episode
	reset bool // Reset has been called
	done  bool // the last step terminated or truncated
}

// New returns an environment whose resets are drawn from a generator
// seeded with seed. Call Reset before the first Step.
func New(seed uint64) *Env {
	return &Env{rng: rand.New(rand.NewPCG(seed, 0x63617274706f6c65))}
}

// Reset starts an episode from a state drawn uniformly from
// [-ResetBound, ResetBound)⁴ and returns it.
func (e *Env) Reset() Obs {
	for i := range e.state {
		e.state[i] = -ResetBound + 2*ResetBound*e.rng.Float64()
	}
	e.steps, e.reset, e.done = 0, true, false
	return e.state
}

// State returns the current state (the last observation).
func (e *Env) State() Obs { return e.state }

// Steps returns the number of steps taken since the last Reset.
func (e *Env) Steps() int { return e.steps }

// Done reports whether the episode has ended (terminated or truncated), so
// that Step may not be called before the next Reset.
func (e *Env) Done() bool { return e.done }

// ValidAction reports whether a is an action Step accepts (Left or Right).
// Code that receives actions from elsewhere (over RPC) checks them with it.
func ValidAction(a int) bool { return a == Left || a == Right }

// Step pushes the cart (Left or Right), advances the simulation by Tau and
// returns the new observation, the reward (1 for every step, including the
// one that terminates), whether the pole fell or the cart left the track
// (terminated) and whether this was step MaxEpisodeSteps (truncated). Both
// can be true on step MaxEpisodeSteps.
//
// Step panics, as for other programmer errors, if action is not valid,
// before the first Reset, and once the episode has ended: gym would go on
// stepping with reward 0 and a warning, but an episode that has ended must
// be Reset.
func (e *Env) Step(action int) (obs Obs, reward float64, terminated, truncated bool) {
	switch {
	case !ValidAction(action):
		panic(fmt.Sprintf("cartpole: action %d is not %d (left) or %d (right)", action, Left, Right))
	case !e.reset:
		panic("cartpole: Step before Reset")
	case e.done:
		panic(fmt.Sprintf("cartpole: Step after the episode ended at step %d; call Reset", e.steps))
	}
	e.state = next(e.state, action)
	e.steps++
	terminated = outside(e.state)
	truncated = e.steps >= MaxEpisodeSteps
	e.done = terminated || truncated
	return e.state, 1, terminated, truncated
}

// next is gym's CartPole step with euler kinematics. The floating-point
// operations are gym's, in gym's order; the float64 conversions round each
// product before it is added, so that no platform fuses them into a
// multiply-add (which the Go spec allows otherwise).
func next(s Obs, action int) Obs {
	x, xDot, theta, thetaDot := s[0], s[1], s[2], s[3]
	force := -ForceMag
	if action == Right {
		force = ForceMag
	}
	cos, sin := math.Cos(theta), math.Sin(theta)
	temp := (force + float64(poleMassLength*(thetaDot*thetaDot)*sin)) / totalMass
	thetaAcc := (float64(Gravity*sin) - float64(cos*temp)) / (Length * (4.0/3.0 - MassPole*(cos*cos)/totalMass))
	xAcc := temp - poleMassLength*thetaAcc*cos/totalMass
	x += float64(Tau * xDot)
	xDot += float64(Tau * xAcc)
	theta += float64(Tau * thetaDot)
	thetaDot += float64(Tau * thetaAcc)
	return Obs{x, xDot, theta, thetaDot}
}

// outside reports whether s is beyond the termination thresholds.
func outside(s Obs) bool {
	x, theta := s[0], s[2]
	return x < -XThreshold || x > XThreshold || theta < -ThetaThreshold || theta > ThetaThreshold
}
