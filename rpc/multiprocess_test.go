package rpc_test

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

	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/rpc"
)

const workerEnv = "GODIST_RPC_TEST_WORKER"

// TestMultiProcess runs three workers as processes over env:// with a job
// token: every worker calls every other (and itself), then worker2 is
// SIGKILLed while worker0 and worker1 wait on calls to it; both must
// fail naming it within 2 s, and then shut down.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ps := disttest.StartProcs(t, 3, "TestRPCWorker", "rpc-mp", workerEnv+"=1")
	errs := disttest.WaitProcs(t, ps, 60*time.Second)
	for r, p := range ps {
		out, serr := p.Stdout.String(), p.Stderr.String()
		if strings.Contains(serr, "panic") {
			t.Errorf("rank %d panicked:\n%s", r, serr)
		}
		if r == 2 {
			var ee *exec.ExitError
			if !errors.As(errs[r], &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("rank 2 ended with %v, want SIGKILL\n%s\n%s", errs[r], out, serr)
			}
			continue
		}
		if errs[r] != nil {
			t.Errorf("rank %d: %v\nstdout:\n%s\nstderr:\n%s", r, errs[r], out, serr)
			continue
		}
		i := strings.Index(out, "DOWN worker2 ms=")
		if i < 0 {
			t.Errorf("rank %d did not see worker2 die:\n%s\n%s", r, out, serr)
			continue
		}
		ms, _ := strconv.Atoi(strings.Fields(out[i+len("DOWN worker2 ms="):])[0])
		if ms > 2000 {
			t.Errorf("rank %d: the pending call failed %d ms after the kill, want < 2000", r, ms)
		}
		t.Logf("rank %d: %s", r, strings.TrimSpace(out))
	}
}

// TestMultiProcessGraceful runs jobs of three worker processes that call
// each other and then shut down gracefully, each leaving the job it joined
// (its connections close as it returns): every worker's Shutdown must
// return nil, whichever leaves first.
func TestMultiProcessGraceful(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for run := range 5 {
		ps := disttest.StartProcs(t, 3, "TestRPCWorker", fmt.Sprintf("rpc-graceful-%d", run), workerEnv+"=graceful")
		errs := disttest.WaitProcs(t, ps, 60*time.Second)
		for r, p := range ps {
			if errs[r] != nil || !strings.Contains(p.Stdout.String(), "GRACEFUL OK") {
				t.Fatalf("run %d, rank %d: %v\nstdout:\n%s\nstderr:\n%s", run, r, errs[r], p.Stdout.String(), p.Stderr.String())
			}
		}
	}
}

// TestMultiProcessShutdownPeerGone is issue 27's report, with processes:
// worker2 is SIGKILLed, or SIGSTOPped, and 300 ms later worker0 and
// worker1 call a graceful Shutdown with a ctx that never ends. Both must
// fail naming worker2: at once when it is dead, after Options.Timeout
// (1 s) when it is stopped.
func TestMultiProcessShutdownPeerGone(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, how := range []string{"killed", "stopped"} {
		t.Run(how, func(t *testing.T) {
			ps := disttest.StartProcs(t, 3, "TestRPCWorker", "rpc-gone-"+how, workerEnv+"=shutdown-"+how)
			defer ps[2].Cmd.Process.Kill() // a stopped worker2 never ends by itself
			errs := disttest.WaitProcs(t, ps[:2], 60*time.Second)
			ps[2].Cmd.Process.Kill()
			disttest.WaitProcs(t, ps[2:], 10*time.Second)
			for r, p := range ps[:2] {
				out := p.Stdout.String()
				if errs[r] != nil || !strings.Contains(out, "SHUTDOWN FAILED worker2") {
					t.Errorf("rank %d: %v\nstdout:\n%s\nstderr:\n%s", r, errs[r], out, p.Stderr.String())
					continue
				}
				t.Logf("rank %d: %s", r, strings.TrimSpace(out))
			}
		})
	}
}

