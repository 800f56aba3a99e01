package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// build compiles the launcher and this example into dir.
func build(t *testing.T, dir string) (godist, prog string) {
	t.Helper()
	godist, prog = filepath.Join(dir, "godist"), filepath.Join(dir, "ddp-fashion-mnist")
	for _, b := range [][2]string{{godist, "github.com/godist/godist/cmd/godist"}, {prog, "github.com/godist/godist/examples/ddp-fashion-mnist"}} {
		if out, err := exec.Command("go", "build", "-o", b[0], b[1]).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b[1], err, out)
		}
	}
	return godist, prog
}

func runLauncher(t *testing.T, godist string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, godist, args...)
	cmd.Env = append(os.Environ(), "GODIST_FASHION_MNIST=")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// TestKilledRankRecovers runs the example under godist run: rank 1 is
// SIGKILLed in the second epoch. Without restarts the job fails with a
// report naming rank 1 and SIGKILL, and rank 0's error names rank 1; with
// --max-restarts 1 the job resumes from the last checkpoint and finishes.
func TestKilledRankRecovers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the launcher")
	}
	dir := t.TempDir()
	godist, prog := build(t, dir)
	subset := filepath.Join("..", "..", "testdata", "fashion-mnist")
	common := func(ckpt string) []string {
		return []string{prog, "--data", subset, "--epochs", "2", "--max-steps", "8", "--kill-at", "1:11",
			"--checkpoint", ckpt, "--plot", "", "--resume"}
	}

	_, stderr, err := runLauncher(t, godist, append([]string{"run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "0"}, common(filepath.Join(dir, "a.safetensors"))...)...)
	if err == nil {
		t.Fatal("the job succeeded although rank 1 was killed and restarts were off")
	}
	for _, want := range []string{"SIGKILL", "rank 1"} {
		if !strings.Contains(stderr, want) {
			t.Fatalf("failure report lacks %q:\n%s", want, stderr)
		}
	}
	if !strings.Contains(stderr, "rank 1 is gone") && !strings.Contains(stderr, "connection to rank 1 lost") {
		t.Errorf("rank 0's error does not name rank 1:\n%s", stderr)
	}

	stdout, stderr, err := runLauncher(t, godist, append([]string{"run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "1"}, common(filepath.Join(dir, "b.safetensors"))...)...)
	if err != nil {
		t.Fatalf("with a restart: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "resumed from") {
		t.Errorf("the restarted job did not resume from the checkpoint:\n%s", stderr)
	}
	var res result
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	last := lines[len(lines)-1]
	if i := strings.Index(last, "{"); i >= 0 {
		last = last[i:] // the launcher prefixes worker output
	}
	if err := json.Unmarshal([]byte(last), &res); err != nil {
		t.Fatalf("last line %q: %v", last, err)
	}
	if len(res.EpochAcc) != 2 || res.TestAcc <= 0.3 {
		t.Fatalf("result after recovery %+v", res)
	}
}
