package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/pipeline/schedule"
	"github.com/godist/godist/tensor"
)

// Profile measures, in one goroutine, what each stage of a model costs on
// one micro-batch: its forward, its whole backward, and the two halves of
// a split backward (input gradients, weight gradients), each the median
// of reps runs after a warm-up, in seconds. The result is what
// schedule.Simulate needs to predict a schedule's step time on this
// machine (with Costs.Cores set to its cores). input is the first stage's
// micro-batch, target the last stage's; loss as in Options. Gradients the
// runs leave in the parameters are cleared.
func Profile(stages []nn.Layer, input, target *tensor.Tensor, loss func(*autograd.Var, *tensor.Tensor) *autograd.Var, reps int) ([]schedule.StageCosts, error) {
	if len(stages) == 0 || reps < 1 || loss == nil {
		return nil, errors.New("pipeline: Profile needs stages, a loss and at least one repetition")
	}
	costs := make([]schedule.StageCosts, len(stages))
	x := input
	for k, s := range stages {
		last := k == len(stages)-1
		params := nn.Parameters(s)
		run := func() (*autograd.Var, *autograd.Var, time.Duration) {
			in := autograd.Const(x)
			if k > 0 {
				in = autograd.Param(x)
			}
			t0 := time.Now()
			out := nn.Call(s, in)
			if last {
				out = autograd.MulScalar(loss(out, target), 0.5)
			}
			return in, out, time.Since(t0)
		}
		grad := func(out *autograd.Var) *tensor.Tensor {
			if last {
				return nil
			}
			return tensor.Full(out.DType(), 1e-3, out.Shape()...)
		}
		var f, b, bi, bw []time.Duration
		var next *tensor.Tensor
		for i := range reps + 2 {
			_, out, df := run()
			if err := out.Err(); err != nil {
				return nil, fmt.Errorf("pipeline: profiling stage %d: %w", k, err)
			}
			next = out.Value()
			t0 := time.Now()
			if err := out.Backward(grad(out)); err != nil {
				return nil, fmt.Errorf("pipeline: profiling stage %d: %w", k, err)
			}
			db := time.Since(t0)
			_, out, _ = run()
			t0 = time.Now()
			w, err := out.BackwardSplit(grad(out), params)
			if err != nil {
				return nil, fmt.Errorf("pipeline: profiling stage %d: %w", k, err)
			}
			dbi := time.Since(t0)
			t0 = time.Now()
			if err := w.Run(); err != nil {
				return nil, fmt.Errorf("pipeline: profiling stage %d: %w", k, err)
			}
			dbw := time.Since(t0)
			for _, p := range params {
				p.ZeroGrad(true)
			}
			if i >= 2 { // the first two runs warm up
				f, b, bi, bw = append(f, df), append(b, db), append(bi, dbi), append(bw, dbw)
			}
		}
		costs[k] = schedule.StageCosts{Forward: median(f), Backward: median(b), BackwardInput: median(bi), BackwardWeight: median(bw)}
		x = next
	}
	return costs, nil
}

func median(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2].Seconds()
}
