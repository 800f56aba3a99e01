package dist

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/godist/godist/internal/launch/errorfile"
)

func TestErrorRecord(t *testing.T) {
	gone := &RankError{Rank: 3, Op: "all_reduce", Err: errors.New("EOF")}
	cases := []struct {
		name string
		err  error
		self int
		kind errorfile.Kind
		peer int
	}{
		{"rank gone", gone, 0, errorfile.PeerLost, 3},
		{"wrapped, on a failed group", fmt.Errorf("step 7: %w", fmt.Errorf("%w: %w", ErrGroupFailed, gone)), 0, errorfile.PeerLost, 3},
		{"aborted", &AbortError{Rank: 2, Reason: "size mismatch"}, 1, errorfile.Aborted, 2},
		{"timeout on one", &TimeoutError{Op: "barrier", Timeout: "1s", Waiting: []int{4}}, 0, errorfile.Timeout, 4},
		{"timeout on several", &TimeoutError{Op: "barrier", Timeout: "1s", Waiting: []int{4, 5}}, 0, errorfile.Timeout, -1},
		{"timeout through a chain", &TimeoutError{Op: "all_reduce", Timeout: "1s", Waiting: []int{0}, Chain: []int{0, 1}, Cause: "rank 1 (h, pid 9) has not reported for 5s"}, 2, errorfile.Timeout, 1},
		{"timeout in a cycle through this rank", &TimeoutError{Op: "all_reduce", Timeout: "1s", Waiting: []int{0}, Chain: []int{0, 2}, Cause: "ranks 0, 2 wait on each other"}, 2, errorfile.Timeout, 0},
		{"desync found here", &DesyncError{Rank: 1, Peer: 2}, 1, errorfile.Desync, 2},
		{"desync told by the other", &DesyncError{Rank: 2, Peer: 1}, 1, errorfile.Desync, 2},
		{"other", errors.New("bad batch"), 0, errorfile.Other, -1},
	}
	for _, c := range cases {
		r := errorRecord(c.err, c.self)
		if r.Kind != c.kind || r.Peer != c.peer || r.Rank != c.self || r.Message != c.err.Error() {
			t.Errorf("%s: %+v, want kind %s peer %d", c.name, r, c.kind, c.peer)
		}
	}
}

func TestRecordError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "error.json")
	t.Setenv("RANK", "1")
	t.Setenv(errorfile.TorchEnv, "")
	t.Setenv(ErrorFileEnv, "")
	if err := RecordError(errors.New("x")); err != nil {
		t.Fatalf("no file asked for: %v", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("a file was written although none was asked for")
	}
	// torchrun's name alone is enough.
	t.Setenv(errorfile.TorchEnv, path)
	if err := RecordError(&RankError{Rank: 0, Op: "broadcast", Err: errors.New("reset")}); err != nil {
		t.Fatal(err)
	}
	r, err := errorfile.Read(path)
	if err != nil || r.Rank != 1 || r.Kind != errorfile.PeerLost || r.Peer != 0 || r.PID != os.Getpid() || r.Time == 0 {
		t.Fatalf("record %+v, %v", r, err)
	}
	if RecordError(nil) != nil {
		t.Error("RecordError(nil) failed")
	}
}
