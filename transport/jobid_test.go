package transport_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/internal/handshake"
	"github.com/godist/godist/store"
	"github.com/godist/godist/transport"
)

// TestTCPRefusesOtherJobWithoutToken (issue 27, item 9): two ranks that
// find each other in one store but belong to different jobs, with no
// token, do not connect: the rank that dials is refused with a job id
// mismatch naming both.
func TestTCPRefusesOtherJobWithoutToken(t *testing.T) {
	st := store.NewMem()
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r0 := make(chan error, 1)
	short, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	go func() {
		e, err := transport.NewTCP(short, transport.TCPOptions{Rank: 0, Size: 2, Store: st, JobID: "slurm:1.0", Host: "127.0.0.1"})
		if err == nil {
			e.Close()
		}
		r0 <- err
	}()
	start := time.Now()
	e, err := transport.NewTCP(ctx, transport.TCPOptions{Rank: 1, Size: 2, Store: st, JobID: "slurm:2.0", Host: "127.0.0.1"})
	if err == nil {
		e.Close()
		t.Fatal("rank 1 of another job connected to rank 0")
	}
	var me *handshake.MismatchError
	if !errors.As(err, &me) || me.Field != "job id" || !strings.Contains(err.Error(), `"slurm:1.0"`) || !strings.Contains(err.Error(), `"slurm:2.0"`) {
		t.Fatalf("rank 1: %v, want a job id mismatch naming both jobs", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("rank 1 took %v to be refused", d)
	}
	if err := <-r0; err == nil {
		t.Error("rank 0 formed a job with the other job's rank")
	}
}
