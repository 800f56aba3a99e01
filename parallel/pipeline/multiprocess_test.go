package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/pipeline"
	"github.com/godist/godist/parallel/pipeline/schedule"
)

const stageKillEnv = "GODIST_PIPELINE_KILL_WORKER"

// killer is an identity layer that SIGKILLs its process in its forward
// pass of step at, micro-batch micro: a stage that dies mid-pipeline. It
// prints the time of death first.
type killer struct {
	nn.Base
	armed     bool
	at, micro int
	calls     int
	perStep   int
}

func (k *killer) Forward(x *autograd.Var) *autograd.Var {
	if k.armed && k.calls == k.at*k.perStep+k.micro {
		fmt.Printf("DYING at=%d\n", time.Now().UnixNano())
		os.Stdout.Sync()
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	k.calls++
	return x
}

// TestStageDeathFailsEveryRank runs 4 processes as a (pp=2, dp=2) mesh
// training the tiny GPT with 1F1B. Rank 3 (the second stage of the second
// replica) SIGKILLs itself in the forward of step 3's third micro-batch.
// Every survivor's Step fails within 2 s naming rank 3: its pipeline peer
// (rank 1), its data-parallel peer (rank 2) and rank 0, which shares no
// group with it but the world and learns it there.
func TestStageDeathFailsEveryRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes")
	}
	ps := disttest.StartProcs(t, 4, "TestStageKillWorker", "pipeline-kill", stageKillEnv+"=1")
	errs := disttest.WaitProcs(t, ps, 60*time.Second)
	var died int64
	if i := strings.Index(ps[3].Stdout.String(), "DYING at="); i >= 0 {
		died, _ = strconv.ParseInt(strings.Fields(ps[3].Stdout.String()[i+len("DYING at="):])[0], 10, 64)
	}
	var ee *exec.ExitError
	if !errors.As(errs[3], &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL || died == 0 {
		t.Fatalf("rank 3 ended with %v, want SIGKILL after saying when\n%s\n%s", errs[3], ps[3].Stdout.String(), ps[3].Stderr.String())
	}
	for r, p := range ps[:3] {
		out := p.Stdout.String()
		i := strings.Index(out, "STEP-FAILED at=")
		if errs[r] != nil || i < 0 {
			t.Errorf("rank %d: %v\nstdout:\n%s\nstderr:\n%s", r, errs[r], out, p.Stderr.String())
			continue
		}
		f := strings.Fields(out[i+len("STEP-FAILED at="):])
		at, _ := strconv.ParseInt(f[0], 10, 64)
		if ms := float64(at-died) / 1e6; ms > 2000 || ms < 0 {
			t.Errorf("rank %d failed %.0f ms after rank 3 died, want within 2000", r, ms)
		}
		if !strings.Contains(out, "rank 3 is gone") {
			t.Errorf("rank %d's error does not name rank 3:\n%s", r, out)
		}
		t.Logf("rank %d: %.1f ms after the death: %s", r, float64(at-died)/1e6, strings.TrimSpace(out[i:]))
	}
}

// TestStageKillWorker is one process of TestStageDeathFailsEveryRank.
func TestStageKillWorker(t *testing.T) {
	if os.Getenv(stageKillEnv) == "" {
		t.Skip("a worker of TestStageDeathFailsEveryRank")
	}
	if err := stageKillWorker(); err != nil {
		fmt.Fprintf(os.Stderr, "WORKER FAILED (rank %s): %v\n", os.Getenv("RANK"), err)
		os.Exit(3)
	}
	os.Exit(0)
}

func stageKillWorker() error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	g, err := dist.Init(ctx, dist.Options{Rank: -1, Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	defer g.Destroy()
	mesh, err := dist.NewMesh(ctx, g, []int{2, 2}, []string{"pp", "dp"})
	if err != nil {
		return err
	}
	pp, dp := mesh.Group("pp"), mesh.Group("dp")
	const micros = 4
	sched, err := schedule.OneFOneB(2, micros)
	if err != nil {
		return err
	}
	_, layers := gptLayers(nil, 2, true) // a fixed seed: cannot fail
	kill := &killer{armed: g.Rank() == 3, at: 3, micro: 2, perStep: micros}
	layers = append(layers[:2:2], append([]nn.Layer{kill}, layers[2:]...)...) // before block 1, in stage 1
	parts, err := pipeline.Split(layers, []int{2})
	if err != nil {
		return err
	}
	p, err := pipeline.New(pp, sched, []pipeline.Stage{{Index: pp.Rank(), Module: parts[pp.Rank()]}}, pipeline.Options{
		Loss: gptLoss, DataParallel: dp, Watch: []*dist.Group{g},
	})
	if err != nil {
		return err
	}
	for step := range 10 {
		xs, ys := microBatches(uint64(step), micros, 2, 8, 32)
		err := p.Step(ctx, xs, ys)
		if err == nil {
			continue
		}
		at := time.Now().UnixNano()
		// A rank that shares a group with rank 3 names it in a
		// *dist.RankError; one that hears it from a peer that does, in
		// an *dist.AbortError carrying that peer's RankError.
		var re *dist.RankError
		var ae *dist.AbortError
		if !errors.As(err, &re) && !errors.As(err, &ae) {
			return fmt.Errorf("step %d: %T, want a *dist.RankError or *dist.AbortError: %v", step, err, err)
		}
		fmt.Printf("STEP-FAILED at=%d step=%d err=%q\n", at, step, err.Error())
		return nil
	}
	return errors.New("every step succeeded")
}
