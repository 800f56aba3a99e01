package disttest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Proc is one worker process started by StartProcs.
type Proc struct {
	Rank           int
	Cmd            *exec.Cmd
	Stdout, Stderr bytes.Buffer
	done           chan error
}

// StartProcs starts world processes of the running test binary, each
// running only the test named worker (which should skip unless its
// environment marks it as a worker), as ranks of one job over env://:
// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT on loopback, a fresh
// GODIST_TOKEN, GODIST_RUN_ID=runID, GODIST_HOST, and env.
func StartProcs(t testing.TB, world int, worker, runID string, env ...string) []*Proc {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	tok := make([]byte, 16)
	rand.Read(tok)
	ps := make([]*Proc, world)
	for r := range world {
		p := &Proc{Rank: r, done: make(chan error, 1)}
		p.Cmd = exec.Command(os.Args[0], "-test.run=^"+worker+"$", "-test.count=1", "-test.timeout=90s")
		p.Cmd.Env = append(append(os.Environ(),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(world), "LOCAL_RANK="+strconv.Itoa(r),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"GODIST_TOKEN="+hex.EncodeToString(tok), "GODIST_RUN_ID="+runID, "GODIST_HOST=127.0.0.1"), env...)
		p.Cmd.Stdout, p.Cmd.Stderr = &p.Stdout, &p.Stderr
		if err := p.Cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.done <- p.Cmd.Wait() }()
		ps[r] = p
	}
	return ps
}

// WaitProcs waits for every process, at most limit in all, and returns
// each one's Wait error; on the limit it kills them all and fails t with
// the late one's output.
func WaitProcs(t testing.TB, ps []*Proc, limit time.Duration) []error {
	t.Helper()
	deadline := time.After(limit)
	errs := make([]error, len(ps))
	for i, p := range ps {
		select {
		case errs[i] = <-p.done:
		case <-deadline:
			for _, p := range ps {
				p.Cmd.Process.Kill()
			}
			t.Fatalf("rank %d did not exit within %v\nstdout:\n%s\nstderr:\n%s", p.Rank, limit, p.Stdout.String(), p.Stderr.String())
		}
	}
	return errs
}
