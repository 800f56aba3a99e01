package ddp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/tensor"
)

// tripwire is an identity layer whose backward runs trip once, at the
// given step: it makes a rank die in the middle of its backward pass.
type tripwire struct {
	nn.Base
	at, step int
	trip     func()
}

func (w *tripwire) Forward(x *autograd.Var) *autograd.Var {
	w.step++
	return autograd.Apply(&tripFn{w: w, step: w.step}, x)
}

type tripFn struct {
	w    *tripwire
	step int
}

func (f *tripFn) Forward(in []*tensor.Tensor) *tensor.Tensor { return in[0] }
func (f *tripFn) Backward(g *tensor.Tensor) []*tensor.Tensor {
	if f.step == f.w.at && f.w.trip != nil {
		f.w.trip()
	}
	return []*tensor.Tensor{g}
}

// syncBNNet is a small model with a SyncBatchNorm between two Linears and
// a tripwire after it, so that a death there comes before SyncBatchNorm's
// backward all-reduce.
func syncBNNet(g *dist.Group, wire *tripwire) *nn.Sequential {
	rng := tensor.NewRNG(uint64(g.Rank()))
	return nn.NewSequential(nn.NewLinear(rng, 6, 8, true), ddp.NewSyncBatchNorm(8, g), wire, nn.NewTanh(), nn.NewLinear(rng, 8, 3, true))
}

// wantDead checks that err is the given rank's death, as a typed
// *dist.RankError.
func wantDead(err error, rank int, what string) error {
	var re *dist.RankError
	if !errors.As(err, &re) || re.Rank != rank {
		return fmt.Errorf("%s: %v, want a *dist.RankError naming rank %d", what, err, rank)
	}
	return nil
}

// TestPeerDeathIsAnErrorNotAPanic kills one rank of 3 at each place where
// DDP or SyncBatchNorm talks to the group: in the middle of backward (the
// buckets' all-reduce), before SyncBatchNorm's backward all-reduce, before
// SyncBatchNorm's forward statistics, before DDP's bucket rebuild and
// before its buffer broadcast in forward (rank 0, the root, dies there: a
// broadcast from 0 to 2 does not need rank 1). The victim dies once both
// survivors have reached that place, so the call that fails is known.
// Every survivor's Backward must return the death as an error naming the
// victim and that call, within 2 s; nothing may panic (disttest turns a
// panic into a failure).
func TestPeerDeathIsAnErrorNotAPanic(t *testing.T) {
	cases := []struct {
		name   string
		syncBN bool
		opt    ddp.Options
		// where rank 1 dies at step 2: "backward" (in its tripwire, once
		// the survivors are past theirs) or "forward" (before its forward
		// pass, once the survivors have finished step 1).
		where  string
		victim int
		says   string // what the survivors' error says failed
	}{
		{"buckets mid-backward", false, ddp.Options{}, "backward", 1, "ddp: reduce bucket"},
		{"SyncBatchNorm backward", true, ddp.Options{}, "backward", 1, "SyncBatchNorm backward"},
		{"SyncBatchNorm forward", true, ddp.Options{NoBroadcastBuffers: true, NoRebuildBuckets: true}, "forward", 1, "SyncBatchNorm statistics"},
		{"buffer broadcast in forward", true, ddp.Options{NoRebuildBuckets: true}, "forward", 0, "ddp: broadcast buffer"},
		{"bucket rebuild in forward", false, ddp.Options{}, "forward", 0, "ddp: share the rebuilt bucket order"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var survivors sync.WaitGroup // both survivors are where rank 1 will die
			survivors.Add(2)
			disttest.SpawnWith(t, 3, disttest.Options{Timeout: 20 * time.Second}, func(j *disttest.Job, g *dist.Group) error {
				ctx := context.Background()
				wire := &tripwire{at: 2}
				var net nn.Layer
				if tc.syncBN {
					net = syncBNNet(g, wire)
				} else {
					rng := tensor.NewRNG(uint64(g.Rank()))
					net = nn.NewSequential(nn.NewLinear(rng, 6, 16, true), wire, nn.NewTanh(), nn.NewLinear(rng, 16, 3, true))
				}
				dead := false
				victim := g.Rank() == tc.victim
				if tc.where == "backward" {
					if victim {
						wire.trip = func() { survivors.Wait(); j.Kill(g.Rank()); dead = true }
					} else {
						wire.trip = survivors.Done
					}
				}
				m, err := ddp.New(ctx, net, g, tc.opt)
				if err != nil {
					return err
				}
				for step := 1; step <= 3; step++ {
					if victim && tc.where == "forward" && step == 2 {
						survivors.Wait()
						j.Kill(g.Rank())
						return nil
					}
					x, y := batch(g.Rank(), step, 4)
					start := time.Now()
					err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y))
					if dead {
						return nil // the victim itself: its own endpoint is gone
					}
					if step < 2 {
						if err != nil {
							return fmt.Errorf("step %d: %v", step, err)
						}
						if tc.where == "forward" && !victim {
							survivors.Done()
						}
						continue
					}
					if err := wantDead(err, tc.victim, fmt.Sprintf("step %d Backward", step)); err != nil {
						return err
					}
					if !strings.Contains(err.Error(), tc.says) {
						return fmt.Errorf("step %d Backward: %v, want it to say %q", step, err, tc.says)
					}
					if d := time.Since(start); d > 2*time.Second {
						return fmt.Errorf("the error took %v", d)
					}
					// The model stays failed: the next iteration says so
					// at once, from Forward's deferred error.
					x, y = batch(g.Rank(), step+1, 4)
					err = m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y))
					return wantDead(err, tc.victim, "the step after")
				}
				return errors.New("no step failed")
			})
		})
	}
}

// TestWaitReportsGroupFailureAfterIgnoredBackwardError: a caller that
// ignores loss.Backward's error (SyncBatchNorm's backward failed, so some
// gradients never became ready) gets the group's failure from Wait, not a
// misleading unused-parameter error.
func TestWaitReportsGroupFailureAfterIgnoredBackwardError(t *testing.T) {
	disttest.SpawnWith(t, 3, disttest.Options{Timeout: 20 * time.Second}, func(j *disttest.Job, g *dist.Group) error {
		ctx := context.Background()
		wire := &tripwire{at: 1}
		if g.Rank() == 1 {
			wire.trip = func() { j.Kill(1) }
		}
		m, err := ddp.New(ctx, syncBNNet(g, wire), g, ddp.Options{})
		if err != nil {
			return err
		}
		x, y := batch(g.Rank(), 0, 4)
		loss := nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y)
		_ = loss.Backward(nil)
		err = m.Wait(ctx)
		if g.Rank() == 1 {
			return nil
		}
		return wantDead(err, 1, "Wait")
	})
}
