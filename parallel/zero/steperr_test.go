package zero_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/zero"
	"github.com/godist/godist/tensor"
)

// Step, whose signature optim.Optimizer fixes, does not lose its error
// (issue 27, item 10): it says it on stderr once, keeps it for Err, and
// every later StepContext and optim.Step returns it; optim.Step returns
// StepContext's error for a ZeRO and steps a plain optimizer.
func TestStepErrorIsNotLost(t *testing.T) {
	var out bytes.Buffer
	defer zero.SetStderr(&out)()
	disttest.Spawn(t, 1, func(g *dist.Group) error {
		ctx := context.Background()
		ps := newParams(1)
		// OverlapWithDDP without ddp.HookWithZeroStep as the model's hook: a
		// step that the hook did not take is an error.
		z, err := zero.New(ps, optimizers[0].make, g, zero.Options{OverlapWithDDP: true})
		if err != nil {
			return err
		}
		setGrads(ps, 0)
		z.Step()
		first := z.Err()
		if first == nil {
			return errors.New("Step without the hook: Err is nil")
		}
		if !strings.Contains(out.String(), "zero: rank 0: Step failed") || !strings.Contains(out.String(), first.Error()) {
			return fmt.Errorf("Step failed without saying so on stderr: %q", out.String())
		}
		z.Step()
		if n := strings.Count(out.String(), "Step failed"); n != 1 {
			return fmt.Errorf("Step said its failure %d times, want once", n)
		}
		if err := z.StepContext(ctx); err != first {
			return fmt.Errorf("StepContext after a failed Step: %v, want Step's error %v", err, first)
		}
		if err := optim.Step(ctx, z); err != first {
			return fmt.Errorf("optim.Step after a failed Step: %v, want Step's error %v", err, first)
		}

		// optim.Step of a ZeRO is its StepContext; of a plain optimizer,
		// its Step.
		z2, err := zero.New(newParams(2), optimizers[0].make, g, zero.Options{OverlapWithDDP: true})
		if err != nil {
			return err
		}
		if err := optim.Step(ctx, z2); err == nil || !strings.Contains(err.Error(), "HookWithZeroStep") {
			return fmt.Errorf("optim.Step of a ZeRO whose hook did not step: %v", err)
		}
		if z2.Err() != nil {
			return fmt.Errorf("StepContext's error was kept for Err: %v", z2.Err())
		}
		p := autograd.Param(tensor.FromFloat32([]float32{1}, 1))
		p.SetGrad(tensor.FromFloat32([]float32{1}, 1))
		if err := optim.Step(ctx, optim.NewSGD([]*autograd.Var{p}, optim.SGDOptions{LR: 0.5})); err != nil || p.Value().At(0) != 0.5 {
			return fmt.Errorf("optim.Step of SGD: %v, parameter %v", err, p.Value().At(0))
		}
		return nil
	})
}
