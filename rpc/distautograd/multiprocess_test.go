package distautograd_test

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
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/rpc"
	"github.com/godist/godist/rpc/distautograd"
	"github.com/godist/godist/tensor"
)

const workerEnv = "GODIST_DISTAUTOGRAD_TEST_WORKER"

// suicide is an identity whose backward kills its process: a worker that
// dies in the middle of a distributed backward pass.
type suicide struct{}

func (suicide) Forward(in []*tensor.Tensor) *tensor.Tensor { return in[0] }
func (suicide) Backward(g *tensor.Tensor) []*tensor.Tensor {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// TestMultiProcessDeathDuringBackward runs three worker processes over
// env:// with a job token. Worker0 sends a Var through worker1 to
// worker2, whose part of the backward pass SIGKILLs its own process:
// Backward on worker0 fails within 2 s naming worker2, and neither
// survivor holds a context afterwards.
func TestMultiProcessDeathDuringBackward(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ps := disttest.StartProcs(t, 3, "TestDistAutogradWorker", "distautograd-mp", workerEnv+"=1")
	errs := disttest.WaitProcs(t, ps, 60*time.Second)
	for r, p := range ps {
		out, serr := p.Stdout.String(), p.Stderr.String()
		if r == 2 {
			var ee *exec.ExitError
			if !errors.As(errs[r], &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("rank 2 ended with %v, want SIGKILL\n%s\n%s", errs[r], out, serr)
			}
			continue
		}
		if errs[r] != nil || !strings.Contains(out, "CONTEXTS 0") {
			t.Errorf("rank %d: %v\nstdout:\n%s\nstderr:\n%s", r, errs[r], out, serr)
			continue
		}
		if r == 0 {
			i := strings.Index(out, "BACKWARD-FAILED ms=")
			if i < 0 {
				t.Errorf("rank 0's Backward did not fail:\n%s", out)
				continue
			}
			ms, _ := strconv.Atoi(strings.Fields(out[i+len("BACKWARD-FAILED ms="):])[0])
			if ms > 2000 {
				t.Errorf("Backward failed %d ms after worker2's death began, want < 2000", ms)
			}
		}
		t.Logf("rank %d: %s", r, strings.TrimSpace(out))
	}
}

// TestDistAutogradWorker is one worker of TestMultiProcessDeathDuringBackward.
func TestDistAutogradWorker(t *testing.T) {
	if os.Getenv(workerEnv) == "" {
		t.Skip("a worker of TestMultiProcessDeathDuringBackward")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	reg := rpc.NewRegistry()
	var hop1, hop2 rpc.Fn[*distautograd.Var, *distautograd.Var]
	var err error
	hop2, err = rpc.Register(reg, "hop2", func(_ context.Context, x *distautograd.Var) (*distautograd.Var, error) {
		return distautograd.Wrap(autograd.Apply(suicide{}, autograd.Tanh(x.Var))), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	hop1, err = rpc.Register(reg, "hop1", func(ctx context.Context, x *distautograd.Var) (*distautograd.Var, error) {
		a, _ := rpc.AgentFrom(ctx)
		return hop2.Call(ctx, a, "worker2", distautograd.Wrap(autograd.Square(x.Var)))
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := rpc.Init(ctx, "", rpc.Options{Functions: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Group().Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	switch rank {
	case 0:
		dctx, id, err := distautograd.NewContext(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		x := autograd.Param(tensor.Randn(tensor.NewRNG(3), 2, 2))
		y, err := hop1.Call(dctx, a, "worker1", distautograd.Wrap(x))
		if err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		err = distautograd.Backward(dctx, id, autograd.SumAll(y.Var))
		if err == nil || !strings.Contains(err.Error(), "worker2") {
			t.Fatalf("Backward with worker2 dying in it: %v (want an error naming worker2)", err)
		}
		// begin is before worker2 even started its part: an upper bound.
		fmt.Printf("BACKWARD-FAILED ms=%d err=%q\n", time.Since(begin).Milliseconds(), err)
	case 1:
		// Serves hop1 until worker0's Backward has failed and released
		// the context here.
	case 2:
		select {
		case <-ctx.Done():
		}
		t.Fatal("worker2 was not killed")
	}
	// Neither survivor keeps the context (the lease on worker0 ends it).
	end := time.Now().Add(5 * time.Second)
	for distautograd.NumContexts(a) != 0 && time.Now().Before(end) {
		time.Sleep(5 * time.Millisecond)
	}
	if rank == 1 {
		// Wait until worker0 has had its Backward fail, so the check is
		// after the pass, not before it.
		for a.Group().Err() == nil && time.Now().Before(end) {
			if _, err := hop1.Call(ctx, a, "worker2", distautograd.Wrap(autograd.Const(tensor.New(tensor.Float32, 1)))); err != nil {
				break // worker2 is gone
			}
			time.Sleep(5 * time.Millisecond)
		}
		for distautograd.NumContexts(a) != 0 && time.Now().Before(end) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	fmt.Printf("CONTEXTS %d\n", distautograd.NumContexts(a))
	if err := a.Shutdown(ctx, false); err != nil {
		t.Fatal(err)
	}
}
