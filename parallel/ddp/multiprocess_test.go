package ddp_test

// A real multi-process DDP job: the test binary re-executes itself as 3
// worker processes (TestKillWorker with GODIST_DDP_KILL set) that meet
// through env:// over loopback TCP with a token. Rank 1 SIGKILLs itself in
// the middle of a backward pass; the survivors must get the death back
// from DDP.Backward as an error naming rank 1, with no panic.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/tensor"
)

const killModeEnv = "GODIST_DDP_KILL"

// TestKillWorker is a worker process of TestKillMidBackward; it does
// nothing in a normal test run. It trains until a Backward fails, then
// prints what failed and exits 0 if the error is a *dist.RankError.
func TestKillWorker(t *testing.T) {
	mode := os.Getenv(killModeEnv)
	if mode == "" {
		t.Skip("worker of TestKillMidBackward")
	}
	if err := killWorker(mode); err != nil {
		fmt.Fprintf(os.Stderr, "WORKER FAILED (rank %s): %v\n", os.Getenv("RANK"), err)
		os.Exit(3)
	}
	os.Exit(0)
}

func killWorker(mode string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g, err := dist.Init(ctx, dist.Options{Rank: -1, Timeout: 30 * time.Second})
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	defer g.Destroy()
	// Rank 1 dies in its tripwire's backward at step 3: after the head's
	// gradients are ready (their bucket may be on the wire), before the
	// first layer's (and before SyncBatchNorm's backward all-reduce).
	wire := &tripwire{at: 3}
	if g.Rank() == 1 {
		wire.trip = func() { syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	}
	var net nn.Layer
	rng := tensor.NewRNG(uint64(g.Rank()))
	switch mode {
	case "mlp":
		// Buckets of 1 KiB, so several are in flight when rank 1 dies.
		net = nn.NewSequential(nn.NewLinear(rng, 6, 64, true), wire, nn.NewTanh(), nn.NewLinear(rng, 64, 64, true), nn.NewTanh(), nn.NewLinear(rng, 64, 3, true))
	case "syncbn":
		net = syncBNNet(g, wire)
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	m, err := ddp.New(ctx, net, g, ddp.Options{BucketCapMB: 1.0 / 1024, FirstBucketCapMB: 1.0 / 1024})
	if err != nil {
		return err
	}
	for step := 1; step <= 10; step++ {
		x, y := batch(g.Rank(), step, 8)
		start := time.Now()
		err := m.Backward(ctx, nn.CrossEntropy(nn.Call(m, autograd.Const(x)), y))
		if err == nil {
			continue
		}
		var re *dist.RankError
		if !errors.As(err, &re) {
			return fmt.Errorf("step %d: Backward returned %T, want a *dist.RankError: %v", step, err, err)
		}
		fmt.Printf("BACKWARD-ERROR rank=%d step=%d dead=%d ms=%d err=%q\n", g.Rank(), step, re.Rank, time.Since(start).Milliseconds(), err.Error())
		return nil
	}
	return errors.New("every step succeeded")
}

func TestKillMidBackward(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 processes per mode")
	}
	for _, mode := range []string{"mlp", "syncbn"} {
		t.Run(mode, func(t *testing.T) { killMidBackward(t, mode) })
	}
}

func killMidBackward(t *testing.T, mode string) {
	ws := disttest.StartProcs(t, 3, "TestKillWorker", "ddp-kill-"+mode, killModeEnv+"="+mode)
	errs := disttest.WaitProcs(t, ws, 60*time.Second)
	for r, w := range ws {
		err := errs[r]
		out, serr := w.Stdout.String(), w.Stderr.String()
		if strings.Contains(serr, "panic") {
			t.Errorf("rank %d panicked:\n%s", r, serr)
		}
		if r == 1 {
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("rank 1 ended with %v, want SIGKILL\nstderr:\n%s", err, serr)
			}
			continue
		}
		if err != nil {
			t.Errorf("rank %d: %v\nstdout:\n%s\nstderr:\n%s", r, err, out, serr)
			continue
		}
		// Rank 1 dies in step 3, so a survivor's failing step is 3 or,
		// legitimately, 2: rank 1 finishes step 2's collectives from its
		// own side once its last frames are handed to the transport, but
		// a survivor may still be in step 2's last all-reduce, waiting
		// for frames that rank 1 or the other survivor has sent and its
		// readers have not yet delivered. The group fails when it hears
		// of the death (rank 1's connection ending, or the other
		// survivor's notice), and a failed group ends every pending call
		// (dist.Group's contract, as PyTorch's abort), that one included.
		// Seen under load: a receive from rank 0 or rank 1 of step 2's
		// all-reduce withdrawn with "context canceled", the frame still
		// in flight. Step 1 cannot fail (rank 1 finished step 2, which
		// needs every survivor's step-2 calls), nor can a survivor get
		// past step 3 (rank 1 never sends its first layer's bucket).
		m := regexp.MustCompile(fmt.Sprintf(`BACKWARD-ERROR rank=%d step=([23]) dead=1 ms=(\d+) `, r)).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("rank %d's output lacks \"BACKWARD-ERROR rank=%d step=2|3 dead=1\":\n%s", r, r, out)
			continue
		}
		ms, _ := strconv.Atoi(m[2])
		if ms > 2000 {
			t.Errorf("rank %d: Backward took %d ms to report the death, want < 2000", r, ms)
		}
		t.Logf("%s", strings.TrimSpace(out))
	}
}
