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

// WarmupCosine is a linear warm-up followed by a cosine decay to a floor,
// stepped once per optimizer step. It is PyTorch's LambdaLR with the
// lambda of HuggingFace's get_cosine_with_min_lr_schedule_with_warmup
// (num_cycles 0.5, min_lr_rate MinRatio), except that the rate stays at
// the floor after Total steps instead of rising again. Each group's rate
// after Step has been called n times is its base rate (its rate when the
// scheduler was made) times Factor(n):
//
//	n < Warmup:  n / Warmup
//	otherwise:   MinRatio + (1-MinRatio) * 0.5 * (1 + cos(pi * p)),
//	             p = min(1, (n-Warmup) / max(1, Total-Warmup))
//
// So the first optimizer step, taken before any Step, runs at rate 0 when
// Warmup > 0 (as with HuggingFace's schedule), the rate reaches the base
// at n = Warmup and the floor, base*MinRatio, at n = Total.
// testdata/parity/make_optim_parity.py holds the same lambda.
type WarmupCosine struct {
	lrs           baseLRs
	Warmup, Total int
	MinRatio      float64
	epoch         int
}

// NewWarmupCosine returns the schedule for opt, taking opt's current rates
// as the base rates, and sets the rates for step 0 at once (zero when
// warmup > 0), as LambdaLR's constructor does. Call Step after each
// optimizer step. It panics unless 0 <= warmup <= total and 0 <= minRatio
// <= 1. To resume from a checkpoint, make the scheduler before loading the
// optimizer's state (which holds the scheduled rates, not the base ones)
// and then call SetEpoch with the number of steps taken.
func NewWarmupCosine(opt Optimizer, warmup, total int, minRatio float64) *WarmupCosine {
	if warmup < 0 || total < warmup || !(minRatio >= 0 && minRatio <= 1) {
		panic(fmt.Sprintf("optim: WarmupCosine with warmup %d, total %d, min ratio %g (want 0 <= warmup <= total, 0 <= ratio <= 1)", warmup, total, minRatio))
	}
	s := &WarmupCosine{lrs: newBaseLRs(opt), Warmup: warmup, Total: total, MinRatio: minRatio}
	s.lrs.scale(s.Factor(0))
	return s
}

// Factor returns the multiplier of the base rates after n calls of Step.
func (s *WarmupCosine) Factor(n int) float64 {
	if n < s.Warmup {
		return float64(n) / float64(max(1, s.Warmup))
	}
	p := min(1, float64(n-s.Warmup)/float64(max(1, s.Total-s.Warmup)))
	return s.MinRatio + (1-s.MinRatio)*0.5*(1+math.Cos(math.Pi*p))
}

// Step advances one step and sets the learning rates.
func (s *WarmupCosine) Step() {
	s.epoch++
	s.lrs.scale(s.Factor(s.epoch))
}

// Epoch returns the number of Step calls so far (PyTorch's last_epoch).
func (s *WarmupCosine) Epoch() int { return s.epoch }

// SetEpoch sets the number of steps taken to n and the rates to match, for
// resuming.
func (s *WarmupCosine) SetEpoch(n int) {
	s.epoch = n
	s.lrs.scale(s.Factor(n))
}
