package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/store"
)

func openFile(t *testing.T, path string, opts store.FileOptions) store.Store {
	t.Helper()
	s, err := store.NewFile(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestFileJobMismatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store")
	s := openFile(t, path, store.FileOptions{JobID: "A"})
	s.Close()
	_, err := store.NewFile(path, store.FileOptions{JobID: "B"})
	if err == nil || !strings.Contains(err.Error(), `belongs to job "A", not "B"`) || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), "fresh path") {
		t.Fatalf("got %v", err)
	}
	if s, err := store.NewFile(path, store.FileOptions{JobID: "A"}); err != nil {
		t.Fatalf("reopening with the right job: %v", err)
	} else {
		s.Close()
	}

	junk := filepath.Join(t.TempDir(), "junk")
	os.WriteFile(junk, []byte("hello world\n"), 0o600)
	if _, err := store.NewFile(junk, store.FileOptions{JobID: "A"}); err == nil || !strings.Contains(err.Error(), "not a godist file store") {
		t.Fatalf("junk file: got %v", err)
	}
}

func TestFileShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store")
	a := openFile(t, path, store.FileOptions{JobID: "j"})
	b := openFile(t, path, store.FileOptions{JobID: "j"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan string, 1)
	go func() {
		v, err := b.Get(ctx, "k")
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(v)
	}()
	time.Sleep(10 * time.Millisecond)
	if err := a.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != "v" {
		t.Fatalf("b read %q", v)
	}
	if _, err := a.Add(ctx, "n", 2); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Add(ctx, "n", 3); err != nil || n != 5 {
		t.Fatalf("b.Add = %d, %v", n, err)
	}
	if ok, err := b.Delete(ctx, "k"); err != nil || !ok {
		t.Fatalf("b.Delete = %v, %v", ok, err)
	}
	if ok, _ := a.Check(ctx, "k"); ok {
		t.Fatal("a still sees the deleted key")
	}
	// A fresh store replays the log.
	c := openFile(t, path, store.FileOptions{JobID: "j"})
	if n, err := c.NumKeys(ctx); err != nil || n != 1 {
		t.Fatalf("replayed NumKeys = %d, %v", n, err)
	}
}

func TestFileTornRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a := openFile(t, path, store.FileOptions{JobID: "j"})
	a.Set(ctx, "k", []byte("v"))
	// A writer that crashed halfway through a record.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{'S', 0, 0, 0, 1, 0, 0, 0, 9, 'x', 'p'})
	f.Close()
	b := openFile(t, path, store.FileOptions{JobID: "j"})
	if v, err := b.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get past a torn record = %q, %v", v, err)
	}
	if err := b.Set(ctx, "k2", []byte("w")); err != nil {
		t.Fatal(err)
	}
	c := openFile(t, path, store.FileOptions{JobID: "j"})
	for _, s := range []store.Store{a, c} {
		if v, err := s.Get(ctx, "k2"); err != nil || string(v) != "w" {
			t.Fatalf("Get after the torn record was cut = %q, %v", v, err)
		}
	}
}

func TestFileWorldSizeRemoves(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store")
	a := openFile(t, path, store.FileOptions{JobID: "j", WorldSize: 2})
	b := openFile(t, path, store.FileOptions{JobID: "j", WorldSize: 2})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("file gone after the first of two closes: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file left after the last close: %v", err)
	}
}

// TestFileProcesses runs the file store across real processes: the test
// binary re-executes itself as workers that count and rendezvous through
// the file.
func TestFileProcesses(t *testing.T) {
	const envPath, envRank = "GODIST_FILESTORE_TEST_PATH", "GODIST_FILESTORE_TEST_RANK"
	const workers, adds = 2, 50
	if path := os.Getenv(envPath); path != "" {
		rank, _ := strconv.Atoi(os.Getenv(envRank))
		if err := fileWorker(path, rank, adds); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	path := filepath.Join(t.TempDir(), "store")
	s := openFile(t, path, store.FileOptions{JobID: "j"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var cmds []*exec.Cmd
	for r := range workers {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFileProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), envPath+"="+path, envRank+"="+strconv.Itoa(r))
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := cmd.Wait(); err != nil {
				t.Errorf("worker %d: %v\n%s", r, err, out.String())
			}
		}()
		cmds = append(cmds, cmd)
	}
	// The workers block until "go" exists.
	if err := s.Set(ctx, "go", []byte("1")); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, workers)
	for r := range keys {
		keys[r] = fmt.Sprintf("done/%d", r)
	}
	if err := s.Wait(ctx, keys...); err != nil {
		t.Fatal(err)
	}
	n, err := s.Add(ctx, "counter", 0)
	if err != nil || n != workers*adds {
		t.Fatalf("counter = %d, %v; want %d", n, err, workers*adds)
	}
	for r := range workers {
		if v, err := s.Get(ctx, fmt.Sprintf("pid/%d", r)); err != nil || string(v) != strconv.Itoa(cmds[r].Process.Pid) {
			t.Errorf("pid/%d = %q, %v; want %d", r, v, err, cmds[r].Process.Pid)
		}
	}
}

func fileWorker(path string, rank, adds int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := store.NewFile(path, store.FileOptions{JobID: "j"})
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.Get(ctx, "go"); err != nil {
		return err
	}
	if err := s.Set(ctx, fmt.Sprintf("pid/%d", rank), []byte(strconv.Itoa(os.Getpid()))); err != nil {
		return err
	}
	for range adds {
		if _, err := s.Add(ctx, "counter", 1); err != nil {
			return err
		}
	}
	return s.Set(ctx, fmt.Sprintf("done/%d", rank), nil)
}
