package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
)

// TestTrainResume trains two ranks on the shipped subset for two short
// epochs, then resumes a third from the checkpoint, and checks that it
// learns, writes its plot, and agrees across ranks.
func TestTrainResume(t *testing.T) {
	dir, err := data.SubsetDir()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	c := config{model: "mlp", epochs: 2, batch: 64, lr: 0.01, mom: 0.9, dir: dir, maxSteps: 15,
		ckpt: filepath.Join(tmp, "ck.safetensors"), plotPath: filepath.Join(tmp, "plot.png")}
	accs := make([]float64, 2)
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		res, err := train(context.Background(), g, c, io.Discard)
		if err != nil {
			return err
		}
		accs[g.Rank()] = res.TestAcc
		return nil
	})
	if accs[0] < 0.5 {
		t.Fatalf("test accuracy after 30 steps of 2 ranks: %v", accs[0])
	}
	if st, err := os.Stat(c.plotPath); err != nil || st.Size() == 0 {
		t.Fatalf("plot: %v", err)
	}
	c.epochs, c.resume = 3, true
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		res, err := train(context.Background(), g, c, io.Discard)
		if err != nil {
			return err
		}
		if len(res.EpochAcc) != 3 {
			t.Errorf("rank %d: %d epochs of history after resuming, want 3", g.Rank(), len(res.EpochAcc))
		}
		return nil
	})
}

// TestTrainLSTM trains the LSTM classifier on two ranks for two epochs of
// the shipped subset and checks that it learns.
func TestTrainLSTM(t *testing.T) {
	dir, err := data.SubsetDir()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	c := config{model: "lstm", epochs: 2, batch: 64, lr: 0.05, mom: 0.9, dir: dir,
		ckpt: filepath.Join(tmp, "ck.safetensors")}
	res := make([]*result, 2)
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		r, err := train(context.Background(), g, c, io.Discard)
		res[g.Rank()] = r
		return err
	})
	t.Logf("two epochs of 2 ranks: loss %.4f, test accuracy %.4f", res[0].LastLoss, res[0].TestAcc)
	if res[0].TestAcc < 0.3 {
		t.Fatalf("test accuracy two epochs of 2 ranks: %v", res[0].TestAcc)
	}
}

// --checkpoint "" means no checkpoint, as in tinygpt (issue 27, item 10):
// training ends without error and writes no file, with --resume too.
func TestNoCheckpoint(t *testing.T) {
	dir, err := data.SubsetDir()
	if err != nil {
		t.Fatal(err)
	}
	wd := t.TempDir()
	t.Chdir(wd) // where a checkpoint named "" would have gone
	c := config{model: "mlp", epochs: 1, batch: 64, lr: 0.01, mom: 0.9, dir: dir, maxSteps: 3, ckpt: "", resume: true}
	var logs [2]strings.Builder
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		_, err := train(context.Background(), g, c, &logs[g.Rank()])
		return err
	})
	if ents, _ := os.ReadDir(wd); len(ents) != 0 {
		t.Fatalf("training without a checkpoint left %v in its directory", ents)
	}
	if !strings.Contains(logs[0].String(), "no checkpoint") {
		t.Errorf("--resume without a checkpoint: rank 0 said %q", logs[0].String())
	}
}

// TestTargetAccuracy trains two ranks with a compressing hook until a
// test accuracy: both stop at the same step, a multiple of eval-every,
// and say when; a target never met trains the epochs out.
func TestTargetAccuracy(t *testing.T) {
	dir, err := data.SubsetDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct {
		target float64
		hook   string
		reach  bool
	}{{0.5, "fp16", true}, {0.9999, "powersgd:2", false}} {
		c := config{model: "mlp", epochs: 2, batch: 64, lr: 0.01, mom: 0.9, dir: dir, maxSteps: 40,
			commHook: v.hook, targetAcc: v.target, evalEvery: 10}
		var res [2]*result
		disttest.Spawn(t, 2, func(g *dist.Group) error {
			r, err := train(context.Background(), g, c, io.Discard)
			res[g.Rank()] = r
			return err
		})
		r := res[0]
		if r.Reached != v.reach || res[1].Reached != v.reach || res[1].TargetSteps != r.TargetSteps {
			t.Fatalf("target %g with %s: rank 0 %+v, rank 1 %+v; want reached %v on both, at the same step", v.target, v.hook, r, res[1], v.reach)
		}
		if v.reach && (r.TargetSteps%10 != 0 || r.TargetSteps == 0 || r.TargetS <= 0 || r.TestAcc < v.target) {
			t.Errorf("target %g: reached at step %d after %.3f s with accuracy %.4f", v.target, r.TargetSteps, r.TargetS, r.TestAcc)
		}
		if !v.reach && len(r.EpochAcc) != 2 {
			t.Errorf("target %g never met: %d epochs trained, want 2", v.target, len(r.EpochAcc))
		}
	}
}

func TestCommHookNames(t *testing.T) {
	for _, ok := range []string{"", "allreduce", "fp16", "bf16", "powersgd", "powersgd:4"} {
		if _, err := commHook(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"fp32", "powersgd:0", "powersgd:x"} {
		if _, err := commHook(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
