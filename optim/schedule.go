package optim

import (
	"fmt"
	"math"
)

// baseLRs are an optimizer's learning rates when a scheduler was made, one
// a group: the scheduler sets group g's rate to base[g] times its factor,
// as PyTorch's LambdaLR and StepLR keep base_lrs.
type baseLRs struct {
	opt  Optimizer
	base []float64
}

func newBaseLRs(opt Optimizer) baseLRs {
	b := baseLRs{opt: opt}
	if g, ok := opt.(Groups); ok {
		for i := range g.NumGroups() {
			b.base = append(b.base, g.GroupLR(i))
		}
	} else {
		b.base = []float64{opt.LR()}
	}
	return b
}

// scale sets each group's rate to its base times f.
func (b baseLRs) scale(f float64) {
	g, ok := b.opt.(Groups)
	if !ok {
		b.opt.SetLR(b.base[0] * f)
		return
	}
	for i, lr := range b.base {
		g.SetGroupLR(i, lr*f)
	}
}

// StepLR multiplies the learning rate by Gamma every StepSize calls of
// Step (epochs), as torch.optim.lr_scheduler.StepLR: each group's rate is
// its rate when the scheduler was made times Gamma^(epoch/StepSize).
type StepLR struct {
	lrs      baseLRs
	StepSize int
	Gamma    float64
	epoch    int
}

// NewStepLR returns a scheduler for opt starting from its current rates.
func NewStepLR(opt Optimizer, stepSize int, gamma float64) *StepLR {
	if stepSize <= 0 {
		panic(fmt.Sprintf("optim: StepLR step size %d", stepSize))
	}
	return &StepLR{lrs: newBaseLRs(opt), StepSize: stepSize, Gamma: gamma}
}

// Step advances one epoch and sets the learning rates.
func (s *StepLR) Step() {
	s.epoch++
	s.lrs.scale(math.Pow(s.Gamma, float64(s.epoch/s.StepSize)))
}

// Epoch returns the number of Step calls so far.
func (s *StepLR) Epoch() int { return s.epoch }
