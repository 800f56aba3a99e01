package spawn_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/spawn"
	"github.com/godist/godist/tensor"
)

// spawnModeEnv selects what TestSpawnProgram does; unset, it is skipped.
const spawnModeEnv = "GODIST_TEST_SPAWN_MODE"

// TestSpawnProgram is the program that TestSpawn runs as a subprocess:
// spawn.Run re-executes the test binary with the same -test.run, so the
// children land here too and run fn.
func TestSpawnProgram(t *testing.T) {
	mode := os.Getenv(spawnModeEnv)
	if mode == "" {
		t.Skip("run by TestSpawn")
	}
	if os.Getenv("RANK") != "" && !spawn.IsWorker() {
		t.Fatal("the parent has RANK set")
	}
	const world = 3
	err := spawn.Run(world, func(rank int) error {
		if !spawn.IsWorker() {
			return errors.New("IsWorker is false in a child")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		g, err := dist.Init(ctx, dist.Options{Timeout: 20 * time.Second})
		if err != nil {
			return err
		}
		defer g.Destroy()
		if g.Rank() != rank || g.Size() != world {
			return fmt.Errorf("Init gave rank %d of %d, want %d of %d", g.Rank(), g.Size(), rank, world)
		}
		x := tensor.FromInt64([]int64{int64(rank + 1)}, 1)
		if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
			return err
		}
		if got := x.Item(); got != 6 {
			return fmt.Errorf("all_reduce gave %v, want 6", got)
		}
		if mode == "fail" && rank == 1 {
			return errors.New("rank 1 fails on purpose")
		}
		if mode == "blame" {
			// Rank 0 fails first, blaming rank 2 in its error file but not
			// in its text; rank 2 fails later on its own: the file, read
			// by the parent, makes rank 2 the root cause.
			switch rank {
			case 0:
				return quiet{&dist.RankError{Rank: 2, Op: "all_reduce", Err: errors.New("connection lost")}}
			case 2:
				time.Sleep(150 * time.Millisecond)
				return errors.New("rank 2 fails on its own")
			}
			return nil
		}
		if mode == "kill" && rank == 2 {
			p, _ := os.FindProcess(os.Getpid())
			p.Kill()
			time.Sleep(time.Minute)
		}
		return g.Barrier(ctx)
	})
	if spawn.IsWorker() {
		t.Fatal("Run returned in a child")
	}
	if err != nil {
		var se *spawn.Error
		if errors.As(err, &se) {
			fmt.Printf("SPAWN-ERROR rank=%d code=%d signal=%d\n", se.Rank, se.ExitCode, int(se.Signal))
		}
		fmt.Printf("SPAWN-FAILED %v\n", strings.ReplaceAll(err.Error(), "\n", " | "))
		return
	}
	fmt.Println("SPAWN-OK")
}

func TestSpawn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, c := range []struct{ mode, want string }{
		{"ok", "SPAWN-OK"},
		{"fail", "SPAWN-ERROR rank=1 code=1 signal=0"},
		{"kill", "SPAWN-ERROR rank=2 code=-1 signal=9"},
		{"blame", "SPAWN-ERROR rank=2 code=1 signal=0"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSpawnProgram$", "-test.v")
			cmd.Env = append(os.Environ(), spawnModeEnv+"="+c.mode)
			timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
			defer timer.Stop()
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the spawning program failed: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Fatalf("output lacks %q:\n%s", c.want, out)
			}
			if c.mode == "fail" && !strings.Contains(string(out), "rank 1 fails on purpose") {
				t.Fatalf("the error lacks the child's stderr:\n%s", out)
			}
			if c.mode == "blame" && !strings.Contains(string(out), "rank 2 fails on its own") {
				t.Fatalf("the error lacks rank 2's stderr:\n%s", out)
			}
		})
	}
}

// quiet hides a dist error's text (it says nothing of the rank it wraps)
// but not the error, which errors.As still finds: RecordError's kind and
// blamed peer, not the text, must decide the root cause.
type quiet struct{ err error }

func (q quiet) Error() string { return "something went wrong" }
func (q quiet) Unwrap() error { return q.err }