// TestRPCWorker is one worker of TestMultiProcess,
// TestMultiProcessGraceful and TestMultiProcessShutdownPeerGone.
func TestRPCWorker(t *testing.T) {
	if os.Getenv(workerEnv) == "" {
		t.Skip("a worker of TestMultiProcess")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	self := fmt.Sprintf("worker%d", rank)
	reg := rpc.NewRegistry()
	f := register(t, reg, &self)
	killed := make(chan time.Time, 1)
	die, err := rpc.Register(reg, "die", func(context.Context, struct{}) (int, error) {
		// Die while the callers wait: they learn it from the connection.
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	})
	if err != nil {
		t.Fatal(err)
	}
	mode := os.Getenv(workerEnv)
	opt := rpc.Options{Functions: reg}
	if strings.HasPrefix(mode, "shutdown-") {
		opt.Timeout = time.Second
	}
	a, err := rpc.Init(ctx, "", opt)
	if err != nil {
		t.Fatal(err)
	}
	for to := range 3 {
		name := fmt.Sprintf("worker%d", to)
		if got, err := f.whoami.Call(ctx, a, name, struct{}{}); err != nil || got != name {
			t.Fatalf("whoami on %s: %q %v", name, got, err)
		}
		if got, err := f.add.Call(ctx, a, name, addArgs{rank, to}); err != nil || got != rank+to {
			t.Fatalf("add on %s: %d %v", name, got, err)
		}
	}
	if mode == "graceful" {
		// Some work still in flight when the first worker shuts down.
		if rank == 1 {
			for i := range 20 {
				if _, err := f.slowAdd.Call(ctx, a, "worker2", addArgs{i, i}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := a.Shutdown(ctx, true); err != nil {
			t.Fatal(err)
		}
		fmt.Println("GRACEFUL OK")
		return
	}
	// Everyone has called everyone: a barrier, so that no worker dies
	// before the others are done with it.
	if err := a.Group().Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if how, ok := strings.CutPrefix(mode, "shutdown-"); ok {
		if rank == 2 {
			sig := syscall.SIGKILL
			if how == "stopped" {
				sig = syscall.SIGSTOP
			}
			syscall.Kill(os.Getpid(), sig)
			select {}
		}
		time.Sleep(300 * time.Millisecond)
		begin := time.Now()
		err := a.Shutdown(context.Background(), true)
		var se *rpc.ShutdownError
		if !errors.As(err, &se) || se.Worker != "worker2" || se.Rank != 2 {
			t.Fatalf("graceful shutdown with worker2 %s: %v", how, err)
		}
		fmt.Printf("SHUTDOWN FAILED %s ms=%d err=%q\n", se.Worker, time.Since(begin).Milliseconds(), err)
		return
	}
	switch rank {
	case 0:
		wait := f.sleep.Go(ctx, a, "worker2", time.Hour)
		time.Sleep(50 * time.Millisecond)
		_, err := die.Call(ctx, a, "worker2", struct{}{})
		begin := time.Now()
		var wd *rpc.WorkerDownError
		if !errors.As(err, &wd) || wd.Worker != "worker2" {
			t.Fatalf("the call that killed worker2: %v", err)
		}
		_, err = wait.Wait(ctx)
		if !errors.As(err, &wd) || wd.Worker != "worker2" {
			t.Fatalf("a call pending on worker2 when it died: %v", err)
		}
		fmt.Printf("DOWN worker2 ms=%d err=%q\n", time.Since(begin).Milliseconds(), err)
	case 1:
		begin := time.Now()
		_, err := f.sleep.Call(ctx, a, "worker2", time.Hour)
		var wd *rpc.WorkerDownError
		if !errors.As(err, &wd) || wd.Worker != "worker2" {
			t.Fatalf("a call pending on worker2 when it died: %v", err)
		}
		// begin is before the kill: an upper bound of the detection time.
		fmt.Printf("DOWN worker2 ms=%d err=%q\n", time.Since(begin).Milliseconds()-50, err)
	case 2:
		select {
		case <-killed:
		case <-ctx.Done():
		}
		t.Fatal("worker2 was not killed")
	}
	if err := a.Shutdown(ctx, false); err != nil {
		t.Fatal(err)
	}
}
