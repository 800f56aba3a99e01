package dcp_test

// A real two-process job: the test binary re-executes itself as two
// workers (TestKillDuringSaveWorker with GODIST_DCP_KILL set) that meet
// through env:// over loopback TCP. They commit checkpoint 1, then start
// an AsyncSave of checkpoint 2, and rank 1 SIGKILLs itself the moment
// AsyncSave returns, with the save in flight. The directory must still
// hold one whole checkpoint, loadable and consistent (checkpoint 1 when
// the save could not commit without rank 1, as it cannot here; never a
// mixture, never a corrupt one), and rank 0's save must fail naming rank 1
// or have committed.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godist/godist/checkpoint/dcp"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
)

const killDirEnv = "GODIST_DCP_KILL"

// killElems is each rank's piece: 16 MiB, long enough to write that the
// kill lands while the save is in flight.
const killElems = 4 << 20

func killState(rank int, value float32) dcp.State {
	t := tensor.Full(tensor.Float32, float64(value), killElems)
	return dcp.State{"w": dcp.Flat([]int{2 * killElems}, rank*killElems, t)}
}

func TestKillDuringSaveWorker(t *testing.T) {
	dir := os.Getenv(killDirEnv)
	if dir == "" {
		t.Skip("worker of TestKillDuringAsyncSave")
	}
	if err := killWorker(dir); err != nil {
		fmt.Fprintf(os.Stderr, "WORKER FAILED (rank %s): %v\n", os.Getenv("RANK"), err)
		os.Exit(3)
	}
	os.Exit(0)
}

func killWorker(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g, err := dist.Init(ctx, dist.Options{Rank: -1, Timeout: 30 * time.Second})
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	defer g.Destroy()
	if err := dcp.Save(ctx, dir, killState(g.Rank(), 1), g); err != nil {
		return fmt.Errorf("checkpoint 1: %w", err)
	}
	w := dcp.AsyncSave(ctx, dir, killState(g.Rank(), 2), g)
	if g.Rank() == 1 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	err = w.Wait(ctx)
	var re *dist.RankError
	switch {
	case err == nil:
		fmt.Println("SAVE-2 COMMITTED")
	case errors.As(err, &re) && re.Rank == 1:
		fmt.Printf("SAVE-2 FAILED naming rank 1: %v\n", err)
	default:
		return fmt.Errorf("checkpoint 2: %v, want success or a *dist.RankError naming rank 1", err)
	}
	return nil
}

func TestKillDuringAsyncSave(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 2 processes")
	}
	dir := t.TempDir()
	ps := disttest.StartProcs(t, 2, "TestKillDuringSaveWorker", "dcp-kill", killDirEnv+"="+dir)
	if err := disttest.WaitProcs(t, ps, 60*time.Second)[0]; err != nil {
		t.Fatalf("rank 0: %v\nstdout:\n%s\nstderr:\n%s", err, ps[0].Stdout.String(), ps[0].Stderr.String())
	}
	t.Logf("rank 0: %s", strings.TrimSpace(ps[0].Stdout.String()))
	// Whatever happened, the directory holds one whole checkpoint.
	got := tensor.New(tensor.Float32, 2*killElems)
	if err := dcp.Load(context.Background(), dir, dcp.State{"w": dcp.Whole(got)}, nil); err != nil {
		t.Fatalf("the checkpoint after the kill does not load: %v", err)
	}
	v := got.Float32s()
	want := v[0]
	if want != 1 && want != 2 {
		t.Fatalf("element 0 is %v, want 1 or 2", want)
	}
	for i, x := range v {
		if x != want {
			t.Fatalf("element %d is %v, element 0 %v: a mixture of two checkpoints", i, x, want)
		}
	}
	committed := strings.Contains(ps[0].Stdout.String(), "SAVE-2 COMMITTED")
	if committed != (want == 2) {
		t.Fatalf("rank 0 said %q, and the checkpoint holds checkpoint %v", strings.TrimSpace(ps[0].Stdout.String()), want)
	}
	t.Logf("the checkpoint that loads is checkpoint %v", want)
}
